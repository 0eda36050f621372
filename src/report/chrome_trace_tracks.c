/* SPDX-License-Identifier: MIT */
/*
 * tw-report --trace: the tracks beside the threads' calls. GPU work (kernels, copies, memsets) on
 * Kineto's device tracks, and the CUDA calls that launched it, kept by the call that made them until
 * its row comes (chrome_trace_nest.c draws them inside it); each process's steps, ProfilerStep#N.
 * See chrome_trace.c.
 */
#include "config.h"
#include "chrome_trace_tracks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"
#include "torchwrapper/escape.h"

#include "chrome_trace_out.h"
#include "groups.h"

static struct trace_launcher *launcher_slot(trace_t *t, int64_t pid, uint64_t call_id)
{
    size_t mask = t->launcher_capacity - 1, j = report_pid_id_hash(pid, call_id) & mask;
    while (t->launchers[j].call_id != 0 && !(t->launchers[j].call_id == call_id && t->launchers[j].pid == pid))
        j = (j + 1) & mask;
    return &t->launchers[j];
}

/* The launcher entry of call (pid, call_id), made if missing; NULL when out of memory. */
static struct trace_launcher *launcher_get(trace_t *t, int64_t pid, uint64_t call_id)
{
    if ((t->nlaunchers + 1) * 2 > t->launcher_capacity) {
        size_t capacity = t->launcher_capacity ? t->launcher_capacity * 2 : 1024, old_capacity = t->launcher_capacity;
        struct trace_launcher *old = t->launchers, *slots = calloc(capacity, sizeof *slots);
        if (slots == NULL)
            return NULL;
        t->launchers = slots;
        t->launcher_capacity = capacity;
        for (size_t i = 0; i < old_capacity; i++)
            if (old[i].call_id != 0)
                *launcher_slot(t, old[i].pid, old[i].call_id) = old[i];
        free(old);
    }
    struct trace_launcher *l = launcher_slot(t, pid, call_id);
    if (l->call_id == 0) {
        *l = (struct trace_launcher){pid, call_id, TRACE_NONE, 0};
        t->nlaunchers++;
    }
    return l;
}

uint32_t trace_launches_of(trace_t *t, int64_t pid, uint64_t call_id, int *arrow_from_call)
{
    *arrow_from_call = 0;
    if (t->launcher_capacity == 0 || call_id == 0)
        return TRACE_NONE;
    const struct trace_launcher *l = launcher_slot(t, pid, call_id);
    if (l->call_id == 0)
        return TRACE_NONE;
    *arrow_from_call = l->arrow;
    return l->first;
}

static uint16_t launch_name(trace_t *t, tw_str_t name)
{
    for (size_t i = 0; i < t->nlaunch_names; i++)
        if (strlen(t->launch_names[i]) == name.len && memcmp(t->launch_names[i], name.ptr, name.len) == 0)
            return (uint16_t)i;
    if (t->nlaunch_names == sizeof t->launch_names / sizeof t->launch_names[0] ||
        name.len >= sizeof t->launch_names[0] || memchr(name.ptr, '"', name.len) || memchr(name.ptr, '\\', name.len))
        return 0; /* "cuda_runtime", the first */
    snprintf(t->launch_names[t->nlaunch_names], sizeof t->launch_names[0], "%.*s", (int)name.len, name.ptr);
    return (uint16_t)t->nlaunch_names++;
}

