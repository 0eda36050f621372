/* SPDX-License-Identifier: MIT */
/* FLOPs per call: see flops.h. */
#include "flops.h"

#include <string.h>

#include "layer.h"

/* The APIs with a formula, by the names discovery gives them (F.conv2d is torch.conv2d, F.linear is
 * torch.nn.functional.linear); nn.Linear, nn.Conv2d, nn.MultiheadAttention count through these, and
 * nn.GRU, nn.LSTM, nn.RNN and their cells through torch.gru, torch.lstm, ... (which they call as
 * torch._VF.gru, ...: discovery installs these there too). */
static const struct {
    const char *name;
    uint32_t kind;
} formulas[] = {
    {"torch.nn.functional.linear", TW_FLOPS_LINEAR},
    {"torch.matmul", TW_FLOPS_MATMUL},
    {"torch.Tensor.matmul", TW_FLOPS_MATMUL},
    {"torch.Tensor.__matmul__", TW_FLOPS_MATMUL},
    {"torch.Tensor.__rmatmul__", TW_FLOPS_RMATMUL},
    {"torch.linalg.matmul", TW_FLOPS_MATMUL}, /* torch.matmul's twin, an object of its own */
    {"torch.mm", TW_FLOPS_MM},
    {"torch.Tensor.mm", TW_FLOPS_MM},
    {"torch.addmm", TW_FLOPS_ADDMM},
    {"torch.Tensor.addmm", TW_FLOPS_ADDMM},
    {"torch.bmm", TW_FLOPS_BMM},
    {"torch.Tensor.bmm", TW_FLOPS_BMM},
    {"torch.baddbmm", TW_FLOPS_BADDBMM},
    {"torch.Tensor.baddbmm", TW_FLOPS_BADDBMM},
    {"torch.einsum", TW_FLOPS_EINSUM},
    {"torch.conv1d", TW_FLOPS_CONV},
    {"torch.conv2d", TW_FLOPS_CONV},
    {"torch.conv3d", TW_FLOPS_CONV},
    {"torch.conv_transpose1d", TW_FLOPS_CONV_TRANSPOSE},
    {"torch.conv_transpose2d", TW_FLOPS_CONV_TRANSPOSE},
    {"torch.conv_transpose3d", TW_FLOPS_CONV_TRANSPOSE},
    {"torch.nn.functional.scaled_dot_product_attention", TW_FLOPS_SDPA},
    {"torch.gru", TW_FLOPS_RNN},
    {"torch.lstm", TW_FLOPS_RNN},
    {"torch.rnn_tanh", TW_FLOPS_RNN},
    {"torch.rnn_relu", TW_FLOPS_RNN},
    {"torch.gru_cell", TW_FLOPS_RNN_CELL},
    {"torch.lstm_cell", TW_FLOPS_RNN_CELL},
    {"torch.rnn_tanh_cell", TW_FLOPS_RNN_CELL},
    {"torch.rnn_relu_cell", TW_FLOPS_RNN_CELL},
};

uint32_t tw_flops_kind_of(const char *api_name)
{
    if (strncmp(api_name, "torch.", 6) != 0)
        return TW_FLOPS_NONE;
    for (size_t i = 0; i < sizeof formulas / sizeof formulas[0]; i++)
        if (strcmp(formulas[i].name, api_name) == 0)
            return formulas[i].kind;
    return TW_FLOPS_NONE;
}

unsigned tw_flops_measure(uint32_t kind, tw_frame_t *frame, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                          PyObject *result, uint64_t (*seq_peek)(void), const tw_torch_flops_node_t **nodes)
{
    if (frame->child_flops != 0 || tw_layer.flops == NULL)
        return 0;
    uint64_t begin = 0, end = 0;
    if (seq_peek != NULL) { /* backward nodes recorded: they can carry FLOPs */
        begin = frame->seq_begin;
        end = seq_peek();
    }
    unsigned n = 0;
    frame->flops = tw_layer.flops((int)kind, args, (size_t)PyVectorcall_NARGS(nargsf), kwnames, result, begin, end,
                                  nodes, &n);
    return n;
}
