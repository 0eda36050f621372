/* SPDX-License-Identifier: MIT */
/*
 * tw-report, --trace: the Chrome trace event file (Perfetto, chrome://tracing), gzip or plain, with
 * GPU rows and flow arrows (call -> its GPU work; forward call -> the backward nodes it created).
 * A sink (sink.h): events are written as the rows come; its write finishes the file.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "torchwrapper/common.h"
#include "torchwrapper/writer.h"

#include "chrome_trace.h"
#include "groups.h"
#include "util.h"

struct launch {
    int64_t pid;
    uint64_t call_id; /* 0: an empty slot */
};

typedef struct trace {
    report_sink_t sink;
    const inputs_t *in; /* the ranks, for the processes' names */
    const char *path;
    uint64_t limit;   /* calls written at most; 0: all */
    FILE *file;
    gzFile gz;
    char buf[1 << 16];
    size_t used;
    int failed;
    uint64_t events;  /* calls written */
    uint64_t skipped; /* calls beyond --limit */
    int64_t origin_ns;
    size_t proc_hint; /* report_input_proc's: rows come in runs of one process */
    /* Tracks named so far: (pid, tid) pairs; bounded by the threads and streams of the run. */
    struct { int64_t pid; uint64_t tid; } *tracks;
    size_t ntracks, track_capacity;
    /* (pid, call id) of the calls that launched GPU work, for the flow arrows. */
    struct launch *launches;
    size_t launch_capacity, nlaunches;
    /* The last calls seen, by (pid, call id) in a direct-mapped table (TRACE_RECENT slots), for the
     * arrows from a forward call to the backward nodes it created: a node comes at most a step after
     * its forward call, and the table stays 2 MB however long the run. NULL until a call is seen. */
    struct recent_call { int64_t pid; uint64_t call_id, tid; int64_t ts; } *recent;
    /* Nodes met before their forward call (another thread's records can reach the files first),
     * by (pid, forward call id), probed over a few slots: drawn when the forward call comes. */
    struct pending_node { int64_t pid; uint64_t fwd_call_id, call_id, tid; int64_t ts; } *pending;
} trace_t;

static void trace_flush(trace_t *t)
{
    if (t->used == 0 || t->failed)
        return;
    size_t wrote = t->gz ? (size_t)gzwrite(t->gz, t->buf, (unsigned)t->used) : fwrite(t->buf, 1, t->used, t->file);
    t->failed = wrote != t->used;
    t->used = 0;
}

static void trace_put(trace_t *t, const char *s, size_t len)
{
    if (t->used + len > sizeof t->buf)
        trace_flush(t);
    if (len > sizeof t->buf) {
        size_t wrote = t->gz ? (size_t)gzwrite(t->gz, s, (unsigned)len) : fwrite(s, 1, len, t->file);
        t->failed |= wrote != len;
        return;
    }
    memcpy(t->buf + t->used, s, len);
    t->used += len;
}

#define TRACE_LIT(t, text) trace_put((t), text, sizeof text - 1)

