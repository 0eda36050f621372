// SPDX-License-Identifier: MIT
// FLOPs of a call (tw_torch.h, tw_torch_flops): forward from the shapes of the call's tensors, and
// backward for the autograd nodes the call created, exactly as torch.utils.flop_counter's
// FlopCounterMode counts the aten operators those run: mm, addmm, bmm, baddbmm (2·m·n·k),
// convolution and convolution_backward (its output mask; grad-weight counted as a convolution over
// the whole input's channels, groups or not), and the fused attention kernels with its sdpa formulas.
// What FlopCounterMode leaves uncounted stays uncounted: dot, mv (so matmul of a matrix and a
// vector, and the folded matmuls that end in mv), elementwise products (an einsum with nothing to
// contract), bias additions. One difference, on purpose: CPU's fused attention kernel
// (_scaled_dot_product_flash_attention_for_cpu) has no formula in FlopCounterMode, which counts it as
// 0; it is counted here with the same formulas as the CUDA kernels (FlopCounterMode agrees when given
// them in custom_mapping).
//
// Recurrent networks (gru, lstm, rnn_tanh, rnn_relu and their cells: what nn.GRU, nn.LSTM, nn.RNN
// and the cells call through torch._VF): on CPU each layer and direction runs as one addmm of its
// input's projection over all the steps, then per step the hidden state's addmm (and LSTM's
// projection): 2 x (the input's rows: steps x batch) x (the weight matrices' elements) forward, and
// backward the AddmmBackward0 and MmBackward0 nodes of every step, each found and counted as above.
// The LSTM that oneDNN runs in one kernel per layer and direction (mkldnn_rnn_layer, the default
// for float32 on CPU without projections) has no formula in FlopCounterMode, which counts it as 0;
// it is counted here as FlopCounterMode counts the same LSTM with oneDNN off (the path above): the
// same forward, and for each MkldnnRnnLayerBackward0 node the products the steps' nodes would have
// made, with the gradients its inputs need. cuDNN's and MIOpen's one node for the whole network
// is counted the same way, from the call's arguments.
//
// Backward: each compute node's FLOPs are known when the call ends (its shapes, and which inputs need
// a gradient: the node's next edges), so they are computed then, once, and travel with the node's
// link (python/core/backward.c) to the node's record when backward runs it, as often as it runs.
// The nodes are found from the result's grad_fn, among those created during the call on this thread
// (sequence numbers [seq_begin, seq_end)): a call's compute node is not always its result's grad_fn
// (linear on a 3-D input ends in a view).
#include <algorithm>
#include <cstring>
#include <typeinfo>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/generated/Functions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include "tw_torch.h"

namespace {

using torch::autograd::Node;
namespace gen = torch::autograd::generated;

constexpr int kMaxDims = 16;

// A tensor's sizes, as plain integers.
struct Shape {
    int dim = 0;
    int64_t size[kMaxDims];
    int64_t operator[](int i) const { return size[i < 0 ? dim + i : i]; }
    // the product of sizes [from, to) (negative: from the end)
    uint64_t prod(int from, int to) const
    {
        if (from < 0)
            from += dim;
        if (to < 0)
            to += dim;
        uint64_t p = 1;
        for (int i = from; i < to; i++)
            p *= (uint64_t)size[i];
        return p;
    }
};

bool shape_of(c10::SymIntArrayRef sizes, Shape &out)
{
    if (sizes.size() > (size_t)kMaxDims)
        return false;
    out.dim = (int)sizes.size();
    for (int i = 0; i < out.dim; i++) {
        auto v = sizes[i].maybe_as_int();
        if (!v.has_value() || *v < 0)
            return false;
        out.size[i] = *v;
    }
    return true;
}

// The tensor obj holds, or nullptr: not a tensor, undefined, nested, or with symbolic sizes.
const at::Tensor *tensor_of(PyObject *obj)
{
    if (obj == nullptr || THPVariableClass == nullptr || !PyObject_TypeCheck(obj, (PyTypeObject *)THPVariableClass))
        return nullptr;
    const at::Tensor &t = THPVariable_Unpack(obj);
    if (!t.defined() || t.is_nested() || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides() ||
        t.dim() > kMaxDims)
        return nullptr;
    return &t;
}

bool shape_of(const at::Tensor *t, Shape &out)
{
    if (t == nullptr)
        return false;
    auto sizes = t->sizes();
    out.dim = (int)sizes.size();
    for (int i = 0; i < out.dim; i++)
        out.size[i] = sizes[i];
    return true;
}

// An argument by position, else by keyword (borrowed), or nullptr.
PyObject *argument(PyObject *const *args, size_t nargs, PyObject *kwnames, size_t position, const char *name)
{
    if (position < nargs)
        return args[position];
    if (kwnames == nullptr)
        return nullptr;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), name) == 0)
            return args[nargs + (size_t)i];
    return nullptr;
}

// ---- forward ------------------------------------------------------------------------------------

