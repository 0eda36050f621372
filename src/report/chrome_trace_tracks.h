/* SPDX-License-Identifier: MIT */
/*
 * --trace's tracks beside the threads' calls (chrome_trace_tracks.c): GPU work and the CUDA calls that
 * launched it, and each process's steps.
 */
#ifndef TW_REPORT_CHROME_TRACE_TRACKS_H
#define TW_REPORT_CHROME_TRACE_TRACKS_H

#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/reader.h"

#include "chrome_trace_types.h"

/* Writes a GPU row of process proc at ts, and keeps its CUDA call for the call that made it. 0, or
 * TW_ENOMEM. */
int trace_gpu_event(trace_t *t, size_t proc, const tw_row_t *row, int64_t ts);

/* The first launch of call (pid, call_id), or TRACE_NONE; *arrow: an arrow from the call is drawn. */
uint32_t trace_launches_of(trace_t *t, int64_t pid, uint64_t call_id, int *arrow);

/* A call of step `step` held no call of another: [ts, end] is in that step. */
void trace_step_seen(trace_t *t, size_t proc, int64_t step, int64_t ts, int64_t end);

/* Writes ProfilerStep#N for each step of process proc, as torch.profiler's: a step lasts until the
 * next begins. */
void trace_write_steps(trace_t *t, size_t proc);

#endif
