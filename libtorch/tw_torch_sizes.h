// SPDX-License-Identifier: MIT
// What tw_torch_flops.cpp (the entry point, products, convolutions, attention, the autograd nodes)
// and tw_torch_flops_rnn.cpp (recurrent networks) share: tensors' sizes as plain integers, and
// the call's arguments.
#ifndef TORCHWRAPPER_TORCH_SIZES_H
#define TORCHWRAPPER_TORCH_SIZES_H

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/generated/Functions.h>
#include <torch/csrc/autograd/python_variable.h>

namespace tw_flops {

// Internal to each file that includes them (as they were to tw_torch_flops.cpp alone), so that GCC
// weighs inlining them as it did there: the hot path of every call reads arguments through them.
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

inline bool shape_of(c10::SymIntArrayRef sizes, Shape &out)
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
inline const at::Tensor *tensor_of(PyObject *obj)
{
    if (obj == nullptr || THPVariableClass == nullptr || !PyObject_TypeCheck(obj, (PyTypeObject *)THPVariableClass))
        return nullptr;
    const at::Tensor &t = THPVariable_Unpack(obj);
    if (!t.defined() || t.is_nested() || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides() ||
        t.dim() > kMaxDims)
        return nullptr;
    return &t;
}

inline bool shape_of(const at::Tensor *t, Shape &out)
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
inline PyObject *argument(PyObject *const *args, size_t nargs, PyObject *kwnames, size_t position, const char *name)
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

inline bool metadata_shape(const Node &node, uint32_t input, Shape &out)
{
    if (input >= node.num_inputs())
        return false;
    const auto &meta = node.input_metadata(input);
    if (meta.is_nested_tensor())
        return false;
    return shape_of(meta.shape_as_dim_vector(), out);
}

} // namespace

} // namespace tw_flops

#endif