static void trace_printf(trace_t *t, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        trace_put(t, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* A JSON string of s, quotes included, escaped by the writer's tw_json_escape (6 bytes out per
 * byte in at worst). */
static void trace_string(trace_t *t, const char *s, size_t len)
{
    char small[6 * 256 + 2];
    char *out = len <= 256 ? small : malloc(6 * len + 2);
    if (out == NULL) {
        t->failed = 1;
        return;
    }
    trace_put(t, out, (size_t)(tw_json_escape(out, s, len) - out));
    if (out != small)
        free(out);
}

/* Microseconds since the origin with three decimals: exact to the nanosecond as a double. */
static void trace_time(trace_t *t, const char *key, int64_t ns)
{
    int64_t us = ns / 1000, frac = ns % 1000;
    if (frac < 0) {
        us -= 1;
        frac += 1000;
    }
    trace_printf(t, ",\"%s\":%" PRId64 ".%03" PRId64, key, us, frac);
}

static int trace_track_seen(trace_t *t, int64_t pid, uint64_t tid)
{
    for (size_t i = 0; i < t->ntracks; i++)
        if (t->tracks[i].pid == pid && t->tracks[i].tid == tid)
            return 1;
    if (t->ntracks == t->track_capacity) {
        size_t capacity = t->track_capacity ? t->track_capacity * 2 : 64;
        void *bigger = realloc(t->tracks, capacity * sizeof *t->tracks);
        if (bigger == NULL)
            return 1; /* the track is just not named */
        t->tracks = bigger;
        t->track_capacity = capacity;
    }
    t->tracks[t->ntracks].pid = pid;
    t->tracks[t->ntracks++].tid = tid;
    return 0;
}

static size_t launch_slot(const trace_t *t, int64_t pid, uint64_t call_id)
{
    size_t j = report_pid_id_hash(pid, call_id) & (t->launch_capacity - 1);
    while (t->launches[j].call_id != 0 && !(t->launches[j].call_id == call_id && t->launches[j].pid == pid))
        j = (j + 1) & (t->launch_capacity - 1);
    return j;
}

static void launch_add(trace_t *t, int64_t pid, uint64_t call_id)
{
    if ((t->nlaunches + 1) * 2 > t->launch_capacity) {
        size_t capacity = t->launch_capacity ? t->launch_capacity * 2 : 1024;
        struct launch *old = t->launches;
        size_t old_capacity = t->launch_capacity;
        struct launch *slots = calloc(capacity, sizeof *slots);
        if (slots == NULL)
            return; /* that arrow is not drawn */
        t->launches = slots;
        t->launch_capacity = capacity;
        for (size_t i = 0; i < old_capacity; i++)
            if (old[i].call_id != 0)
                t->launches[launch_slot(t, old[i].pid, old[i].call_id)] = old[i];
        free(old);
    }
    size_t j = launch_slot(t, pid, call_id);
    if (t->launches[j].call_id == 0) {
        t->launches[j].pid = pid;
        t->launches[j].call_id = call_id;
        t->nlaunches++;
    }
}

static int launch_has(const trace_t *t, int64_t pid, uint64_t call_id)
{
    return t->launch_capacity != 0 && t->launches[launch_slot(t, pid, call_id)].call_id != 0;
}

#define TRACE_RECENT (1u << 16)

static struct recent_call *recent_slot(trace_t *t, int64_t pid, uint64_t call_id)
{
    if (t->recent == NULL && (t->recent = calloc(TRACE_RECENT, sizeof *t->recent)) == NULL)
        return NULL; /* no arrows */
    return &t->recent[report_pid_id_hash(pid, call_id) & (TRACE_RECENT - 1)];
}

#define TRACE_PENDING (1u << 14)
#define TRACE_PROBES 8

static void arrow(trace_t *t, int64_t pid, uint64_t node_id, uint64_t fwd_tid, int64_t fwd_ts, uint64_t node_tid,
                  int64_t node_ts)
{
    trace_printf(t, "{\"ph\":\"s\",\"name\":\"backward\",\"cat\":\"backward\",\"id\":\"b%" PRId64 ".%" PRIu64
                    "\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64, pid, node_id, pid, fwd_tid);
    trace_time(t, "ts", fwd_ts);
    trace_printf(t, "},\n{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"backward\",\"cat\":\"backward\",\"id\":\"b%" PRId64
                    ".%" PRIu64 "\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64, pid, node_id, pid, node_tid);
    trace_time(t, "ts", node_ts);
    TRACE_LIT(t, "},\n");
}

/* An arrow from the forward call that created a backward node to the node, Perfetto drawing it
 * between the two slices: now when the forward call is among the recent calls, else when it comes. */
static void backward_arrow(trace_t *t, const tw_row_t *row, uint64_t tid, int64_t ts)
{
    struct recent_call *fwd = recent_slot(t, row->pid, row->fwd_call_id);
    if (fwd != NULL && fwd->call_id == row->fwd_call_id && fwd->pid == row->pid) {
        arrow(t, row->pid, row->call_id, fwd->tid, fwd->ts, tid, ts);
        return;
    }
    if (t->pending == NULL && (t->pending = calloc(TRACE_PENDING, sizeof *t->pending)) == NULL)
        return;
    size_t home = report_pid_id_hash(row->pid, row->fwd_call_id) & (TRACE_PENDING - 1), j = home;
    for (int i = 0; i < TRACE_PROBES && t->pending[j].fwd_call_id != 0; i++)
        j = (j + 1) & (TRACE_PENDING - 1);
    if (t->pending[j].fwd_call_id != 0)
        j = home; /* full around home: the oldest arrow there is not drawn */
    t->pending[j] = (struct pending_node){row->pid, row->fwd_call_id, row->call_id, tid, ts};
}

/* The arrows to the nodes of call (pid, call_id) that came before it. */
static void pending_arrows(trace_t *t, int64_t pid, uint64_t call_id, uint64_t tid, int64_t ts)
{
    if (t->pending == NULL)
        return;
    size_t j = report_pid_id_hash(pid, call_id) & (TRACE_PENDING - 1);
    for (int i = 0; i < TRACE_PROBES; i++, j = (j + 1) & (TRACE_PENDING - 1)) {
        struct pending_node *p = &t->pending[j];
        if (p->fwd_call_id == call_id && p->pid == pid) {
            arrow(t, pid, p->call_id, tid, ts, p->tid, p->ts);
            p->fwd_call_id = 0;
        }
    }
}

/* GPU activity goes on tracks of its own: tid 2^32 + device * 2^16 + stream, named after both. */
static uint64_t gpu_track(const tw_row_t *row)
{
    return (1ull << 32) + ((uint64_t)(row->device & 0xFFFF) << 16) + (uint64_t)(row->stream & 0xFFFF);
}

static void trace_event(trace_t *t, const tw_row_t *row)
{
    const inputs_t *in = t->in;
    int gpu = row->kind == TW_FILE_GPU;
    uint64_t tid = gpu ? gpu_track(row) : row->tid;
    if (!trace_track_seen(t, row->pid, 0)) {
        int64_t rank = -1;
        for (size_t i = 0; i < in->nranks; i++)
            if (in->rank_pids[i][0] == row->pid)
                rank = in->rank_pids[i][1];
        if (rank >= 0)
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":{\"name\":"
                            "\"rank %" PRId64 " (pid %" PRId64 ")\"}},\n", row->pid, rank, row->pid);
        const input_proc_t *proc = report_input_proc(in, row->pid, &t->proc_hint);
        if (proc != NULL && proc->has_clock) /* what the times of this process were moved by, and how exact */
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"process_labels\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":"
                            "{\"labels\":\"clock %+.3f ms to rank 0's, within %.3f ms\",\"clock_offset_ns\":%" PRId64
                            ",\"clock_error_ns\":%" PRId64 "}},\n", row->pid, (double)proc->clock_offset_ns / 1e6,
                         (double)proc->clock_error_ns / 1e6, proc->clock_offset_ns, proc->clock_error_ns);
        else
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRId64 ",\"tid\":0,\"args\":{\"name\":"
                            "\"pid %" PRId64 "\"}},\n", row->pid, row->pid);
    }
    if (!trace_track_seen(t, row->pid, tid)) {
        if (gpu)
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"args\":"
                            "{\"name\":\"GPU %" PRId64 " stream %" PRId64 "\"}},\n", row->pid, tid, row->device,
                         row->stream);
        else
            trace_printf(t, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"args\":"
                            "{\"name\":\"thread %" PRIu64 "\"}},\n", row->pid, tid, tid);
    }
    /* on rank 0's clock: a rank on another host records the times of its own (clock_sync) */
    int64_t ts = (int64_t)(row->start_ns - (uint64_t)t->origin_ns) + report_clock_offset(in, row->pid, &t->proc_hint);
    TRACE_LIT(t, "{\"ph\":\"X\",\"name\":");
    if (gpu)
        trace_string(t, row->name.len ? row->name.ptr : row->gpu_kind.ptr, row->name.len ? row->name.len
                                                                                         : row->gpu_kind.len);
    else
        trace_string(t, row->api.ptr, row->api.len);
    trace_printf(t, ",\"cat\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64, gpu ? "gpu" : "cpu", row->pid, tid);
    trace_time(t, "ts", ts);
    trace_time(t, "dur", (int64_t)row->cost_ns);
    trace_printf(t, ",\"args\":{\"call_id\":%" PRIu64, row->call_id);
    if (gpu) {
        TRACE_LIT(t, ",\"kind\":");
        trace_string(t, row->gpu_kind.ptr, row->gpu_kind.len);
        TRACE_LIT(t, ",\"api\":");
        trace_string(t, row->api.ptr, row->api.len);
        trace_printf(t, ",\"correlation_id\":%" PRIu64 "}}", row->correlation_id);
    } else {
        trace_printf(t, ",\"parent_id\":%" PRIu64 ",\"depth\":%" PRIu64 ",\"self_ns\":%" PRIu64 ",\"gpu_ns\":%" PRIu64
                        "%s,\"args\":", row->parent_id, row->depth, row->self_ns, row->gpu_ns,
                     row->error ? ",\"error\":true" : "");
        trace_string(t, row->args.ptr, row->args.len);
        TRACE_LIT(t, "}}");
    }
    TRACE_LIT(t, ",\n");
    if (!gpu) {
        if (row->fwd_call_id != 0)
            backward_arrow(t, row, tid, ts);
        struct recent_call *slot = recent_slot(t, row->pid, row->call_id);
        if (slot != NULL)
            *slot = (struct recent_call){row->pid, row->call_id, tid, ts};
        pending_arrows(t, row->pid, row->call_id, tid, ts);
    }
    /* A flow arrow from the call that launched GPU work to each piece of it. */
    if (row->call_id != 0 && (gpu || launch_has(t, row->pid, row->call_id))) {
        trace_printf(t, "{\"ph\":\"%s\",\"name\":\"launch\",\"cat\":\"gpu_launch\",\"id\":\"%" PRId64 ".%" PRIu64
                        "\",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 "%s", gpu ? "f" : "s", row->pid, row->call_id,
                     row->pid, tid, gpu ? ",\"bp\":\"e\"" : "");
        trace_time(t, "ts", ts);
        TRACE_LIT(t, "},\n");
    }
}