// at::matmul's folding (aten/src/ATen/native/LinearAlgebra.cpp, should_fold): whether a >= 3-D
// tensor times a 1-D or 2-D one is done as one mm or mv on the larger one's folded view.
bool matmul_folds(const at::Tensor &a, const at::Tensor &b, bool has_out)
{
    const bool a_larger = a.dim() >= b.dim();
    const at::Tensor t1 = a_larger ? a : b.mT();
    const int64_t dim_t1 = t1.dim(), dim_t2 = a_larger ? b.dim() : a.dim();
    if (!(dim_t1 >= 3 && dim_t2 <= 2))
        return false;
    const bool t2_requires_grad = a_larger ? b.requires_grad() : a.requires_grad();
    if (t2_requires_grad && !has_out)
        return true;
    if (a.dim() == 2)
        return false;
    if (t1.numel() == 0)
        return true;
    auto sizes = t1.sizes();
    auto strides = t1.strides();
    for (int64_t i = 0; i < dim_t1 - 2; i++)
        if (strides[i] != strides[i + 1] * sizes[i + 1])
            return false;
    return true;
}

// matmul: what at::matmul dispatches to. dot and mv count nothing (FlopCounterMode has no formula
// for them), nor the folded products of a vector; every other case is an mm or a bmm of
// (broadcast batch) x n x m x p, folded or not.
uint64_t matmul_flops(const at::Tensor *a, const at::Tensor *b, bool has_out)
{
    if (a == nullptr || b == nullptr)
        return 0;
    Shape x, y;
    shape_of(a, x);
    shape_of(b, y);
    if (x.dim == 0 || y.dim == 0 || (x.dim <= 2 && y.dim == 1))
        return 0;
    if ((x.dim == 1 || y.dim == 1) && matmul_folds(*a, *b, has_out))
        return 0; /* an mv on the folded tensor */
    uint64_t n = x.dim > 1 ? (uint64_t)x[-2] : 1, m = (uint64_t)x[-1], p = y.dim > 1 ? (uint64_t)y[-1] : 1;
    // the broadcast batch
    uint64_t batch = 1;
    int bx = x.dim > 2 ? x.dim - 2 : 0, by = y.dim > 2 ? y.dim - 2 : 0;
    for (int i = 0; i < (bx > by ? bx : by); i++) {
        int64_t sx = i < bx ? x.size[bx - 1 - i] : 1, sy = i < by ? y.size[by - 1 - i] : 1;
        batch *= (uint64_t)(sx == 1 ? sy : sx);
    }
    return 2 * batch * n * m * p;
}

// einsum of two operands (aten/src/ATen/native/Linear.cpp): labels in only one operand and not in
// the output are summed away first; then, when some label is contracted (in both, size > 1 in both,
// not in the output), one bmm over every remaining label; otherwise an elementwise mul (0 here).
uint64_t einsum_flops(PyObject *equation, const at::Tensor *a, const at::Tensor *b)
{
    if (a == nullptr || b == nullptr || !PyUnicode_Check(equation))
        return 0;
    Py_ssize_t length;
    const char *eq = PyUnicode_AsUTF8AndSize(equation, &length);
    if (eq == nullptr) {
        PyErr_Clear();
        return 0;
    }
    constexpr int kLabels = 52, kEllipsis = 52;
    const at::Tensor *ops[2] = {a, b};
    int labels[2][kMaxDims + 1], n_labels[2] = {0, 0};
    const char *arrow = strstr(eq, "->");
    const char *lhs_end = arrow != nullptr ? arrow : eq + length;
    int op = 0;
    bool ellipsis_in[2] = {false, false};
    for (const char *c = eq; c < lhs_end; c++) {
        if (*c == ' ')
            continue;
        if (*c == ',') {
            if (++op > 1)
                return 0;
            continue;
        }
        int label;
        if (*c == '.') {
            if (c + 2 >= lhs_end || c[1] != '.' || c[2] != '.' || ellipsis_in[op])
                return 0;
            c += 2;
            label = kEllipsis;
            ellipsis_in[op] = true;
        } else if (*c >= 'A' && *c <= 'Z') {
            label = *c - 'A';
        } else if (*c >= 'a' && *c <= 'z') {
            label = *c - 'a' + 26;
        } else {
            return 0;
        }
        if (n_labels[op] > kMaxDims)
            return 0;
        labels[op][n_labels[op]++] = label;
    }
    if (op != 1)
        return 0;
    // sizes per label and operand (1: absent), and the ellipsis' dimensions, right-aligned
    int64_t size[2][kLabels];
    int64_t ell[2][kMaxDims];
    int ell_dims = 0, count[kLabels] = {0};
    for (int i = 0; i < 2; i++) {
        for (int l = 0; l < kLabels; l++)
            size[i][l] = 1;
        Shape s;
        shape_of(ops[i], s);
        int named = n_labels[i] - (ellipsis_in[i] ? 1 : 0);
        if (ellipsis_in[i] ? named > s.dim : named != s.dim)
            return 0;
        int covered = s.dim - named, d = 0;
        if (covered > ell_dims)
            ell_dims = covered;
        bool seen[kLabels] = {false};
        for (int k = 0; k < n_labels[i]; k++) {
            int l = labels[i][k];
            if (l == kEllipsis) {
                d += covered;
                continue;
            }
            size[i][l] = s.size[d++];
            if (!seen[l])
                count[l]++;
            seen[l] = true;
        }
    }
    for (int i = 0; i < 2; i++) {
        Shape s;
        shape_of(ops[i], s);
        int named = n_labels[i] - (ellipsis_in[i] ? 1 : 0), covered = s.dim - named, start = 0;
        for (int j = 0; j < ell_dims; j++)
            ell[i][j] = 1;
        if (ellipsis_in[i]) {
            for (int k = 0; k < n_labels[i] && labels[i][k] != kEllipsis; k++)
                start++;
            for (int j = 0; j < covered; j++)
                ell[i][ell_dims - covered + j] = s.size[start + j];
        }
    }
    // the output's labels: explicit, or those seen once (and the ellipsis)
    bool in_output[kLabels] = {false};
    bool ellipsis_out = arrow == nullptr;
    if (arrow != nullptr) {
        for (const char *c = arrow + 2; c < eq + length; c++) {
            if (*c == '.') {
                ellipsis_out = true;
                c += 2;
            } else if (*c >= 'A' && *c <= 'Z') {
                in_output[*c - 'A'] = true;
            } else if (*c >= 'a' && *c <= 'z') {
                in_output[*c - 'a' + 26] = true;
            }
        }
    } else {
        for (int l = 0; l < kLabels; l++)
            in_output[l] = count[l] == 1;
    }
    uint64_t kept = 1, contracted = 1;
    bool contracts = false;
    auto dimension = [&](int64_t sa, int64_t sb, bool out) {
        bool la = sa != 1, lb = sb != 1;
        if (!out) {
            if (la && lb) {
                contracts = true;
                contracted *= (uint64_t)sa;
            }
        } else if (la || lb) {
            kept *= (uint64_t)(la ? sa : sb);
        }
    };
    for (int l = 0; l < kLabels; l++)
        if (count[l] > 0)
            dimension(size[0][l], size[1][l], in_output[l]);
    for (int j = 0; j < ell_dims; j++)
        dimension(ell[0][j], ell[1][j], ellipsis_out);
    return contracts ? 2 * kept * contracted : 0;
}

