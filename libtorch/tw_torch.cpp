// SPDX-License-Identifier: MIT
// The libtorch layer (tw_torch.h): at::RecordFunction callbacks that hand autograd nodes (and, when
// asked, operators) to the extension's C hooks, and the thread's autograd sequence number for the
// wrappers. By default only the BACKWARD_FUNCTION scope is observed: with no FUNCTION-scope
// callback, torch's dispatcher makes no RecordFunction per operator (what a per-operator callback
// costs on every op, measured: about 1 us per node on a chain of small ops); the FUNCTION-scope
// callback is registered only for config aten "all". C++ only because libtorch's callback API is
// C++; every decision about what to record is made in C.
#include <array>
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
// Between a start and its stop; the callbacks are registered while started and observing (the
// handles nonzero), with operators when the start asked for them.
bool started = false, with_operators = false;
at::CallbackHandle backward_handle = 0;
at::CallbackHandle operator_handle = 0;

void remove_callbacks() noexcept
{
    for (at::CallbackHandle *handle : {&backward_handle, &operator_handle}) {
        if (*handle != 0) {
            try {
                at::removeCallback(*handle);
            } catch (...) {
                // a handle torch no longer knows: nothing to remove
            }
        }
        *handle = 0;
    }
}

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

namespace {

// Short dtype names, by at::ScalarType; an empty name: the Python path names it.
struct dtype_name {
    char text[4];
    unsigned char len;
};
constexpr dtype_name no_name{{0}, 0};

constexpr auto dtype_names = [] {
    std::array<dtype_name, 64> names{};
    names.fill(no_name);
    names[(int)at::kFloat] = {{'f', '3', '2'}, 3};
    names[(int)at::kDouble] = {{'f', '6', '4'}, 3};
    names[(int)at::kHalf] = {{'f', '1', '6'}, 3};
    names[(int)at::kBFloat16] = {{'b', 'f', '1', '6'}, 4};
    names[(int)at::kLong] = {{'i', '6', '4'}, 3};
    names[(int)at::kInt] = {{'i', '3', '2'}, 3};
    names[(int)at::kShort] = {{'i', '1', '6'}, 3};
    names[(int)at::kChar] = {{'i', '8'}, 2};
    names[(int)at::kByte] = {{'u', '8'}, 2};
    names[(int)at::kBool] = {{'b', 'o', 'o', 'l'}, 4};
    names[(int)at::kComplexFloat] = {{'c', '6', '4'}, 3};
    names[(int)at::kComplexDouble] = {{'c', '1', '2', '8'}, 4};
    return names;
}();

// Devices other than the CPU as torch's str(device) writes them ("cuda:0", "meta"), made once per
// (type, index): Device::str() builds a std::string each time. Only ever used with the GIL held
// (tw_torch_tensor_summary's contract), which serializes the filling.
struct device_text {
    int16_t type = -1;
    int16_t index = 0;
    unsigned char len = 0;
    char text[29] = {0};
};
std::array<device_text, 16> device_texts;

// str(device) into *d; false when longer than d->text (the Python path writes it).
bool make_device_text(at::Device device, device_text *d)
{
    std::string text = device.str();
    if (text.size() > sizeof d->text)
        return false;
    memcpy(d->text, text.data(), text.size());
    d->len = (unsigned char)text.size();
    d->index = (int16_t)device.index();
    d->type = (int16_t)device.type(); // last: the entry is whole once it matches
    return true;
}

// More than 16 devices: each further one is made again every time, here.
device_text spare;

const device_text *device_text_of(at::Device device)
{
    int16_t type = (int16_t)device.type(), index = (int16_t)device.index();
    for (device_text &d : device_texts) {
        if (d.type == type && d.index == index)
            return &d;
        if (d.type == -1)
            return make_device_text(device, &d) ? &d : nullptr;
    }
    return make_device_text(device, &spare) ? &spare : nullptr;
}

// Decimal digits of d ending at end (exclusive); returns where they begin.
inline char *digits_before(char *end, int64_t d)
{
    uint64_t v = d < 0 ? 0 - (uint64_t)d : (uint64_t)d;
    do
        *--end = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    if (d < 0)
        *--end = '-';
    return end;
}

size_t digits_of(int64_t d)
{
    char digits[24];
    return (size_t)(digits + sizeof digits - digits_before(digits + sizeof digits, d));
}

// dtype[sizes]@device at out. padded: the dtype and the device are copied in fixed-size blocks
// (no call to memcpy), which may write past the text's end: the caller has room for the longest
// text (see tw_torch_tensor_summary); else each copy is exact.
template <bool padded>
int write_summary(char *out, const dtype_name &dtype, at::IntArrayRef sizes, const device_text *other)
{
    char *p = out;
    memcpy(p, dtype.text, padded ? sizeof dtype.text : dtype.len);
    p += dtype.len;
    *p++ = '[';
    for (size_t i = 0; i < sizes.size(); i++) {
        if (i)
            *p++ = ',';
        int64_t d = sizes[i];
        // Sizes below 10,000 (nearly all: batch, sequence, hidden sizes) are written in place, with
        // no division loop and no copy: in a transformers BERT step 3- and 4-digit sizes were 40% of
        // this function's instructions through the general path.
        if (d >= 0 && d < 10) {
            *p++ = (char)('0' + d);
        } else if (d >= 10 && d < 100) {
            p[0] = (char)('0' + d / 10);
            p[1] = (char)('0' + d % 10);
            p += 2;
        } else if (d >= 100 && d < 1000) {
            p[0] = (char)('0' + d / 100);
            p[1] = (char)('0' + d / 10 % 10);
            p[2] = (char)('0' + d % 10);
            p += 3;
        } else if (d >= 1000 && d < 10000) {
            p[0] = (char)('0' + d / 1000);
            p[1] = (char)('0' + d / 100 % 10);
            p[2] = (char)('0' + d / 10 % 10);
            p[3] = (char)('0' + d % 10);
            p += 4;
        } else {
            char digits[24], *q = digits_before(digits + sizeof digits, d);
            size_t n = (size_t)(digits + sizeof digits - q);
            memcpy(p, q, n);
            p += n;
        }
    }
    *p++ = ']';
    *p++ = '@';
    if (other == nullptr) {
        memcpy(p, "cpu", padded ? 4 : 3);
        return (int)(p + 3 - out);
    }
    memcpy(p, other->text, padded ? sizeof other->text : other->len);
    return (int)(p + other->len - out);
}

} // namespace

