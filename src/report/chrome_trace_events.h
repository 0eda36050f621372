/* SPDX-License-Identifier: MIT */
/*
 * --trace's calls as events (chrome_trace_events.c): a call row's fields, formatted when it comes, and
 * the event written at its final times, with its arrows (the CUDA calls' to their GPU work, a
 * backward node's from its forward call).
 */
#ifndef TW_REPORT_CHROME_TRACE_EVENTS_H
#define TW_REPORT_CHROME_TRACE_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/reader.h"

#include "chrome_trace_types.h"

/* Notes call (pid, call_id)'s time on the trace, when the pass's index still holds it (the arrows
 * to its backward nodes start there). */
void trace_note_time(trace_t *t, int64_t pid, uint64_t call_id, int64_t ts);

/* Formats a call row's event fields (after its times) at the end of th's text; 0 or TW_ENOMEM. */
int trace_format_call(trace_t *t, trace_thread_t *th, const tw_row_t *row, size_t *text, uint32_t *len);

/* Writes a node of th at its final times, with its arrows, and notes its step. */
void trace_write_node(trace_t *t, trace_thread_t *th, const trace_node_t *n);

#endif