// A convolution's shapes, batched (an unbatched input and output get a batch of 1, as
// convolution's own shapes have it), or false.
bool conv_shapes(const at::Tensor *input, const at::Tensor *weight, const at::Tensor *output, Shape &x, Shape &w,
                 Shape &y)
{
    if (!shape_of(input, x) || !shape_of(weight, w) || !shape_of(output, y) || w.dim < 3 || x.dim != y.dim ||
        x.dim < w.dim - 1 || x.dim > w.dim || x.dim >= kMaxDims)
        return false;
    if (x.dim == w.dim - 1) {
        for (Shape *s : {&x, &y}) {
            memmove(s->size + 1, s->size, sizeof(int64_t) * (size_t)s->dim);
            s->size[0] = 1;
            s->dim++;
        }
    }
    return true;
}

// conv_flop_count: prod(spatial) * prod(kernel) * batch * w[0] * w[1] * 2, where spatial is the
// output's (the input's for a transposed convolution)
uint64_t conv_flops(const Shape &x, const Shape &w, const Shape &y, bool transposed)
{
    return (transposed ? x.prod(2, x.dim) : y.prod(2, y.dim)) * w.prod(2, w.dim) * (uint64_t)x[0] *
           (uint64_t)w[0] * (uint64_t)w[1] * 2;
}

// sdpa_flop_count, with batch and heads as one (any leading dimensions)
uint64_t sdpa_flops(const Shape &q, const Shape &k, const Shape &v)
{
    uint64_t bh = q.prod(0, -2), s_q = (uint64_t)q[-2], d_q = (uint64_t)q[-1], s_k = (uint64_t)k[-2],
             d_v = (uint64_t)v[-1];
    return 2 * bh * s_q * d_q * s_k + 2 * bh * s_q * s_k * d_v;
}

// sdpa_backward_flop_count: the scores recomputed, then the gradients of both products
uint64_t sdpa_backward_flops(const Shape &q, const Shape &k, const Shape &v)
{
    uint64_t bh = q.prod(0, -2), s_q = (uint64_t)q[-2], d_q = (uint64_t)q[-1], s_k = (uint64_t)k[-2],
             d_v = (uint64_t)v[-1];
    return 2 * bh * s_q * s_k * (3 * d_q + 2 * d_v);
}

// ---- recurrent networks ------------------------------------------------------------------------

