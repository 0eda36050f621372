/* SPDX-License-Identifier: MIT */
/*
 * Memory per call (config memory): the allocators' own reports, counted per OS thread.
 *
 * The libtorch layer (tw_torch_memory.cpp) puts a reporter in the starting thread's c10 debug info;
 * torch hands every allocation and free of its CPU allocator and CUDA caching allocator made on
 * that thread, or on a thread that inherited its state (autograd's engine threads), to on_report()
 * below, on that thread, with or without the GIL. on_report() updates that thread's counters
 * (tw_memory_counters_t, recorder.h); the calls recorded on the thread (tw_thread_t.memory points at
 * them) take differences of them at their beginning and end (tw_call_begin/end): bytes allocated and
 * freed during the call, and the peak.
 *
 * The allocated total: each allocator reports its own (the CPU allocator's counts the blocks it saw
 * allocated while reports were on; the CUDA allocator's, per device, all it has allocated). The peak
 * is taken over their sum, kept here from the last report of each device: one number for a call that
 * uses the CPU and a GPU.
 *
 * Not covered: threads that do not inherit the starting thread's state (other Python threads, the
 * intra-op pool's workers): their allocations are not reported to anyone (README).
 */
#include "memory.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "layer.h"

/* 1 while a session measures: threads attached meanwhile get counters (written with the GIL, read
 * also by libtorch's threads when they attach) */
static _Atomic int measuring;

static _Thread_local tw_memory_counters_t counters;
/* reports on this thread (allocations and frees), for the benchmarks */
static _Thread_local uint64_t reports;
/* this thread took the reporter off for another profiler (memory_step_aside) */
static _Thread_local int stepped_aside;

/* The allocated total of each device at its last report: the CPU, CUDA devices 0..14, the rest. */
#define DEVICE_SLOTS 17
static _Atomic uint64_t device_total[DEVICE_SLOTS];
static _Atomic uint64_t total_sum;

static unsigned device_slot(int type, int index)
{
    if (type == 0) /* c10::DeviceType::CPU */
        return 0;
    if (type == 1 && index >= 0 && index < DEVICE_SLOTS - 2) /* CUDA */
        return 1 + (unsigned)index;
    return DEVICE_SLOTS - 1;
}

/* On the thread that allocated or freed (maybe without the GIL, maybe inside the allocator's lock):
 * no call out, no allocation. */
static void on_report(int64_t bytes, uint64_t total, int device_type, int device_index)
{
    tw_memory_counters_t *m = &counters;
    reports++;
    if (bytes >= 0)
        m->allocated += (uint64_t)bytes;
    else
        m->freed += (uint64_t)0 - (uint64_t)bytes;
    if (total == 0 && bytes > 0)
        return; /* an allocator that keeps no total (a file mapping reports 0): the last one stands */
    unsigned slot = device_slot(device_type, device_index);
    uint64_t change = total - atomic_exchange_explicit(&device_total[slot], total, memory_order_relaxed);
    uint64_t sum = atomic_fetch_add_explicit(&total_sum, change, memory_order_relaxed) + change;
    m->total = sum;
    if (sum > m->peak)
        m->peak = sum;
}

int tw_memory_start(const char *layer_path, const char *torch_version, char *why, size_t why_size)
{
    if (tw_layer_need(TW_LAYER_MEMORY, layer_path, torch_version, why, why_size) != 0)
        return -1;
    int rc = tw_layer.memory_start(on_report);
    if (rc == -EBUSY) {
        snprintf(why, why_size, "another profiler holds the allocator's reports on this thread (torch.profiler is "
                                "running): memory is not measured; stop it first to measure memory");
        return -1;
    }
    if (rc != 0) {
        snprintf(why, why_size, "the allocator's reports cannot be taken: %s", strerror(-rc));
        return -1;
    }
    stepped_aside = 0;
    measuring = 1;
    return 0;
}

int tw_memory_stop(char *note, size_t note_size)
{
    if (!measuring)
        return 0;
    measuring = 0;
    int pushed_here = !stepped_aside; /* stepped aside: another profiler still runs here, ours is off */
    stepped_aside = 0;
    if (tw_layer.memory_stop(pushed_here) == 0)
        return 0;
    snprintf(note, note_size, "the allocator reporter could not be taken off the thread that started the session "
                              "(stopped on another thread, or another profiler still runs above it there): it stays "
                              "there, inert, until a next session starts on that thread");
    return -1;
}

int tw_memory_measuring(void)
{
    return measuring;
}

void tw_memory_attach(tw_thread_t *t)
{
    if (t != NULL)
        t->memory = atomic_load_explicit(&measuring, memory_order_relaxed) ? &counters : NULL;
}

/* memory_step_aside() -> bool: another profiler starts on this thread; our reporter, when it is on
 * top here, goes off until memory_resume(). */
static PyObject *core_memory_step_aside(PyObject *core, PyObject *unused)
{
    if (!measuring || stepped_aside || tw_layer.memory_step_aside() != 0)
        Py_RETURN_FALSE;
    stepped_aside = 1;
    Py_RETURN_TRUE;
}

/* memory_resume() -> bool: the other profiler stopped on this thread; ours goes back if it left. */
static PyObject *core_memory_resume(PyObject *core, PyObject *unused)
{
    if (!stepped_aside)
        Py_RETURN_FALSE;
    if (!measuring || tw_layer.memory_resume() != 0)
        Py_RETURN_FALSE; /* still stepped aside: another profiler holds the slot */
    stepped_aside = 0;
    Py_RETURN_TRUE;
}

/* memory_owner() -> "free", "ours", "inert", "other", or None when the layer's memory part is not
 * loaded: who holds this thread's allocator reports. */
static PyObject *core_memory_owner(PyObject *core, PyObject *unused)
{
    static const char *const names[] = {"free", "ours", "inert", "other"};
    if (tw_layer.memory_owner == NULL)
        Py_RETURN_NONE;
    int owner = tw_layer.memory_owner();
    return PyUnicode_FromString(owner >= 0 && owner <= 3 ? names[owner] : "other");
}

/* memory_counters() -> (allocated, freed, total, peak, reports): this thread's counters. */
static PyObject *core_memory_counters(PyObject *core, PyObject *unused)
{
    return Py_BuildValue("(KKKKK)", (unsigned long long)counters.allocated, (unsigned long long)counters.freed,
                         (unsigned long long)counters.total, (unsigned long long)counters.peak,
                         (unsigned long long)reports);
}

static PyMethodDef memory_methods[] = {
    {"memory_step_aside", core_memory_step_aside, METH_NOARGS,
     "memory_step_aside() -> bool\n--\n\nTakes memory measuring's reporter off this thread while another profiler "
     "starts here; True when it was on."},
    {"memory_resume", core_memory_resume, METH_NOARGS,
     "memory_resume() -> bool\n--\n\nPuts it back once the other profiler stopped; True when it went back."},
    {"memory_owner", core_memory_owner, METH_NOARGS,
     "memory_owner() -> 'free', 'ours', 'inert', 'other' or None\n--\n\nWho holds this thread's allocator "
     "reports (None: the libtorch layer's memory part is not loaded)."},
    {"memory_counters", core_memory_counters, METH_NOARGS,
     "memory_counters() -> (allocated, freed, total, peak, reports)\n--\n\nThis thread's allocator report counters "
     "and how many reports it had."},
    {NULL, NULL, 0, NULL},
};

int tw_memory_add_functions(PyObject *core)
{
    return PyModule_AddFunctions(core, memory_methods);
}
