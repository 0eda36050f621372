/* SPDX-License-Identifier: MIT */
/*
 * tw-report --trace: calls as events (chrome_trace_events.h), in torch.profiler's words: cat cpu_op
 * (python_function for a module's forward), "External id", a backward node's "Sequence number" and
 * "Fwd thread id" with its fwdbwd arrow; the CUDA calls a call made (cuda_runtime) with their ac2g
 * arrows to the GPU work. What is ours stays in args. See chrome_trace.c.
 */
#include "config.h"
#include "chrome_trace_events.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"
#include "torchwrapper/escape.h"

#include "chrome_trace_out.h"
#include "chrome_trace_tracks.h"
#include "index.h"
#include "site_texts.h"

/* ---- calls ------------------------------------------------------------------------------------------ */

/* A call the trace took among the calls read lately (the pass's index), or NULL. */
static const report_call_t *recent_find(trace_t *t, int64_t pid, uint64_t call_id)
{
    return report_index_call_of(t->index, pid, call_id, REPORT_USE_TRACE);
}

void trace_note_time(trace_t *t, int64_t pid, uint64_t call_id, int64_t ts)
{
    report_call_t *c = report_index_call(t->index, pid, call_id);
    if (c != NULL)
        report_index_set(c, REPORT_USE_TRACE, (uint64_t)ts);
}

static char *reserve(trace_thread_t *th, size_t n)
{
    if (th->text_used + n > th->text_capacity) {
        size_t capacity = th->text_capacity ? th->text_capacity : 1 << 16;
        while (capacity < th->text_used + n)
            capacity *= 2;
        char *bigger = realloc(th->text, capacity);
        if (bigger == NULL)
            return NULL;
        th->text = bigger;
        th->text_capacity = capacity;
    }
    return th->text + th->text_used;
}

static char *put_u64(char *p, const char *key, uint64_t v)
{
    p += sprintf(p, ",\"%s\":", key);
    return tw_format_u64(p, v);
}

int trace_format_call(trace_t *t, trace_thread_t *th, const tw_row_t *row, size_t *text, uint32_t *len)
{
    const char *site = row->site != 0 && t->sites != NULL ? report_site_text(t->sites, row->pid, row->site) : NULL;
    size_t site_len = site != NULL ? strlen(site) : 0;
    size_t most = 6 * (row->api.len + row->args.len + row->module.len + row->fwd_api.len + site_len) +
                  2 * row->args.len + 1024;
    char *start = reserve(th, most), *p = start;
    if (p == NULL)
        return TW_ENOMEM;
    /* a module's forward is a Python function (torch.profiler's with_modules events are too); a
     * backward node names the module it is charged to, and is an operator */
    p = row->has_module == 1 && row->fwd_call_id == 0 ? LIT(p, ",\"cat\":\"python_function\",\"name\":") : LIT(p, ",\"cat\":\"cpu_op\",\"name\":");
    p = tw_json_escape(p, row->api.ptr, row->api.len);
    p += sprintf(p, ",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"args\":{\"External id\":", row->pid, th->tid);
    p = tw_format_u64(p, row->call_id);
    if (row->fwd_call_id != 0) { /* a backward node: its forward call, as torch.profiler links them */
        p = put_u64(p, "Sequence number", row->fwd_call_id);
        const report_call_t *fwd = recent_find(t, row->pid, row->fwd_call_id);
        if (fwd != NULL)
            p = put_u64(p, "Fwd thread id", fwd->tid);
    }
    if (row->args.len > 0) {
        p = LIT(p, ",\"Input Dims\":");
        int n = tw_args_shapes(row->args.ptr, row->args.len, p, 2 * row->args.len + 2);
        p = n > 0 ? p + n : p - (sizeof ",\"Input Dims\":" - 1);
    }
    p = put_u64(p, "call_id", row->call_id);
    p = put_u64(p, "parent_id", row->parent_id);
    p = put_u64(p, "depth", row->depth);
    p = put_u64(p, "self_ns", row->self_ns);
    p = put_u64(p, "gpu_ns", row->gpu_ns);
    if (row->step >= 0)
        p = put_u64(p, "step", (uint64_t)row->step);
    if (row->has_module == 1) {
        p = LIT(p, ",\"module\":");
        p = tw_json_escape(p, row->module.ptr, row->module.len);
    }
    if (site != NULL) {
        p = LIT(p, ",\"site\":");
        p = tw_json_escape(p, site, site_len);
    }
    if (row->fwd_call_id != 0) {
        p = put_u64(p, "fwd_call_id", row->fwd_call_id);
        p = LIT(p, ",\"fwd_api\":");
        p = tw_json_escape(p, row->fwd_api.ptr, row->fwd_api.len);
    }
    if (row->flops_total != 0) {
        p = put_u64(p, "flops", row->flops);
        p = put_u64(p, "flops_total", row->flops_total);
    }
    if (row->mem_alloc != 0 || row->mem_freed != 0 || row->mem_peak != 0) {
        p = put_u64(p, "mem_alloc", row->mem_alloc);
        p = put_u64(p, "mem_self", row->mem_self);
        p = put_u64(p, "mem_freed", row->mem_freed);
        p = put_u64(p, "mem_peak", row->mem_peak);
    }
    if (row->error)
        p = LIT(p, ",\"error\":true");
    p = LIT(p, ",\"args\":");
    p = tw_json_escape(p, row->args.ptr, row->args.len);
    p = LIT(p, "}}");
    *text = th->text_used;
    *len = (uint32_t)(p - start);
    th->text_used += *len;
    return 0;
}

