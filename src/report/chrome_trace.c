/* SPDX-License-Identifier: MIT */
/*
 * tw-report, --trace: the trace event file torch.profiler (Kineto) writes, for Perfetto,
 * chrome://tracing and Holistic Trace Analysis (HTA): gzip or plain, one file, or with --trace DIR/
 * one file per rank as HTA's TraceAnalysis(trace_dir=...) reads them.
 *
 * As Kineto writes it (libkineto/src/output_json.cpp; HTA's hta/common/trace_parser.py reads it):
 * distributedInfo {"rank": R, "world_size": W} first in the file (HTA finds a file's rank by the text
 * "rank": R); each call a complete event of cat cpu_op (python_function for a module's forward) with
 * args "External id" (its call id); each GPU kernel, copy and memset (cat kernel, gpu_memcpy,
 * gpu_memset) on pid = device, tid = stream, with "External id" (the call that launched it),
 * "correlation" and "stream"; the CUDA call that launched it (cat cuda_runtime, cudaLaunchKernel ...)
 * inside that call with the same "External id" and "correlation", and an ac2g arrow to the work; a
 * backward node with "Sequence number" (its forward call's id) and "Fwd thread id", and an fwdbwd
 * arrow from its forward call; ProfilerStep#N slices (cat user_annotation) from the step column, on
 * a track of their own above each process's threads. What is ours stays in args (call and parent ids,
 * self and GPU time, the module path, the call site, FLOPs, memory, the argument summary).
 *
 * A sink (sink.h): events are written as rows come (a thread's calls once the outermost call around
 * them has, chrome_trace_nest.c); its write finishes the files.
 */
#include "config.h"
#include "chrome_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "torchwrapper/common.h"
#include "torchwrapper/writer.h"

#include "chrome_trace_internal.h"
#include "groups.h"
#include "util.h"

#define TRACE_BUF (1u << 16)
#define TRACE_OPEN 64          /* output files open at once; more are closed and appended to again */

/* ---- output files --------------------------------------------------------------------------------- */

static void out_flush(trace_out_t *o)
{
    if (o->used == 0 || o->failed)
        return;
    size_t wrote = o->gz ? (size_t)gzwrite(o->gz, o->buf, (unsigned)o->used) : fwrite(o->buf, 1, o->used, o->file);
    o->failed = wrote != o->used;
    o->used = 0;
}

static void out_close(trace_t *t, trace_out_t *o)
{
    if (o->file == NULL && o->gz == NULL)
        return;
    out_flush(o);
    int closed = o->gz ? gzclose(o->gz) == Z_OK : fclose(o->file) == 0;
    o->failed |= !closed;
    o->gz = NULL;
    o->file = NULL;
    free(o->buf);
    o->buf = NULL;
    t->open_outs--;
}

/* Opens o (again: appended to, a gzip file as one more member), closing the least recently used
 * output when too many are open. 0, or o->failed. */
static int out_open(trace_t *t, trace_out_t *o)
{
    o->last_use = ++t->uses;
    if (o->file != NULL || o->gz != NULL)
        return 0;
    if (o->failed)
        return -1;
    if (t->open_outs >= TRACE_OPEN) {
        trace_out_t *oldest = NULL;
        for (size_t i = 0; i < t->nouts; i++)
            if ((t->outs[i].file || t->outs[i].gz) && (oldest == NULL || t->outs[i].last_use < oldest->last_use))
                oldest = &t->outs[i];
        if (oldest != NULL)
            out_close(t, oldest);
    }
    const char *mode = o->started ? "ab" : "wb";
    if ((o->buf = malloc(TRACE_BUF)) == NULL) {
        o->failed = 1;
        return -1;
    }
    if (report_has_suffix(o->path, ".gz"))
        o->gz = gzopen(o->path, o->started ? "ab6" : "wb6");
    else
        o->file = fopen(o->path, mode);
    if (o->gz == NULL && o->file == NULL) {
        free(o->buf);
        o->buf = NULL;
        o->failed = 1;
        return -1;
    }
    t->open_outs++;
    return 0;
}

