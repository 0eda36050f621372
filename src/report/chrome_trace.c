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
 * them has, chrome_trace_nest.c); its write finishes the files. Its parts, each above the ones it
 * uses, share the state of chrome_trace_types.h.
 */
#include "config.h"
#include "chrome_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "torchwrapper/common.h"

#include "chrome_trace_events.h"
#include "chrome_trace_nest.h"
#include "chrome_trace_out.h"
#include "chrome_trace_tracks.h"
#include "groups.h"
#include "util.h"

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
        trace_out_head(t, o);
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
    trace_note_time(t, row->pid, row->call_id, ts); /* taken: a node made by it names its thread */
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
            trace_out_head(t, o); /* the one file of a run with no rows */
        /* The last event is an empty metadata record so that every event above can end with a comma. */
        trace_out_put(t, o, "{\"ph\":\"M\",\"name\":\"trace_end\",\"pid\":0,\"tid\":0,\"args\":{}}\n]}\n", 58);
        trace_out_close(t, o);
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
        trace_out_close(t, &t->outs[i]);
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
        if (trace_out_open(t, &t->outs[0]) != 0) {
            rc = errno ? -errno : TW_EIO;
            fprintf(err, "tw-report: cannot write the trace %s: %s\n", path, strerror(errno));
        } else {
            trace_out_head(t, &t->outs[0]);
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
