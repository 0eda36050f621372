/* SPDX-License-Identifier: MIT */
/*
 * tw-report --trace: the output files and what is written to them (chrome_trace_out.h). See
 * chrome_trace.c for the files' layout.
 */
#include "config.h"
#include "chrome_trace_out.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "torchwrapper/common.h"
#include "torchwrapper/escape.h"

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

void trace_out_close(trace_t *t, trace_out_t *o)
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

int trace_out_open(trace_t *t, trace_out_t *o)
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
            trace_out_close(t, oldest);
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
    if (trace_out_open(t, o) != 0)
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
char *trace_format_time(char *p, int64_t ns)
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
    p = trace_format_time(p, ns);
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

void trace_out_head(trace_t *t, trace_out_t *o)
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
    p = trace_format_time(p, ts);
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