/* ---- the sink --------------------------------------------------------------------------------- */

static int trace_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    trace_t *t = (trace_t *)sink;
    if (row->kind == TW_FILE_GPU && row->call_id != 0)
        launch_add(t, row->pid, row->call_id);
    if (t->limit == 0 || t->events < t->limit) {
        t->events++;
        trace_event(t, row);
    } else {
        t->skipped++;
    }
    return 0;
}

/* Writes the trace's tail and closes its file: 0, or TW_EIO after a message (a write failed: disk
 * full?). */
static int trace_write(report_sink_t *sink, const report_pass_t *pass, FILE *err)
{
    trace_t *t = (trace_t *)sink;
    /* The last event is an empty metadata record so that every event above can end with a comma. */
    TRACE_LIT(t, "{\"ph\":\"M\",\"name\":\"trace_end\",\"pid\":0,\"tid\":0,\"args\":{}}\n]}\n");
    trace_flush(t);
    int closed = t->gz ? gzclose(t->gz) == Z_OK : fclose(t->file) == 0;
    t->gz = NULL;
    t->file = NULL;
    if (t->failed || !closed) {
        fprintf(err, "tw-report: writing the trace %s failed (disk full?)\n", t->path);
        return TW_EIO;
    }
    return 0;
}

static void trace_free(report_sink_t *sink)
{
    trace_t *t = (trace_t *)sink;
    if (t->gz != NULL) /* not written: the report failed before */
        gzclose(t->gz);
    if (t->file != NULL)
        fclose(t->file);
    free(t->tracks);
    free(t->launches);
    free(t->recent);
    free(t->pending);
    free(t);
}