void trace_out_put(trace_t *t, trace_out_t *o, const char *s, size_t len)
{
    if (out_open(t, o) != 0)
        return;
    if (o->used + len > TRACE_BUF)
        out_flush(o);
    if (len > TRACE_BUF) {
        size_t wrote = o->gz ? (size_t)gzwrite(o->gz, s, (unsigned)len) : fwrite(s, 1, len, o->file);
        o->failed |= wrote != len;
        return;
    }
    memcpy(o->buf + o->used, s, len);
    o->used += len;
}

static void out_vprintf(trace_t *t, trace_out_t *o, const char *fmt, va_list ap)
{
    char line[2048];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n > 0)
        trace_out_put(t, o, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

void trace_out_printf(trace_t *t, trace_out_t *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_vprintf(t, o, fmt, ap);
    va_end(ap);
}

void trace_put(trace_t *t, size_t proc, const char *s, size_t len)
{
    trace_out_put(t, &t->outs[t->procs[proc].out], s, len);
}

void trace_printf(trace_t *t, size_t proc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_vprintf(t, &t->outs[t->procs[proc].out], fmt, ap);
    va_end(ap);
}

/* Microseconds with three decimals: exact to the nanosecond as a double. */
static char *format_time(char *p, int64_t ns)
{
    int64_t us = ns / 1000, frac = ns % 1000;
    if (frac < 0) {
        us -= 1;
        frac += 1000;
    }
    return p + sprintf(p, "%" PRId64 ".%03" PRId64, us, frac);
}

void trace_time(trace_t *t, size_t proc, const char *key, int64_t ns)
{
    char text[64];
    char *p = text + snprintf(text, 24, ",\"%s\":", key);
    p = format_time(p, ns);
    trace_put(t, proc, text, (size_t)(p - text));
}

/* A JSON string of s, quotes included (6 bytes out per byte in at worst). */
void trace_out_string(trace_t *t, trace_out_t *o, const char *s, size_t len)
{
    char small[6 * 256 + 2];
    char *text = len <= 256 ? small : malloc(6 * len + 2);
    if (text == NULL) {
        o->failed = 1;
        return;
    }
    trace_out_put(t, o, text, (size_t)(tw_json_escape(text, s, len) - text));
    if (text != small)
        free(text);
}

/* The head of a file: distributedInfo first, so that HTA finds its rank in the first line. */
static void out_head(trace_t *t, trace_out_t *o)
{
    if (o->rank >= 0)
        trace_out_printf(t, o, "{\"distributedInfo\": {\"rank\": %" PRId64 ", \"world_size\": %" PRId64 "},\n", o->rank,
                   t->world_size > o->rank ? t->world_size : o->rank + 1);
    else
        trace_out_put(t, o, "{", 1);
    int64_t clock_error = -1; /* the largest of the processes' clock errors: how well the ranks line up */
    for (size_t i = 0; i < t->in->nprocs; i++)
        if (t->in->procs[i].has_clock && t->in->procs[i].clock_error_ns > clock_error)
            clock_error = t->in->procs[i].clock_error_ns;
    trace_out_printf(t, o, "\"schemaVersion\": 1, \"deviceProperties\": [], \"displayTimeUnit\": \"ns\", "
                     "\"baseTimeNanoseconds\": %" PRId64 ",\n\"otherData\": {\"origin_ns\": %" PRId64
                     ", \"generator\": \"tw-report %s\"", t->origin_ns, t->origin_ns, tw_version());
    if (clock_error >= 0)
        trace_out_printf(t, o, ", \"clocks_aligned_to\": \"rank 0\", \"clock_error_ns\": %" PRId64, clock_error);
    trace_out_put(t, o, "},\n\"traceEvents\": [\n", 20);
    o->started = 1;
}

int trace_track_seen(trace_out_t *o, int64_t pid, uint64_t tid)
{
    for (size_t i = 0; i < o->ntracks; i++)
        if (o->tracks[i].pid == pid && o->tracks[i].tid == tid)
            return 1;
    if (o->ntracks == o->track_capacity) {
        size_t capacity = o->track_capacity ? o->track_capacity * 2 : 64;
        void *bigger = realloc(o->tracks, capacity * sizeof *o->tracks);
        if (bigger == NULL)
            return 1; /* the track is just not named */
        o->tracks = bigger;
        o->track_capacity = capacity;
    }
    o->tracks[o->ntracks].pid = pid;
    o->tracks[o->ntracks++].tid = tid;
    return 0;
}

/* ---- processes and their outputs -------------------------------------------------------------------- */

/* The output of a process with this rank (-1: none): created, not yet opened. SIZE_MAX when out of
 * memory. */
static size_t output_for(trace_t *t, int64_t rank, int64_t pid)
{
    if (!t->dir)
        return 0; /* the one file, made at open */
    int unranked = rank < 0 && t->any_rank;
    if (rank < 0 && !t->any_rank)
        rank = 0; /* a run without ranks: one trainer, rank 0 for HTA */
    for (size_t i = 0; !unranked && i < t->nouts; i++) /* (each process without a rank has a file) */
        if (t->outs[i].rank == rank)
            return i;
    if (t->nouts == t->outs_capacity) {
        size_t capacity = t->outs_capacity ? t->outs_capacity * 2 : 8;
        void *bigger = realloc(t->outs, capacity * sizeof *t->outs);
        if (bigger == NULL)
            return SIZE_MAX;
        t->outs = bigger;
        t->outs_capacity = capacity;
    }
    size_t len = strlen(t->path) + 64;
    char *path = malloc(len);
    if (path == NULL)
        return SIZE_MAX;
    const char *slash = report_has_suffix(t->path, "/") ? "" : "/";
    if (unranked) {
        /* Not a rank of the run (a launcher): beside the ranks' files, where HTA does not look. */
        snprintf(path, len, "%s%sunranked", t->path, slash);
        mkdir(path, 0777);
        snprintf(path, len, "%s%sunranked/pid%" PRId64 ".pt.trace.json.gz", t->path, slash, pid);
    } else {
        snprintf(path, len, "%s%srank%" PRId64 ".pt.trace.json.gz", t->path, slash, rank);
    }
    trace_out_t *o = &t->outs[t->nouts];
    memset(o, 0, sizeof *o);
    o->path = path;
    o->rank = unranked ? -1 : rank;
    return t->nouts++;
}

/* The process of pid, noted (named in its file) when first seen; SIZE_MAX when out of memory. */
static size_t proc_of(trace_t *t, int64_t pid)
{
    if (t->proc_hint < t->nprocs && t->procs[t->proc_hint].pid == pid)
        return t->proc_hint;
    for (size_t i = 0; i < t->nprocs; i++)
        if (t->procs[i].pid == pid)
            return t->proc_hint = i;
    if (t->nprocs == t->procs_capacity) {
        size_t capacity = t->procs_capacity ? t->procs_capacity * 2 : 16;
        void *bigger = realloc(t->procs, capacity * sizeof *t->procs);
        if (bigger == NULL)
            return SIZE_MAX;
        t->procs = bigger;
        t->procs_capacity = capacity;
    }
    const input_proc_t *known = report_input_proc(t->in, pid, NULL);
    int64_t rank = known != NULL ? known->rank : -1;
    size_t out = output_for(t, rank, pid);
    if (out == SIZE_MAX)
        return SIZE_MAX;
    trace_proc_t *p = &t->procs[t->nprocs];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    p->out = out;
    p->offset_ns = known != NULL && known->has_clock ? known->clock_offset_ns : 0;
    trace_out_t *o = &t->outs[out];
    if (!o->started)
        out_head(t, o);
    trace_track_seen(o, pid, 0);
    if (rank >= 0)
        trace_out_printf(t, o, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":{\"name\":"
                         "\"rank %" PRId64 " (pid %" PRId64 ")\"}},\n", pid, rank, pid);
    else
        trace_out_printf(t, o, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":{\"name\":"
                         "\"pid %" PRId64 "\"}},\n", pid, pid);
    if (known != NULL && known->has_clock) /* what its times were moved by, and how exact */
        trace_out_printf(t, o, "{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":"
                         "{\"labels\":\"clock %+.3f ms to rank 0's, within %.3f ms\",\"clock_offset_ns\":%" PRId64
                         ",\"clock_error_ns\":%" PRId64 "}},\n", pid, (double)known->clock_offset_ns / 1e6,
                   (double)known->clock_error_ns / 1e6, known->clock_offset_ns, known->clock_error_ns);
    return t->proc_hint = t->nprocs++;
}

/* The thread (pid, tid), named in its file when first seen; NULL when out of memory. */
static trace_thread_t *thread_of(trace_t *t, int64_t pid, uint64_t tid, size_t proc)
{
    size_t mask = t->thread_slot_capacity - 1;
    size_t j = t->thread_slot_capacity ? report_pid_id_hash(pid, tid) & mask : 0;
    for (; t->thread_slot_capacity && t->thread_slots[j] != 0; j = (j + 1) & mask) {
        trace_thread_t *th = &t->threads[t->thread_slots[j] - 1];
        if (th->pid == pid && th->tid == tid)
            return th;
    }
    if ((t->nthreads + 1) * 2 > t->thread_slot_capacity) {
        size_t capacity = t->thread_slot_capacity ? t->thread_slot_capacity * 2 : 64;
        uint32_t *slots = calloc(capacity, sizeof *slots);
        if (slots == NULL)
            return NULL;
        for (size_t i = 0; i < t->nthreads; i++) {
            size_t k = report_pid_id_hash(t->threads[i].pid, t->threads[i].tid) & (capacity - 1);
            while (slots[k] != 0)
                k = (k + 1) & (capacity - 1);
            slots[k] = (uint32_t)i + 1;
        }
        free(t->thread_slots);
        t->thread_slots = slots;
        t->thread_slot_capacity = capacity;
        for (j = report_pid_id_hash(pid, tid) & (capacity - 1); slots[j] != 0; j = (j + 1) & (capacity - 1))
            ;
    }
    if (t->nthreads == t->threads_capacity) {
        size_t capacity = t->threads_capacity ? t->threads_capacity * 2 : 16;
        void *bigger = realloc(t->threads, capacity * sizeof *t->threads);
        if (bigger == NULL)
            return NULL;
        t->threads = bigger;
        t->threads_capacity = capacity;
    }
    trace_thread_t *th = &t->threads[t->nthreads];
    memset(th, 0, sizeof *th);
    th->pid = pid;
    th->tid = tid;
    th->proc = proc;
    th->last_end = INT64_MIN;
    t->thread_slots[j] = (uint32_t)++t->nthreads;
    trace_out_t *o = &t->outs[t->procs[proc].out];
    if (!trace_track_seen(o, pid, tid))
        trace_out_printf(t, o, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"args\":"
                         "{\"name\":\"thread %" PRIu64 "\"}},\n", pid, tid, tid);
    return th;
}

/* ---- calls ------------------------------------------------------------------------------------------ */

/* A call the trace took among the calls read lately (the pass's index), or NULL. */
static const report_call_t *recent_find(trace_t *t, int64_t pid, uint64_t call_id)
{
    return report_index_call_of(t->index, pid, call_id, REPORT_USE_TRACE);
}

/* Notes call (pid, call_id)'s time on the trace, when the index still holds it. */
static void recent_time(trace_t *t, int64_t pid, uint64_t call_id, int64_t ts)
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

#define LIT(p, text) (memcpy((p), text, sizeof text - 1), (p) + sizeof text - 1)

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

/* ---- arrows ----------------------------------------------------------------------------------------- */

void trace_flow(trace_t *t, size_t proc, char phase, const char *cat, const char *id, int64_t pid, uint64_t tid,
                int64_t ts)
{
    char text[384];
    int n = snprintf(text, 320, "{\"ph\":\"%c\",\"cat\":\"%s\",\"name\":\"%s\",\"id\":%s,\"pid\":%" PRId64
                                ",\"tid\":%" PRIu64 "%s,\"ts\":", phase, cat, cat, id, pid, tid,
                     phase == 'f' ? ",\"bp\":\"e\"" : "");
    if (n < 0 || n >= 320)
        return;
    char *p = text + n;
    p = format_time(p, ts);
    p = LIT(p, "},\n");
    trace_put(t, proc, text, (size_t)(p - text));
}

/* An arrow between two events of process proc's file, from (pid, tid, ts) to the other. */
void trace_arrow(trace_t *t, size_t proc, const char *cat, int64_t from_pid, uint64_t from_tid, int64_t from_ts,
                  int64_t to_pid, uint64_t to_tid, int64_t to_ts)
{
    char id[24];
    snprintf(id, sizeof id, "%" PRIu64, ++t->flows);
    trace_flow(t, proc, 's', cat, id, from_pid, from_tid, from_ts);
    trace_flow(t, proc, 'f', cat, id, to_pid, to_tid, to_ts);
}

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
    p = format_time(p, n->ts);
    p = LIT(p, ",\"dur\":");
    p = format_time(p, n->end - n->ts);
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
    recent_time(t, th->pid, n->call_id, n->ts); /* its final time, for the arrows of its nodes */
    pending_arrows(t, th, n);
}