// One layer and direction of a recurrent network, as the steps' products see it: rows in all
// (steps x batch, or the sum of a packed input's batch sizes) and in its first step; the gates'
// width (G x hidden: 4 for LSTM, 3 for GRU, 1 for RNN), the input's width, the width of the hidden
// state the gates read (LSTM's projection's, when it has one), LSTM's projection (hidden -> proj,
// 0: none); which inputs need a gradient.
struct RnnLayer {
    uint64_t rows = 0, first_rows = 0, gates = 0, in = 0, state = 0, hidden = 0, proj = 0;
    bool input_grad = false, w_ih_grad = false, w_hh_grad = false, w_hr_grad = false, hx_grad = false;
};

// Its backward as the steps' AddmmBackward0 and MmBackward0 nodes count it: the input's projection
// (one product over all the rows: the input's gradient when it needs one, W_ih's when it does), each
// step's hidden product (W_hh's gradient when needed, and the previous state's: every step's but the
// first, whose state is hx, which needs one only when hx does), and LSTM's projection the same way
// (its input, a step's cell output, always needs one). Nothing needs a gradient: no node, nothing.
uint64_t rnn_layer_backward(const RnnLayer &l)
{
    if (l.rows == 0 || l.first_rows > l.rows)
        return 0;
    uint64_t flops = 0, product = 2 * l.gates;
    if (l.input_grad)
        flops += product * l.rows * l.in;
    if (l.w_ih_grad)
        flops += product * l.rows * l.in;
    if (l.w_hh_grad)
        flops += product * l.rows * l.state;
    flops += product * (l.rows - l.first_rows + (l.hx_grad ? l.first_rows : 0)) * l.state;
    if (l.proj != 0)
        flops += 2 * l.rows * l.hidden * l.proj * (l.w_hr_grad ? 2 : 1);
    return flops;
}

// The tensors of a list or tuple argument (borrowed items), or false.
bool tensor_list(PyObject *list, std::vector<const at::Tensor *> &out)
{
    if (list == nullptr || !(PyList_Check(list) || PyTuple_Check(list)))
        return false;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
    PyObject **items = PySequence_Fast_ITEMS(list);
    out.clear();
    for (Py_ssize_t i = 0; i < n; i++) {
        const at::Tensor *t = tensor_of(items[i]);
        if (t == nullptr)
            return false;
        out.push_back(t);
    }
    return true;
}

// The recurrent functions read sizes through sizes() only: calls of dim(), size() and numel() from
// here made GCC stop inlining them, which cost F.linear's formula ~40 instructions a call.
uint64_t elements(c10::IntArrayRef sizes)
{
    uint64_t n = 1;
    for (int64_t s : sizes)
        n *= (uint64_t)s;
    return n;
}

// A bool argument's truth, or fallback (absent, or no truth).
bool flag_argument(PyObject *obj, bool fallback)
{
    if (obj == nullptr)
        return fallback;
    int truth = PyObject_IsTrue(obj);
    if (truth < 0) {
        PyErr_Clear();
        return fallback;
    }
    return truth == 1;
}

// An int or bool argument, or fallback (not one, or absent).
int64_t int_argument(PyObject *obj, int64_t fallback)
{
    if (obj == nullptr || !PyLong_Check(obj))
        return fallback;
    int64_t v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return fallback;
    }
    return v;
}

// The whole backward of a recurrent network's call, layer by layer (rnn_layer_backward), for the
// kernels that do it in one node (cuDNN's, MIOpen's): from its input (rows in all), its weights
// (params: per layer and direction w_ih, w_hh, then b_ih, b_hh with biases, then w_hr with a
// projection), hx (LSTM's: h0 and c0) and which of them need a gradient. 0 when unreadable.
uint64_t rnn_stack_backward(const at::Tensor &input, uint64_t rows, const at::Tensor *batch_sizes,
                            const std::vector<const at::Tensor *> &params, const std::vector<const at::Tensor *> &hx,
                            bool biases, int64_t layers, int64_t directions, bool batch_first)
{
    if (layers <= 0 || params.size() % (size_t)(layers * directions) != 0)
        return 0;
    const int64_t per = (int64_t)params.size() / (layers * directions);
    const int64_t proj = per - 2 - (biases ? 2 : 0);
    if (proj < 0 || proj > 1)
        return 0;
    // the first step's rows: the batch (packed: the first batch size; in reverse the last one)
    uint64_t batch = 1, batch_reverse = 1;
    if (batch_sizes != nullptr) {
        const uint64_t steps = elements(batch_sizes->sizes());
        if (!batch_sizes->device().is_cpu() || batch_sizes->scalar_type() != at::kLong || steps == 0 ||
            !batch_sizes->is_contiguous())
            return 0;
        const int64_t *sizes = batch_sizes->data_ptr<int64_t>();
        batch = (uint64_t)sizes[0];
        batch_reverse = (uint64_t)sizes[steps - 1];
    } else if (input.sizes().size() == 3) {
        batch = batch_reverse = (uint64_t)input.sizes()[batch_first ? 0 : 1];
    }
    const bool hx_grad = !hx.empty() && hx[0]->requires_grad();
    const bool cx_grad = hx.size() > 1 && hx[1]->requires_grad(); // c0 reaches h too
    bool input_grad = input.requires_grad();
    uint64_t flops = 0;
    for (int64_t layer = 0; layer < layers; layer++) {
        bool layer_grad = false;
        for (int64_t d = 0; d < directions; d++) {
            const at::Tensor *const *w = &params[(size_t)((layer * directions + d) * per)];
            c10::IntArrayRef w_ih = w[0]->sizes(), w_hh = w[1]->sizes(), w_hr = w[per - 1]->sizes();
            if (w_ih.size() != 2 || w_hh.size() != 2 || (proj && w_hr.size() != 2))
                return 0;
            RnnLayer l;
            l.rows = rows;
            l.first_rows = d == 0 ? batch : batch_reverse;
            l.gates = (uint64_t)w_ih[0];
            l.in = (uint64_t)w_ih[1];
            l.state = (uint64_t)w_hh[1];
            if (proj) {
                l.proj = (uint64_t)w_hr[0];
                l.hidden = (uint64_t)w_hr[1];
                l.w_hr_grad = w[per - 1]->requires_grad();
            }
            l.input_grad = input_grad;
            l.w_ih_grad = w[0]->requires_grad();
            l.w_hh_grad = w[1]->requires_grad();
            l.hx_grad = hx_grad;
            bool any = input_grad || hx_grad || cx_grad;
            for (int64_t i = 0; i < per; i++)
                any = any || w[i]->requires_grad();
            if (any)
                flops += rnn_layer_backward(l);
            layer_grad = layer_grad || any;
        }
        input_grad = layer_grad; // the next layer's input is this one's output
    }
    return flops;
}

