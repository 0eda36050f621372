/* SPDX-License-Identifier: MIT */
/*
 * --trace's output files (chrome_trace_out.c): opened on demand (at most a few at once, appended to
 * again when closed), buffered, gzip or plain; what the other parts write to them, events' text,
 * times and the flow arrows between events.
 */
#ifndef TW_REPORT_CHROME_TRACE_OUT_H
#define TW_REPORT_CHROME_TRACE_OUT_H

#include <stddef.h>
#include <stdint.h>

#include "chrome_trace_types.h"

/* Opens o (again: appended to, a gzip file as one more member), closing the least recently used
 * output when too many are open. 0, or o->failed. */
int trace_out_open(trace_t *t, trace_out_t *o);
void trace_out_close(trace_t *t, trace_out_t *o);
/* The head of a file: distributedInfo first, so that HTA finds its rank in the first line. */
void trace_out_head(trace_t *t, trace_out_t *o);

/* Writes to output o (opened, again if it was closed). */
void trace_out_put(trace_t *t, trace_out_t *o, const char *s, size_t len);
void trace_out_printf(trace_t *t, trace_out_t *o, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* s as a JSON string, quotes included */
void trace_out_string(trace_t *t, trace_out_t *o, const char *s, size_t len);
/* 1 when track (pid, tid) of o was named before; else noted (the caller names it) and 0 */
int trace_track_seen(trace_out_t *o, int64_t pid, uint64_t tid);

/* Writes to process proc's output. */
void trace_put(trace_t *t, size_t proc, const char *s, size_t len);
void trace_printf(trace_t *t, size_t proc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Microseconds with three decimals at p (exact to the nanosecond as a double); the end. */
char *trace_format_time(char *p, int64_t ns);
/* ,"key":us.nnn (microseconds, exact to the nanosecond) */
void trace_time(trace_t *t, size_t proc, const char *key, int64_t ns);

/* A flow event (phase 's' or 'f', id a JSON value), and an arrow of two with a new id. */
void trace_flow(trace_t *t, size_t proc, char phase, const char *cat, const char *id, int64_t pid, uint64_t tid,
                int64_t ts);
void trace_arrow(trace_t *t, size_t proc, const char *cat, int64_t from_pid, uint64_t from_tid, int64_t from_ts,
                 int64_t to_pid, uint64_t to_tid, int64_t to_ts);

/* memcpy of a string literal at p; the end */
#define LIT(p, text) (memcpy((p), text, sizeof text - 1), (p) + sizeof text - 1)

#endif