/* ---- the sink --------------------------------------------------------------------------------------- */

static int trace_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    (void)kept;
    trace_t *t = (trace_t *)sink;
    if (t->limit != 0 && t->events >= t->limit) {
        t->skipped++;
        return 0;
    }
    size_t proc = proc_of(t, row->pid);
    if (proc == SIZE_MAX)
        return TW_ENOMEM;
    t->events++;
    /* on rank 0's clock: a rank on another host records the times of its own (clock_sync) */
    int64_t ts = (int64_t)(row->start_ns - (uint64_t)t->origin_ns) + t->procs[proc].offset_ns;
    if (row->kind == TW_FILE_GPU)
        return trace_gpu_event(t, proc, row, ts);
    trace_thread_t *th = thread_of(t, row->pid, row->tid, proc);
    if (th == NULL)
        return TW_ENOMEM;
    recent_time(t, row->pid, row->call_id, ts); /* taken: a node made by it names its thread */
    return trace_nest_call(t, th, row, ts);
}

/* Finishes the files: what the threads still hold, the steps, the tails. 0, or TW_EIO after a
 * message (a write failed: disk full?). */
static int trace_write(report_sink_t *sink, const report_pass_t *pass, FILE *err)
{
    (void)pass;
    trace_t *t = (trace_t *)sink;
    for (size_t i = 0; i < t->nthreads; i++)
        trace_nest_flush(t, &t->threads[i]);
    for (size_t i = 0; i < t->nprocs; i++)
        trace_write_steps(t, i);
    int rc = 0;
    for (size_t i = 0; i < t->nouts; i++) {
        trace_out_t *o = &t->outs[i];
        if (!o->started)
            out_head(t, o); /* the one file of a run with no rows */
        /* The last event is an empty metadata record so that every event above can end with a comma. */
        trace_out_put(t, o, "{\"ph\":\"M\",\"name\":\"trace_end\",\"pid\":0,\"tid\":0,\"args\":{}}\n]}\n", 58);
        out_close(t, o);
        if (o->failed && rc == 0) {
            fprintf(err, "tw-report: writing the trace %s failed (disk full?)\n", o->path);
            rc = TW_EIO;
        }
    }
    return rc;
}