// gru, lstm, rnn_tanh, rnn_relu: (input, hx, params, has_biases, num_layers, dropout, train,
// bidirectional, batch_first), or packed (data, batch_sizes, hx, params, has_biases, num_layers,
// dropout, train, bidirectional); LSTM's hx is (h0, c0). Forward: 2 x rows x the weight matrices'
// elements; the whole backward into *backward (rnn_stack_backward). Not inlined, nor the other
// recurrent functions: their vectors would grow tw_torch_flops' own frame for every call.
__attribute__((noinline)) uint64_t rnn_flops(PyObject *const *args, size_t nargs, PyObject *kwnames, uint64_t *backward)
{
    const at::Tensor *input = tensor_of(argument(args, nargs, kwnames, 0, "input"));
    if (input == nullptr)
        input = tensor_of(argument(args, nargs, kwnames, 0, "data"));
    if (input == nullptr || input->sizes().empty() || input->sizes().back() == 0)
        return 0;
    // packed: the second argument is the batch sizes (1-D); else hx (2-D or 3-D, or LSTM's tuple)
    const at::Tensor *batch_sizes = tensor_of(argument(args, nargs, kwnames, 1, "batch_sizes"));
    if (batch_sizes != nullptr && batch_sizes->sizes().size() != 1)
        batch_sizes = nullptr;
    const size_t at = batch_sizes != nullptr ? 3 : 2; // params' position
    std::vector<const at::Tensor *> params, hx;
    if (!tensor_list(argument(args, nargs, kwnames, at, "params"), params))
        return 0;
    const uint64_t rows = batch_sizes != nullptr ? (uint64_t)input->sizes()[0]
                                                 : elements(input->sizes()) / (uint64_t)input->sizes().back();
    uint64_t weights = 0;
    for (const at::Tensor *p : params)
        if (p->sizes().size() == 2)
            weights += elements(p->sizes());

    PyObject *hx_arg = argument(args, nargs, kwnames, at - 1, "hx");
    if (!tensor_list(hx_arg, hx)) {
        hx.clear();
        if (const at::Tensor *h = tensor_of(hx_arg))
            hx.push_back(h);
    }
    const bool biases = flag_argument(argument(args, nargs, kwnames, at + 1, "has_biases"), true);
    const int64_t layers = int_argument(argument(args, nargs, kwnames, at + 2, "num_layers"), 1);
    const bool bidirectional = flag_argument(argument(args, nargs, kwnames, at + 5, "bidirectional"), false);
    const bool batch_first =
        batch_sizes == nullptr && flag_argument(argument(args, nargs, kwnames, at + 6, "batch_first"), false);
    *backward = rnn_stack_backward(*input, rows, batch_sizes, params, hx, biases, layers, bidirectional ? 2 : 1,
                                   batch_first);
    return 2 * rows * weights;
}

// gru_cell, lstm_cell, rnn_tanh_cell, rnn_relu_cell: (input, hx, w_ih, w_hh, b_ih, b_hh), one step:
// 2 x rows x the two weights' elements.
__attribute__((noinline)) uint64_t rnn_cell_flops(PyObject *const *args, size_t nargs, PyObject *kwnames)
{
    const at::Tensor *input = tensor_of(argument(args, nargs, kwnames, 0, "input"));
    const at::Tensor *w_ih = tensor_of(argument(args, nargs, kwnames, 2, "w_ih"));
    const at::Tensor *w_hh = tensor_of(argument(args, nargs, kwnames, 3, "w_hh"));
    if (input == nullptr || w_ih == nullptr || w_hh == nullptr || input->sizes().empty() ||
        input->sizes().back() == 0 || w_ih->sizes().size() != 2 || w_hh->sizes().size() != 2)
        return 0;
    return 2 * elements(input->sizes()) / (uint64_t)input->sizes().back() *
           (elements(w_ih->sizes()) + elements(w_hh->sizes()));
}

