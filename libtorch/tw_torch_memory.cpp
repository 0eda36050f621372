// SPDX-License-Identifier: MIT
// Memory per call (tw_torch.h, tw_torch_memory_*): the allocators' own reports, taken the way
// torch.profiler's profile_memory takes them. c10's allocators (the CPU allocator's
// ProfiledCPUMemoryReporter, the CUDA caching allocator) call c10::reportMemoryUsageToProfiler on
// the thread that allocates or frees, which hands the report to the c10::MemoryReportingInfoBase
// found in that thread's ThreadLocalDebugInfo under DebugInfoKind::PROFILER_STATE. We push ours
// there on the thread that starts the session; torch copies a thread's debug info into the threads
// that work for it (autograd's engine threads), so backward passes on a GPU report too.
//
// The slot is torch.profiler's: torch reads whatever is in it as a
// torch::profiler::impl::ProfilerStateBase (profilerEnabled(), the Kineto profiler's "already
// enabled" check), so ours is one, with a disabled config: profilerEnabled() stays false and nothing
// of torch's reads a foreign object. C++ only because this is libtorch's C++ API.
#include <atomic>
#include <cerrno>
#include <memory>
#include <new>

#include <c10/core/Allocator.h>
#include <c10/util/Logging.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include "tw_torch.h"

namespace {

using torch::profiler::impl::ActiveProfilerType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;
using torch::profiler::impl::ProfilerStateBase;

struct Reporter final : ProfilerStateBase {
    explicit Reporter(tw_torch_memory_report_t report)
        : ProfilerStateBase(ProfilerConfig(ProfilerState::Disabled)), report_(report)
    {
    }

    void reportMemoryUsage(void *, int64_t bytes, size_t total_allocated, size_t, c10::Device device) override
    {
        if (live.load(std::memory_order_relaxed))
            report_(bytes, (uint64_t)total_allocated, (int)device.type(), (int)device.index());
    }

    // Asked by the CPU allocator before each allocation and free: false once stopped, so that an
    // inert reporter left in a thread's state (see tw_torch_memory_stop) costs the allocator nothing.
    bool memoryProfilingEnabled() const override
    {
        return live.load(std::memory_order_relaxed);
    }

    ActiveProfilerType profilerType() override
    {
        return ActiveProfilerType::NONE;
    }

    std::atomic<bool> live{true};

  private:
    tw_torch_memory_report_t report_;
};

// The reporter of the running session (one at a time), and the log level we raised (-1: none).
std::shared_ptr<Reporter> current;
int raised_log_level = -1;

// What owns this thread's reports now: the top PROFILER_STATE entry of its debug info.
c10::DebugInfoBase *slot()
{
    return c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
}

// The CPU allocator logs "Memory block of unknown size was allocated before the profiling started"
// (a c10 LOG(WARNING), on stderr) for frees of blocks it did not see allocated while reports were
// on: every tensor made before the start, once per 1000 such frees. That is noise about a
// limitation we document, so c10's log threshold goes from WARNING (its default) to ERROR while we
// measure. Left alone when the user set another level (TORCH_CPP_LOG_LEVEL).
void quiet_logs()
{
#ifndef C10_USE_GFLAGS
    if (FLAGS_caffe2_log_level == c10::GLOG_WARNING) {
        FLAGS_caffe2_log_level = c10::GLOG_ERROR;
        raised_log_level = c10::GLOG_ERROR;
    }
#endif
}

void restore_logs()
{
#ifndef C10_USE_GFLAGS
    if (raised_log_level >= 0 && FLAGS_caffe2_log_level == raised_log_level)
        FLAGS_caffe2_log_level = c10::GLOG_WARNING;
#endif
    raised_log_level = -1;
}

} // namespace

extern "C" int tw_torch_memory_owner(void)
{
    try {
        c10::DebugInfoBase *top = slot();
        if (top == nullptr)
            return TW_TORCH_MEMORY_FREE;
        if (current != nullptr && top == current.get())
            return current->live.load(std::memory_order_relaxed) ? TW_TORCH_MEMORY_OURS : TW_TORCH_MEMORY_INERT;
        return dynamic_cast<Reporter *>(top) != nullptr ? TW_TORCH_MEMORY_INERT : TW_TORCH_MEMORY_OTHER;
    } catch (...) {
        return TW_TORCH_MEMORY_OTHER;
    }
}

extern "C" int tw_torch_memory_start(tw_torch_memory_report_t report)
{
    try {
        c10::DebugInfoBase *top = slot();
        // An inert reporter of an earlier session, left where it could not be popped: ours to pop.
        if (top != nullptr && dynamic_cast<Reporter *>(top) != nullptr &&
            !static_cast<Reporter *>(top)->live.load(std::memory_order_relaxed)) {
            c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
            top = slot();
        }
        if (top != nullptr || current != nullptr)
            return -EBUSY;
        auto reporter = std::make_shared<Reporter>(report);
        c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, reporter);
        current = std::move(reporter);
        quiet_logs();
        return 0;
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    } catch (...) {
        return -EINVAL;
    }
}

extern "C" int tw_torch_memory_resume(void)
{
    try {
        if (current == nullptr || !current->live.load(std::memory_order_relaxed))
            return -ESRCH;
        if (slot() != nullptr)
            return -EBUSY;
        c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, current);
        return 0;
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    } catch (...) {
        return -EINVAL;
    }
}

extern "C" int tw_torch_memory_step_aside(void)
{
    try {
        if (current == nullptr || slot() != current.get())
            return -ESRCH;
        c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
        return 0;
    } catch (...) {
        return -EINVAL;
    }
}

extern "C" int tw_torch_memory_stop(int pushed_here)
{
    if (current == nullptr)
        return 0;
    // Inert first: threads that inherited it (a backward still running) report nothing from now on.
    current->live.store(false, std::memory_order_relaxed);
    int rc = 0;
    try {
        if (!pushed_here)
            ; // stepped aside for another profiler, which still runs: ours is not in this thread's state
        else if (slot() == current.get())
            c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
        else
            rc = -EBUSY; // not on top of this thread's state: left there, inert (popped by the next start)
    } catch (...) {
        rc = -EINVAL;
    }
    current.reset(); // the threads that hold it keep it alive until they drop it
    restore_logs();
    return rc;
}