static void trace_free(report_sink_t *sink)
{
    trace_t *t = (trace_t *)sink;
    for (size_t i = 0; i < t->nouts; i++) {
        out_close(t, &t->outs[i]);
        free(t->outs[i].path);
        free(t->outs[i].tracks);
    }
    for (size_t i = 0; i < t->nthreads; i++)
        trace_nest_free(&t->threads[i]);
    for (size_t i = 0; i < t->nprocs; i++)
        free(t->procs[i].steps);
    free(t->outs);
    free(t->procs);
    free(t->threads);
    free(t->thread_slots);
    free(t->launchers);
    free(t->launches);
    free(t);
}

static const report_sink_ops_t trace_ops = {
    .name = "chrome_trace",
    .row = trace_row,
    .write = trace_write,
    .free = trace_free,
};

int report_chrome_trace_open(const options_t *o, const inputs_t *in, const report_sites_t *sites,
                             report_index_t *index, int64_t origin_ns, report_sink_t **sink, FILE *err)
{
    const char *path = o->trace;
    trace_t *t = calloc(1, sizeof *t);
    if (t == NULL) {
        fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
        return TW_ENOMEM;
    }
    t->sink = (report_sink_t){&trace_ops, SINK_ROWS_KEPT};
    t->in = in;
    t->sites = sites;
    t->path = path;
    t->limit = o->limit;
    t->origin_ns = origin_ns;
    t->index = index;
    index->recent_wanted = 1;
    snprintf(t->launch_names[0], sizeof t->launch_names[0], "cuda_runtime");
    t->nlaunch_names = 1;
    /* The ranks: how many (a manifest's world_size, else the ranks seen), and whether any. */
    int64_t ranks[256];
    size_t nranks = 0;
    for (size_t i = 0; i < in->nprocs; i++) {
        const input_proc_t *p = &in->procs[i];
        if (p->world_size > t->world_size)
            t->world_size = p->world_size;
        if (p->rank < 0)
            continue;
        t->any_rank = 1;
        size_t k = 0;
        while (k < nranks && ranks[k] != p->rank)
            k++;
        if (k == nranks && nranks < 256)
            ranks[nranks++] = p->rank;
    }
    if ((int64_t)nranks > t->world_size)
        t->world_size = (int64_t)nranks;
    if (t->world_size < 1)
        t->world_size = 1;
    struct stat st;
    t->dir = report_has_suffix(path, "/") || (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    int rc = 0;
    if (t->dir) {
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            rc = -errno;
            fprintf(err, "tw-report: cannot make the trace directory %s: %s\n", path, strerror(errno));
        }
    } else if ((t->outs = calloc(1, sizeof *t->outs)) == NULL || (t->outs[0].path = strdup(path)) == NULL) {
        rc = TW_ENOMEM;
        fprintf(err, "tw-report: %s\n", tw_strerror(rc));
    } else {
        t->nouts = t->outs_capacity = 1;
        /* one trainer's file names its rank (a run without ranks: rank 0); several ranks' have none */
        t->outs[0].rank = nranks == 0 ? 0 : nranks == 1 ? ranks[0] : -1;
        if (out_open(t, &t->outs[0]) != 0) {
            rc = errno ? -errno : TW_EIO;
            fprintf(err, "tw-report: cannot write the trace %s: %s\n", path, strerror(errno));
        } else {
            out_head(t, &t->outs[0]);
        }
    }
    if (rc != 0) {
        trace_free(&t->sink);
        return rc;
    }
    *sink = &t->sink;
    return 0;
}

void report_chrome_trace_counts(const report_sink_t *sink, uint64_t *events, uint64_t *skipped, size_t *files)
{
    const trace_t *t = (const trace_t *)sink;
    *events = t->events;
    *skipped = t->skipped;
    *files = t->nouts;
}