// ---- backward ----------------------------------------------------------------------------------

// What a call's forward tells its compute nodes: conv and attention take their shapes from it.
struct Forward {
    int kind;
    bool conv = false;        // x, w, y are a convolution's (batched)
    Shape x, w, y;
    bool sdpa = false;        // q, k, v are attention's
    Shape q, k, v;
    uint64_t rnn_backward = 0; // a recurrent network's whole backward, for cuDNN's and MIOpen's one node
};

// This thread's compute nodes of the last call (tw_torch_flops' *nodes). A thread_local with a
// constructor costs a call and __tls_get_addr at each use: tw_torch_flops takes a reference once.
using Found = std::vector<tw_torch_flops_node_t>;
thread_local Found found_here;

bool metadata_shape(const Node &node, uint32_t input, Shape &out)
{
    if (input >= node.num_inputs())
        return false;
    const auto &meta = node.input_metadata(input);
    if (meta.is_nested_tensor())
        return false;
    return shape_of(meta.shape_as_dim_vector(), out);
}

// mm, addmm, bmm, baddbmm's backward: one product of 2·(grad's elements)·k for each of the two
// operands (next edges first, first + 1) that needs a gradient, as their backward formulas do.
uint64_t product_backward(const Node &node, uint32_t first)
{
    Shape grad;
    if (!metadata_shape(node, 0, grad))
        return 0;
    uint64_t elements = grad.prod(0, grad.dim), flops = 0;
    for (uint32_t i = first; i < first + 2 && i < node.num_outputs(); i++) {
        const auto &edge = node.next_edge(i);
        Shape operand;
        if (!edge.is_valid() || !metadata_shape(*edge.function, edge.input_nr, operand) || operand.dim < 2)
            continue;
        uint64_t k = (uint64_t)(i == first ? operand[-1] : operand[-2]);
        flops += 2 * elements * k;
    }
    return flops;
}

// oneDNN's LSTM layer (one direction of one layer, all its steps; no projection): its backward as
// the steps' nodes would count it (rnn_layer_backward), from its shapes: its output (rows x hidden)
// and hy (batch x hidden) are the node's inputs; next edges input, w_ih, w_hh, b_ih, b_hh, hx, cx.
uint64_t mkldnn_rnn_backward(const gen::MkldnnRnnLayerBackward0 &node)
{
    Shape out, hy, operand;
    const uint64_t hidden = node.hidden_size > 0 ? (uint64_t)node.hidden_size : 0;
    if (hidden == 0 || node.num_outputs() < 6 || !metadata_shape(node, 0, out) || !metadata_shape(node, 1, hy))
        return 0;
    auto needs = [&](uint32_t i) { return node.next_edge(i).is_valid(); };
    auto edge_shape = [&](uint32_t i, Shape &s) {
        const auto &edge = node.next_edge(i);
        return edge.is_valid() && metadata_shape(*edge.function, edge.input_nr, s) && s.dim >= 1;
    };
    RnnLayer l;
    l.rows = out.prod(0, out.dim) / hidden;
    l.first_rows = hy.prod(0, hy.dim) / hidden;
    // gates: from a weight (gates x width), else from the mode (ideep's rnn_kind: LSTM 2, GRU 3)
    l.gates = edge_shape(1, operand) || edge_shape(2, operand) ? (uint64_t)operand[0]
              : node.mode == 2                                 ? 4 * hidden
              : node.mode == 3                                 ? 3 * hidden
                                                               : hidden;
    l.state = hidden;
    if (edge_shape(0, operand) || edge_shape(1, operand))
        l.in = (uint64_t)operand[-1];
    l.input_grad = needs(0);
    l.w_ih_grad = needs(1);
    l.w_hh_grad = needs(2);
    l.hx_grad = needs(5);
    return rnn_layer_backward(l);
}

// Whether node is of class T: its type_info is libtorch's one object for T, so an address
// comparison says it (operator== would also compare the mangled names of every other class).
template <typename T> bool is(const std::type_info *type)
{
    return type == &typeid(T);
}