int trace_gpu_event(trace_t *t, size_t proc, const tw_row_t *row, int64_t ts)
{
    trace_out_t *o = &t->outs[t->procs[proc].out];
    if (o->gpu_pid == 0)
        o->gpu_pid = row->pid; /* its GPU work on device tracks, as Kineto's (pid = device, tid = stream) */
    int64_t pid;
    uint64_t tid;
    if (o->gpu_pid == row->pid) {
        pid = row->device;
        tid = (uint64_t)row->stream;
        if (!trace_track_seen(o, pid, 0))
            trace_out_printf(t, o, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":"
                             "{\"name\":\"GPU %" PRId64 "\"}},\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%"
                             PRId64 ",\"tid\":0,\"args\":{\"sort_index\":%" PRId64 "}},\n", pid, pid, pid,
                       (int64_t)0x1000000 + pid);
        if (!trace_track_seen(o, pid, tid))
            trace_out_printf(t, o, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"args\":"
                             "{\"name\":\"stream %" PRId64 "\"}},\n", pid, tid, row->stream);
    } else { /* another process of the file: its GPU work on tracks of its own */
        pid = row->pid;
        tid = 0x40000000ull + ((uint64_t)(row->device & 0x3FFF) << 16) + (uint64_t)(row->stream & 0xFFFF);
        if (!trace_track_seen(o, pid, tid))
            trace_out_printf(t, o, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"args\":"
                             "{\"name\":\"GPU %" PRId64 " stream %" PRId64 "\"}},\n", pid, tid, row->device,
                       row->stream);
    }
    const char *cat = "kernel";
    if (row->gpu_kind.len == 6 && memcmp(row->gpu_kind.ptr, "memcpy", 6) == 0)
        cat = "gpu_memcpy";
    else if (row->gpu_kind.len == 6 && memcmp(row->gpu_kind.ptr, "memset", 6) == 0)
        cat = "gpu_memset";
    trace_out_printf(t, o, "{\"ph\":\"X\",\"cat\":\"%s\",\"name\":", cat);
    tw_str_t name = row->name.len ? row->name : row->gpu_kind;
    if (cat[0] == 'g' && name.len > 0 && name.ptr[0] == 'm') {
        /* "Memcpy HtoD", "Memset", as torch.profiler names them (HTA tells copies by that prefix) */
        trace_out_put(t, o, "\"M", 2);
        char *rest = malloc(6 * name.len + 2);
        if (rest != NULL) {
            char *end = tw_json_escape(rest, name.ptr + 1, name.len - 1);
            trace_out_put(t, o, rest + 1, (size_t)(end - rest - 1)); /* the escaped text and its closing quote */
            free(rest);
        }
    } else {
        trace_out_string(t, o, name.ptr, name.len);
    }
    trace_out_printf(t, o, ",\"pid\":%" PRId64 ",\"tid\":%" PRIu64, pid, tid);
    trace_time(t, proc, "ts", ts);
    trace_time(t, proc, "dur", (int64_t)row->cost_ns);
    trace_out_put(t, o, ",\"args\":{", 9);
    if (row->call_id != 0)
        trace_out_printf(t, o, "\"External id\":%" PRIu64 ",", row->call_id);
    trace_out_printf(t, o, "\"device\":%" PRId64 ",\"stream\":%" PRId64 ",\"correlation\":%" PRIu64 ",\"call_id\":%" PRIu64
                     ",\"kind\":", row->device, row->stream, row->correlation_id, row->call_id);
    trace_out_string(t, o, row->gpu_kind.ptr, row->gpu_kind.len);
    trace_out_put(t, o, ",\"api\":", 7);
    trace_out_string(t, o, row->api.ptr, row->api.len);
    trace_out_put(t, o, "}},\n", 4);
    if (row->call_id == 0)
        return 0; /* launched outside the profiled calls: on a thread not known */
    struct trace_launcher *l = launcher_get(t, row->pid, row->call_id);
    if (l == NULL)
        return TW_ENOMEM;
    if (row->launch_start_ns == 0) {
        /* its CUDA call is not known (older files): an arrow from the call that launched it */
        char id[48];
        snprintf(id, sizeof id, "\"%" PRId64 ".%" PRIu64 "\"", row->pid, row->call_id);
        trace_flow(t, proc, 'f', "ac2g", id, pid, tid, ts);
        l->arrow = 1;
        return 0;
    }
    if (t->nlaunches == t->launch_capacity) {
        uint32_t capacity = t->launch_capacity ? t->launch_capacity * 2 : 1024;
        void *bigger = realloc(t->launches, capacity * sizeof *t->launches);
        if (bigger == NULL)
            return TW_ENOMEM;
        t->launches = bigger;
        t->launch_capacity = capacity;
    }
    int64_t offset = t->procs[proc].offset_ns;
    t->launches[t->nlaunches] = (trace_launch_t){
        .start = row->launch_start_ns - t->origin_ns + offset, .end = row->launch_end_ns - t->origin_ns + offset,
        .gpu_ts = ts, .gpu_pid = pid, .gpu_tid = tid, .correlation = row->correlation_id, .next = l->first,
        .name = launch_name(t, row->launch)};
    l->first = t->nlaunches++; /* (the call's launches are put in start order when it comes) */
    return 0;
}

