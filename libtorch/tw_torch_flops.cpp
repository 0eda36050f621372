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
// them in custom_mapping). Recurrent networks (their forward, and the nodes of their fused kernels):
// tw_torch_flops_rnn.cpp.
//
// Backward: each compute node's FLOPs are known when the call ends (its shapes, and which inputs need
// a gradient: the node's next edges), so they are computed then, once, and travel with the node's
// link (python/core/below/backward.c) to the node's record when backward runs it, as often as it runs.
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
#include "tw_torch_flops_rnn.h"
#include "tw_torch_sizes.h"

using namespace tw_flops;

namespace {

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