// The argument summary of a tensor, read from the tensor itself: what torch's Python getters for
// dtype, shape, is_cpu and device give, without a Python object per call (those getters were most
// of the summary's cost). Written straight into the caller's text, without snprintf or a
// std::string: this runs for every tensor argument of every recorded call (make bench's args
// figures, tests/bench/run.py bench_args). Only for the dtypes the summary names short; anything
// else (another dtype, sizes that are symbolic or not defined) is -1: the caller's Python path.
extern "C" int tw_torch_tensor_summary(PyObject *tensor, char *out, size_t size)
{
    try {
        const at::Tensor &t = THPVariable_Unpack(tensor);
        if (!t.defined() || t.is_nested())
            return -1;
        const at::TensorImpl *impl = t.unsafeGetTensorImpl();
        int type = (int)impl->dtype().toScalarType();
        if (type < 0 || type >= (int)dtype_names.size() || dtype_names[type].len == 0 ||
            impl->has_symbolic_sizes_strides())
            return -1;
        const dtype_name &dtype = dtype_names[type];
        at::IntArrayRef sizes = impl->sizes();
        at::Device device = impl->device();
        const device_text *other = nullptr;
        if (!device.is_cpu() && (other = device_text_of(device)) == nullptr)
            return -1;
        // The longest text: the dtype's block, "[", per dimension 20 characters (INT64_MIN) and a
        // comma, "]@" and the device's block.
        size_t longest = sizeof dtype.text + 1 + 21 * sizes.size() + 2 + (other ? sizeof other->text : 4);
        if (longest <= size)
            return write_summary<true>(out, dtype, sizes, other);
        size_t exact = dtype.len + 1 + 2 + (other ? other->len : 3) + (sizes.empty() ? 0 : sizes.size() - 1);
        for (int64_t d : sizes)
            exact += digits_of(d);
        return exact <= size ? write_summary<false>(out, dtype, sizes, other) : -2;
    } catch (...) {
        return -1;
    }
}

extern "C" unsigned tw_torch_layer_version(void)
{
    return TW_TORCH_LAYER_VERSION;
}

extern "C" const char *tw_torch_built_with(void)
{
    return TW_TORCH_VERSION;
}

namespace {

// Adds the callbacks a start asked for (both handles nonzero after, or an exception and none).
void add_callbacks()
{
    try {
        backward_handle = at::addGlobalCallback(
            at::RecordFunctionCallback(on_node_begin, on_node_end).needsInputs(false).needsIds(false).scopes(
                {at::RecordScope::BACKWARD_FUNCTION}));
        if (with_operators)
            operator_handle = at::addGlobalCallback(
                at::RecordFunctionCallback(on_op_begin, on_op_end).needsInputs(false).needsIds(false).scopes(
                    {at::RecordScope::FUNCTION}));
    } catch (...) {
        remove_callbacks();
        throw;
    }
}

} // namespace

extern "C" int tw_torch_start(const tw_torch_hooks_t *given, int operators)
{
    const tw_torch_hooks_t *current = hooks.load(std::memory_order_acquire);
    if (started || (current != nullptr && current != given))
        return -EBUSY;
    try {
        hooks.store(given, std::memory_order_release);
        with_operators = operators != 0;
        add_callbacks();
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    } catch (...) {
        return -EINVAL;
    }
    started = true;
    return 0;
}

// Off removes the callbacks rather than disabling them: torch keeps a disabled global callback in
// the list every thread rebuilds its own from, and rebuilds it each time a thread takes another's
// state (at::parallel_for, autograd's engine: ~3,600 times a BERT step), which cost ~220,000
// instructions a step without detail, a sixth of the profiler's own (callgrind; NEWS). Removed, a
// step without detail costs torch what no profiler costs it.
extern "C" void tw_torch_observe(int on)
{
    if (!started)
        return;
    if (!on) {
        remove_callbacks();
    } else if (backward_handle == 0) {
        try {
            add_callbacks();
        } catch (...) {
            // out of memory: this step's nodes go unobserved, as when off; the next step tries again
        }
    }
}

extern "C" int tw_torch_callbacks_held(void)
{
    return (backward_handle != 0) + (operator_handle != 0);
}

extern "C" void tw_torch_stop(void)
{
    remove_callbacks();
    started = false;
}