/* ---- steps ------------------------------------------------------------------------------------------ */

void trace_step_seen(trace_t *t, size_t proc, int64_t step, int64_t ts, int64_t end)
{
    trace_proc_t *p = &t->procs[proc];
    if (p->nsteps > 0 && p->steps[p->nsteps - 1].step == step) {
        struct trace_step *s = &p->steps[p->nsteps - 1];
        s->ts = ts < s->ts ? ts : s->ts;
        s->end = end > s->end ? end : s->end;
        return;
    }
    if (p->nsteps == p->step_capacity) {
        size_t capacity = p->step_capacity ? p->step_capacity * 2 : 64;
        void *bigger = realloc(p->steps, capacity * sizeof *p->steps);
        if (bigger == NULL)
            return; /* that step is not drawn */
        p->steps = bigger;
        p->step_capacity = capacity;
    }
    p->steps[p->nsteps++] = (struct trace_step){step, ts, end};
}

static int compare_steps(const void *a, const void *b)
{
    const struct trace_step *x = a, *y = b;
    return x->step < y->step ? -1 : x->step > y->step ? 1 : x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* ProfilerStep#N for each step of process proc, as torch.profiler's: a step lasts until the next
 * begins. */
void trace_write_steps(trace_t *t, size_t proc)
{
    trace_proc_t *p = &t->procs[proc];
    if (p->nsteps == 0)
        return;
    qsort(p->steps, p->nsteps, sizeof *p->steps, compare_steps);
    size_t n = 0;
    for (size_t i = 0; i < p->nsteps; i++) {
        if (n > 0 && p->steps[n - 1].step == p->steps[i].step) {
            if (p->steps[i].end > p->steps[n - 1].end)
                p->steps[n - 1].end = p->steps[i].end;
            continue;
        }
        p->steps[n++] = p->steps[i];
    }
    trace_printf(t, proc, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId64 ",\"tid\":%llu,\"args\":{\"name\":"
                          "\"steps\"}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%" PRId64 ",\"tid\":%llu,"
                          "\"args\":{\"sort_index\":-1}},\n", p->pid, TRACE_STEPS_TID, p->pid, TRACE_STEPS_TID);
    int64_t last_end = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        struct trace_step *s = &p->steps[i];
        if (s->ts < last_end)
            s->ts = last_end;
        if (i + 1 < n && p->steps[i + 1].step == s->step + 1 && p->steps[i + 1].ts > s->end)
            s->end = p->steps[i + 1].ts;
        if (s->end < s->ts)
            s->end = s->ts;
        trace_printf(t, proc, "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#%" PRId64
                              "\",\"pid\":%" PRId64 ",\"tid\":%llu", s->step, p->pid, TRACE_STEPS_TID);
        trace_time(t, proc, "ts", s->ts);
        trace_time(t, proc, "dur", s->end - s->ts);
        trace_printf(t, proc, ",\"args\":{\"step\":%" PRId64 "}},\n", s->step);
        last_end = s->end;
    }
}
