// SPDX-License-Identifier: MIT
// FLOPs of recurrent networks (tw_torch_flops_rnn.cpp), for tw_torch_flops.cpp, which counts every
// other call and asks these for the networks and their cells.
#ifndef TORCHWRAPPER_TORCH_FLOPS_RNN_H
#define TORCHWRAPPER_TORCH_FLOPS_RNN_H

#include <cstddef>
#include <cstdint>

#include <torch/csrc/autograd/generated/Functions.h>
#include <torch/csrc/autograd/python_variable.h>

namespace tw_flops {

uint64_t rnn_flops(PyObject *const *args, size_t nargs, PyObject *kwnames, uint64_t *backward);
uint64_t rnn_cell_flops(PyObject *const *args, size_t nargs, PyObject *kwnames);
uint64_t mkldnn_rnn_backward(const torch::autograd::generated::MkldnnRnnLayerBackward0 &node);

} // namespace tw_flops

#endif
