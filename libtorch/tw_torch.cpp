// SPDX-License-Identifier: MIT
// The libtorch layer (tw_torch.h): at::RecordFunction callbacks that hand autograd nodes (and, when
// asked, operators) to the extension's C hooks, and the thread's autograd sequence number for the
// wrappers. By default only the BACKWARD_FUNCTION scope is observed: with no FUNCTION-scope
// callback, torch's dispatcher makes no RecordFunction per operator (what a per-operator callback
// costs on every op, measured: about 1 us per node on a chain of small ops); the FUNCTION-scope
// callback is registered only for config aten "all". C++ only because libtorch's callback API is
// C++; every decision about what to record is made in C.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <memory>
#include <new>

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/headeronly/version.h>

#include "tw_torch.h"

#define TW_STR2(x) #x
#define TW_STR(x) TW_STR2(x)

namespace {

// Set by the first start and never cleared: a node begun before a stop still gets its end callback
// after it (RecordFunction keeps the callbacks it started with), on another thread; the hooks know
// by themselves that nothing records any more. Only the extension's one static table is passed.
std::atomic<const tw_torch_hooks_t *> hooks{nullptr};
at::CallbackHandle backward_handle = 0;
at::CallbackHandle operator_handle = 0;

std::unique_ptr<at::ObserverContext> on_node_begin(const at::RecordFunction &fn)
{
    hooks.load(std::memory_order_acquire)->node_begin(fn.name(), fn.seqNr(), fn.forwardThreadId());
    return nullptr;
}

void on_node_end(const at::RecordFunction &, at::ObserverContext *)
{
    hooks.load(std::memory_order_acquire)->node_end();
}

std::unique_ptr<at::ObserverContext> on_op_begin(const at::RecordFunction &fn)
{
    hooks.load(std::memory_order_acquire)->op_begin(fn.name());
    return nullptr;
}

void on_op_end(const at::RecordFunction &, at::ObserverContext *)
{
    hooks.load(std::memory_order_acquire)->op_end();
}

} // namespace

extern "C" uint64_t tw_torch_sequence_peek(void)
{
    return at::sequence_number::peek();
}

extern "C" uint64_t tw_torch_thread_id(void)
{
    return at::RecordFunction::currentThreadId();
}

// The argument summary of a tensor, read from the tensor itself: what torch's Python getters for
// dtype, shape, is_cpu and device give, without a Python object per call (those getters were most
// of the summary's cost). Only for the dtypes the summary names short; anything else (another
// dtype, sizes that are symbolic or not defined, an exception) is -1: the caller's Python path.
extern "C" int tw_torch_tensor_summary(PyObject *tensor, char *out, size_t size)
{
    try {
        const at::Tensor &t = THPVariable_Unpack(tensor);
        if (!t.defined() || t.is_nested())
            return -1;
        const char *dtype;
        switch (t.scalar_type()) {
        case at::kFloat: dtype = "f32"; break;
        case at::kDouble: dtype = "f64"; break;
        case at::kHalf: dtype = "f16"; break;
        case at::kBFloat16: dtype = "bf16"; break;
        case at::kLong: dtype = "i64"; break;
        case at::kInt: dtype = "i32"; break;
        case at::kShort: dtype = "i16"; break;
        case at::kChar: dtype = "i8"; break;
        case at::kByte: dtype = "u8"; break;
        case at::kBool: dtype = "bool"; break;
        case at::kComplexFloat: dtype = "c64"; break;
        case at::kComplexDouble: dtype = "c128"; break;
        default: return -1;
        }
        if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides())
            return -1;
        char *p = out, *end = out + size;
        auto put = [&](const char *s, size_t n) {
            if ((size_t)(end - p) < n)
                return false;
            memcpy(p, s, n);
            p += n;
            return true;
        };
        if (!put(dtype, strlen(dtype)) || !put("[", 1))
            return -1;
        bool first = true;
        for (int64_t d : t.sizes()) { // decimal by hand: snprintf was most of this function's time
            char digits[24], *q = digits + sizeof digits;
            uint64_t v = d < 0 ? 0 - (uint64_t)d : (uint64_t)d;
            do
                *--q = (char)('0' + v % 10);
            while ((v /= 10) != 0);
            if (d < 0)
                *--q = '-';
            if ((!first && !put(",", 1)) || !put(q, (size_t)(digits + sizeof digits - q)))
                return -1;
            first = false;
        }
        if (!put("]@", 2))
            return -1;
        if (t.device().is_cpu())
            return put("cpu", 3) ? (int)(p - out) : -1;
        std::string device = t.device().str();
        return put(device.data(), device.size()) ? (int)(p - out) : -1;
    } catch (...) {
        return -1;
    }
}

extern "C" const char *tw_torch_built_with(void)
{
    return TW_TORCH_VERSION;
}

extern "C" int tw_torch_start(const tw_torch_hooks_t *given, int operators)
{
    const tw_torch_hooks_t *current = hooks.load(std::memory_order_acquire);
    if (backward_handle != 0 || (current != nullptr && current != given))
        return -EBUSY;
    try {
        hooks.store(given, std::memory_order_release);
        backward_handle = at::addGlobalCallback(
            at::RecordFunctionCallback(on_node_begin, on_node_end).needsInputs(false).needsIds(false).scopes(
                {at::RecordScope::BACKWARD_FUNCTION}));
        if (operators)
            operator_handle = at::addGlobalCallback(
                at::RecordFunctionCallback(on_op_begin, on_op_end).needsInputs(false).needsIds(false).scopes(
                    {at::RecordScope::FUNCTION}));
    } catch (const std::bad_alloc &) {
        tw_torch_stop();
        return -ENOMEM;
    } catch (...) {
        tw_torch_stop();
        return -EINVAL;
    }
    return 0;
}

extern "C" void tw_torch_stop(void)
{
    if (backward_handle != 0)
        at::removeCallback(backward_handle);
    if (operator_handle != 0)
        at::removeCallback(operator_handle);
    backward_handle = 0;
    operator_handle = 0;
}
