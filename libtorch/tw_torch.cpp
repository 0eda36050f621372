// SPDX-License-Identifier: MIT
// The libtorch layer (tw_torch.h): at::RecordFunction callbacks that hand autograd nodes and the
// forward operators that create them to the extension's C hooks. C++ only because libtorch's
// callback API is C++; every decision about what to record is made in C.
#include <atomic>
#include <cerrno>
#include <memory>
#include <new>

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
at::CallbackHandle forward_handle = 0;
at::CallbackHandle backward_handle = 0;

// Forward operators: only those that record for autograd carry a sequence number (>= 0). No end
// callback: nothing is needed when they return.
std::unique_ptr<at::ObserverContext> on_forward_op(const at::RecordFunction &fn)
{
    int64_t seq = fn.seqNr();
    if (seq >= 0)
        hooks.load(std::memory_order_acquire)->forward_op(seq, fn.threadId());
    return nullptr;
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

} // namespace

extern "C" const char *tw_torch_built_with(void)
{
    return TW_TORCH_VERSION;
}

extern "C" int tw_torch_start(const tw_torch_hooks_t *given)
{
    const tw_torch_hooks_t *current = hooks.load(std::memory_order_acquire);
    if (forward_handle != 0 || (current != nullptr && current != given))
        return -EBUSY;
    try {
        hooks.store(given, std::memory_order_release);
        forward_handle = at::addGlobalCallback(
            at::RecordFunctionCallback(on_forward_op).needsInputs(false).needsIds(false).scopes(
                {at::RecordScope::FUNCTION}));
        backward_handle = at::addGlobalCallback(
            at::RecordFunctionCallback(on_node_begin, on_node_end).needsInputs(false).needsIds(false).scopes(
                {at::RecordScope::BACKWARD_FUNCTION}));
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
    if (forward_handle != 0)
        at::removeCallback(forward_handle);
    if (backward_handle != 0)
        at::removeCallback(backward_handle);
    forward_handle = backward_handle = 0;
}