/* ---- the events ------------------------------------------------------------------------------------- */

/* The arrow from a backward node's forward call to the node: now when the forward call was seen,
 * else when it is written. */
static void backward_arrow(trace_t *t, const trace_thread_t *th, const trace_node_t *n)
{
    const report_call_t *fwd = recent_find(t, th->pid, n->fwd_call_id);
    if (fwd != NULL) {
        trace_arrow(t, th->proc, "fwdbwd", th->pid, fwd->tid, (int64_t)fwd->value[REPORT_USE_TRACE], th->pid, th->tid,
                    n->ts);
        return;
    }
    report_wait_t *w = report_index_wait(t->index, th->pid, n->fwd_call_id, REPORT_WAIT_TRACE_FORWARD);
    if (w == NULL)
        return; /* the index's bound: that arrow is not drawn */
    w->a = (uint64_t)n->ts;
    w->b = th->tid;
}

/* The arrows to the nodes of call (pid, call_id) written before it, in the order they were. */
static void pending_arrows(trace_t *t, const trace_thread_t *th, const trace_node_t *n)
{
    report_wait_t *w;
    while ((w = report_index_waiting(t->index, th->pid, n->call_id, REPORT_WAIT_TRACE_FORWARD)) != NULL) {
        trace_arrow(t, th->proc, "fwdbwd", th->pid, th->tid, n->ts, w->pid, w->b, (int64_t)w->a);
        report_index_remove(t->index, w);
    }
}

void trace_write_node(trace_t *t, trace_thread_t *th, const trace_node_t *n)
{
    char head[96];
    char *p = LIT(head, "{\"ph\":\"X\",\"ts\":");
    p = trace_format_time(p, n->ts);
    p = LIT(p, ",\"dur\":");
    p = trace_format_time(p, n->end - n->ts);
    trace_put(t, th->proc, head, (size_t)(p - head));
    if (n->kind == NODE_RUNTIME) {
        const trace_launch_t *l = &t->launches[n->launch];
        trace_printf(t, th->proc, ",\"cat\":\"cuda_runtime\",\"name\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64
                                  ",\"args\":{\"External id\":%" PRIu64 ",\"correlation\":%" PRIu64 "}},\n",
                     t->launch_names[l->name], th->pid, th->tid, n->call_id, l->correlation);
        trace_arrow(t, th->proc, "ac2g", th->pid, th->tid, n->ts, l->gpu_pid, l->gpu_tid, l->gpu_ts);
        return;
    }
    trace_put(t, th->proc, th->text + n->text, n->text_len);
    trace_put(t, th->proc, ",\n", 2);
    if (!n->multi && n->step >= 0)
        trace_step_seen(t, th->proc, n->step, n->ts, n->end);
    if (n->arrow) { /* to GPU work whose CUDA call is not known: its end was drawn with the work */
        char id[48];
        snprintf(id, sizeof id, "\"%" PRId64 ".%" PRIu64 "\"", th->pid, n->call_id);
        trace_flow(t, th->proc, 's', "ac2g", id, th->pid, th->tid, n->ts);
    }
    if (n->fwd_call_id != 0)
        backward_arrow(t, th, n);
    trace_note_time(t, th->pid, n->call_id, n->ts); /* its final time, for the arrows of its nodes */
    pending_arrows(t, th, n);
}
