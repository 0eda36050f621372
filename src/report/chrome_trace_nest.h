/* SPDX-License-Identifier: MIT */
/*
 * --trace's threads (chrome_trace_nest.c): each thread's calls held until the outermost call around
 * them has come, then written parent first, nested.
 */
#ifndef TW_REPORT_CHROME_TRACE_NEST_H
#define TW_REPORT_CHROME_TRACE_NEST_H

#include <stdint.h>

#include "torchwrapper/reader.h"

#include "chrome_trace_types.h"

/* Takes a call row of thread th: held until the outermost call around it has come, then written with
 * it. 0, or TW_ENOMEM (the call is not drawn). */
int trace_nest_call(trace_t *t, trace_thread_t *th, const tw_row_t *row, int64_t ts);

/* Writes whatever th still holds (calls whose parent never came), as outermost events. */
void trace_nest_flush(trace_t *t, trace_thread_t *th);

void trace_nest_free(trace_thread_t *th);

#endif