static const report_sink_ops_t trace_ops = {
    .name = "chrome_trace",
    .row = trace_row,
    .write = trace_write,
    .free = trace_free,
};

int report_chrome_trace_open(const options_t *o, const inputs_t *in, int64_t origin_ns, report_sink_t **sink,
                             FILE *err)
{
    const char *path = o->trace;
    trace_t *trace = calloc(1, sizeof *trace);
    if (trace == NULL) {
        fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
        return TW_ENOMEM;
    }
    trace->sink = (report_sink_t){&trace_ops, SINK_ROWS_KEPT};
    trace->in = in;
    trace->path = path;
    trace->limit = o->limit;
    trace->origin_ns = origin_ns;
    if (report_has_suffix(path, ".gz"))
        trace->gz = gzopen(path, "wb6");
    else
        trace->file = fopen(path, "wb");
    if (trace->gz == NULL && trace->file == NULL) {
        int rc = errno ? -errno : TW_EIO;
        fprintf(err, "tw-report: cannot write the trace %s: %s\n", path, strerror(errno));
        free(trace);
        return rc;
    }
    int64_t clock_error = -1; /* the largest of the processes' clock errors: how well the ranks line up */
    for (size_t i = 0; i < in->nprocs; i++)
        if (in->procs[i].has_clock && in->procs[i].clock_error_ns > clock_error)
            clock_error = in->procs[i].clock_error_ns;
    trace_printf(trace, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"origin_ns\":%" PRId64
                        ",\"generator\":\"tw-report %s\"", origin_ns, tw_version());
    if (clock_error >= 0)
        trace_printf(trace, ",\"clocks_aligned_to\":\"rank 0\",\"clock_error_ns\":%" PRId64, clock_error);
    trace_printf(trace, "},\n\"traceEvents\":[\n");
    *sink = &trace->sink;
    return 0;
}

void report_chrome_trace_counts(const report_sink_t *sink, uint64_t *events, uint64_t *skipped)
{
    const trace_t *t = (const trace_t *)sink;
    *events = t->events;
    *skipped = t->skipped;
}