uint64_t node_flops(const Node &node, const Forward &fwd)
{
    const std::type_info *type = &typeid(node);
    if (is<gen::MmBackward0>(type) || is<gen::BmmBackward0>(type))
        return product_backward(node, 0);
    if (is<gen::AddmmBackward0>(type) || is<gen::BaddbmmBackward0>(type))
        return product_backward(node, 1);
    if (is<gen::ConvolutionBackward0>(type) && fwd.conv) {
        // convolution_backward's output mask: the input's and the weight's gradients, when needed
        bool transposed = fwd.kind == TW_FLOPS_CONV_TRANSPOSE;
        uint64_t flops = 0;
        if (node.num_outputs() > 0 && node.next_edge(0).is_valid())
            flops += conv_flops(fwd.x, fwd.w, fwd.y, transposed);
        if (node.num_outputs() > 1 && node.next_edge(1).is_valid()) {
            // conv(input, grad_out) over all the input's channels (FlopCounterMode's t(x_shape))
            const Shape &spatial = transposed ? fwd.x : fwd.y;
            flops += fwd.w.prod(2, fwd.w.dim) * spatial.prod(2, spatial.dim) * (uint64_t)fwd.x[1] *
                     (uint64_t)fwd.y[1] * (uint64_t)fwd.x[0] * 2;
        }
        return flops;
    }
    if (fwd.sdpa && (is<gen::ScaledDotProductFlashAttentionForCpuBackward0>(type) ||
                     is<gen::ScaledDotProductFlashAttentionBackward0>(type) ||
                     is<gen::ScaledDotProductEfficientAttentionBackward0>(type) ||
                     is<gen::ScaledDotProductCudnnAttentionBackward0>(type) ||
                     is<gen::ScaledDotProductFusedAttentionOverrideableBackward0>(type)))
        return sdpa_backward_flops(fwd.q, fwd.k, fwd.v);
    if (is<gen::MkldnnRnnLayerBackward0>(type))
        return mkldnn_rnn_backward(static_cast<const gen::MkldnnRnnLayerBackward0 &>(node));
    if (fwd.rnn_backward != 0 && (is<gen::CudnnRnnBackward0>(type) || is<gen::MiopenRnnBackward0>(type)))
        return fwd.rnn_backward;
    return 0;
}

// The compute nodes among those the call made on this thread, from its result's grad_fn (a call
// makes a handful: 64 looked at, at most), into found.
void find_nodes(Node *root, uint64_t begin, uint64_t end, const Forward &fwd, Found &found)
{
    constexpr int kVisit = 64;
    Node *stack[kVisit];
    uint64_t seen[kVisit];
    int depth = 0, n_seen = 0;
    const uint64_t thread = at::RecordFunction::currentThreadId();
    stack[depth++] = root;
    while (depth > 0 && n_seen < kVisit) {
        Node *node = stack[--depth];
        uint64_t seq = node->sequence_nr();
        if (seq < begin || seq >= end || node->thread_id() != thread)
            continue;
        bool again = false;
        for (int i = 0; i < n_seen && !again; i++)
            again = seen[i] == seq;
        if (again)
            continue;
        seen[n_seen++] = seq;
        uint64_t flops = node_flops(*node, fwd);
        if (flops != 0)
            found.push_back({seq, flops});
        for (const auto &edge : node->next_edges())
            if (edge.is_valid() && depth < kVisit)
                stack[depth++] = edge.function.get();
    }
}

// All of them, for a recurrent network's call (thousands of nodes: its steps'), from the grad_fn of
// each tensor of its result: each node once (a mark per sequence number in [begin, end)).
__attribute__((noinline)) void find_all_nodes(PyObject *result, uint64_t begin, uint64_t end, const Forward &fwd, Found &found)
{
    thread_local std::vector<uint8_t> seen;
    thread_local std::vector<Node *> stack;
    seen.assign(end - begin, 0);
    stack.clear();
    PyObject *const *items = &result;
    Py_ssize_t n = 1;
    if (PyTuple_Check(result)) {
        items = PySequence_Fast_ITEMS(result);
        n = PyTuple_GET_SIZE(result);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const at::Tensor *out = tensor_of(items[i]);
        if (Node *root = out != nullptr ? torch::autograd::impl::grad_fn_unsafe(*out) : nullptr)
            stack.push_back(root);
    }
    const uint64_t thread = at::RecordFunction::currentThreadId();
    while (!stack.empty()) {
        Node *node = stack.back();
        stack.pop_back();
        uint64_t seq = node->sequence_nr();
        if (seq < begin || seq >= end || seen[seq - begin] || node->thread_id() != thread)
            continue;
        seen[seq - begin] = 1;
        uint64_t flops = node_flops(*node, fwd);
        if (flops != 0)
            found.push_back({seq, flops});
        for (const auto &edge : node->next_edges())
            if (edge.is_valid())
                stack.push_back(edge.function.get());
    }
}

} // namespace

