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
#include <memory>
#include <new>

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
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
