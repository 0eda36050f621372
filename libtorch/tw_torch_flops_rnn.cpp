// SPDX-License-Identifier: MIT
// FLOPs of recurrent networks (tw_torch_flops.cpp counts every other call):
//
// Recurrent networks (gru, lstm, rnn_tanh, rnn_relu and their cells: what nn.GRU, nn.LSTM, nn.RNN
// and the cells call through torch._VF): on CPU each layer and direction runs as one addmm of its
// input's projection over all the steps, then per step the hidden state's addmm (and LSTM's
// projection): 2 x (the input's rows: steps x batch) x (the weight matrices' elements) forward, and
// backward the AddmmBackward0 and MmBackward0 nodes of every step, each found and counted as
// tw_torch_flops.cpp counts any call's.
// The LSTM that oneDNN runs in one kernel per layer and direction (mkldnn_rnn_layer, the default
// for float32 on CPU without projections) has no formula in FlopCounterMode, which counts it as 0;
// it is counted here as FlopCounterMode counts the same LSTM with oneDNN off (the path above): the
// same forward, and for each MkldnnRnnLayerBackward0 node the products the steps' nodes would have
// made, with the gradients its inputs need. cuDNN's and MIOpen's one node for the whole network
// is counted the same way, from the call's arguments.

#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/generated/Functions.h>

#include "tw_torch_flops_rnn.h"
#include "tw_torch_sizes.h"

namespace tw_flops {

namespace {

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

} // namespace

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

} // namespace tw_flops