extern "C" uint64_t tw_torch_flops(int kind, PyObject *const *args, size_t nargs, PyObject *kwnames, PyObject *result,
                                   uint64_t seq_begin, uint64_t seq_end, const tw_torch_flops_node_t **nodes,
                                   unsigned *n_nodes)
{
    *nodes = nullptr;
    *n_nodes = 0;
    try {
        Forward fwd;
        fwd.kind = kind;
        uint64_t flops = 0;
        switch (kind) {
        case TW_FLOPS_LINEAR: {
            const at::Tensor *input = tensor_of(argument(args, nargs, kwnames, 0, "input"));
            const at::Tensor *weight = tensor_of(argument(args, nargs, kwnames, 1, "weight"));
            // linear is addmm or matmul(input, weight.t()): an mm or bmm unless weight is a vector
            if (input != nullptr && weight != nullptr && weight->dim() == 2 && input->dim() >= 1)
                flops = 2 * (uint64_t)input->numel() * (uint64_t)weight->size(0);
            break;
        }
        case TW_FLOPS_MATMUL:
        case TW_FLOPS_RMATMUL: {
            PyObject *first = argument(args, nargs, kwnames, 0, "input");
            PyObject *second = argument(args, nargs, kwnames, 1, "other");
            PyObject *out = argument(args, nargs, kwnames, (size_t)-1, "out");
            if (kind == TW_FLOPS_RMATMUL)
                std::swap(first, second);
            flops = matmul_flops(tensor_of(first), tensor_of(second), out != nullptr && out != Py_None);
            break;
        }
        case TW_FLOPS_MM:
        case TW_FLOPS_BMM:
        case TW_FLOPS_ADDMM:
        case TW_FLOPS_BADDBMM: {
            bool add = kind == TW_FLOPS_ADDMM || kind == TW_FLOPS_BADDBMM, batched = kind == TW_FLOPS_BMM ||
                                                                                  kind == TW_FLOPS_BADDBMM;
            const char *names[2] = {add ? (batched ? "batch1" : "mat1") : "input",
                                    add ? (batched ? "batch2" : "mat2") : "mat2"};
            Shape a, b;
            int dims = batched ? 3 : 2;
            if (shape_of(tensor_of(argument(args, nargs, kwnames, add ? 1 : 0, names[0])), a) &&
                shape_of(tensor_of(argument(args, nargs, kwnames, add ? 2 : 1, names[1])), b) && a.dim == dims &&
                b.dim == dims)
                flops = 2 * (batched ? (uint64_t)a[0] : 1) * (uint64_t)a[-2] * (uint64_t)a[-1] * (uint64_t)b[-1];
            break;
        }
        case TW_FLOPS_EINSUM: {
            PyObject *equation = argument(args, nargs, kwnames, 0, "equation");
            if (nargs == 3) {
                flops = einsum_flops(equation, tensor_of(args[1]), tensor_of(args[2]));
            } else if (nargs == 2 && (PyList_Check(args[1]) || PyTuple_Check(args[1])) &&
                       PySequence_Fast_GET_SIZE(args[1]) == 2) {
                PyObject **items = PySequence_Fast_ITEMS(args[1]);
                flops = einsum_flops(equation, tensor_of(items[0]), tensor_of(items[1]));
            }
            break;
        }
        case TW_FLOPS_CONV:
        case TW_FLOPS_CONV_TRANSPOSE: {
            const at::Tensor *out = result != nullptr ? tensor_of(result) : nullptr;
            fwd.conv = conv_shapes(tensor_of(argument(args, nargs, kwnames, 0, "input")),
                                   tensor_of(argument(args, nargs, kwnames, 1, "weight")), out, fwd.x, fwd.w, fwd.y);
            if (fwd.conv)
                flops = conv_flops(fwd.x, fwd.w, fwd.y, kind == TW_FLOPS_CONV_TRANSPOSE);
            break;
        }
        case TW_FLOPS_SDPA: {
            fwd.sdpa = shape_of(tensor_of(argument(args, nargs, kwnames, 0, "query")), fwd.q) &&
                       shape_of(tensor_of(argument(args, nargs, kwnames, 1, "key")), fwd.k) &&
                       shape_of(tensor_of(argument(args, nargs, kwnames, 2, "value")), fwd.v) && fwd.q.dim >= 2 &&
                       fwd.k.dim >= 2 && fwd.v.dim >= 2;
            if (fwd.sdpa)
                flops = sdpa_flops(fwd.q, fwd.k, fwd.v);
            break;
        }
        case TW_FLOPS_RNN:
            flops = rnn_flops(args, nargs, kwnames, &fwd.rnn_backward);
            break;
        case TW_FLOPS_RNN_CELL:
            flops = rnn_cell_flops(args, nargs, kwnames);
            break;
        default:
            return 0;
        }
        if (seq_end > seq_begin && result != nullptr) {
            Found &found = found_here;
            found.clear();
            if (kind == TW_FLOPS_RNN || kind == TW_FLOPS_RNN_CELL) {
                find_all_nodes(result, seq_begin, seq_end, fwd, found);
            } else {
                const at::Tensor *out = tensor_of(result);
                Node *root = out != nullptr ? torch::autograd::impl::grad_fn_unsafe(*out) : nullptr;
                if (root != nullptr)
                    find_nodes(root, seq_begin, seq_end, fwd, found);
            }
            if (found.size() > 1)
                std::sort(found.begin(), found.end(),
                          [](const tw_torch_flops_node_t &a, const tw_torch_flops_node_t &b) { return a.seq < b.seq; });
            *nodes = found.data();
            *n_nodes = (unsigned)found.size();
        }
        return flops;
    } catch (...) {
        *nodes = nullptr;
        *n_nodes = 0;
        return 0;
    }
}
