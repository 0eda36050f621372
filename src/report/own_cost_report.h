/* SPDX-License-Identifier: MIT */
/*
 * The profiler's own cost in the reports: the line every report shows, and the share of it a step
 * carries (--by step), from what the manifests say (inputs.h's report_own_t).
 */
#ifndef TW_REPORT_OWN_COST_REPORT_H
#define TW_REPORT_OWN_COST_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "inputs.h"
#include "torchwrapper/reader.h"

/* The time the program's own threads spent in the profiler: its calls' wrappers, the model watch's
 * hooks, the autograd node hooks, writing for a late writer thread, and the last writing at stop. */
uint64_t report_own_program_ns(const report_own_t *o);

/* "torchwrapper's own cost: 1.2% of the recording (...)" into buf; "" when no manifest says it. */
void report_own_text(const report_own_t *o, char *buf, size_t size);

/* A step's part of the wrappers' and node hooks' own time: its recorded calls and nodes at the run's
 * measured rates (detail: the step had argument summaries, nodes and FLOPs). */
uint64_t report_own_step_ns(const report_own_t *o, int detail, uint64_t calls, uint64_t nodes);

/* Whether step had the detail (argument summaries, autograd nodes, FLOPs), as the recorder decides it
 * (tw_detail_step) with the manifest's "detail" figures: the first `first` steps, then every multiple of
 * `every`; every <= 0 (not sampled): every step. A step < 0 (none) counts as one. */
int report_detail_step(int64_t first, int64_t every, int64_t step);

/* report_detail_step with the run's figures (o's). */
int report_own_detail_step(const report_own_t *o, int64_t step);

/* Whether a call record is an autograd node's (aten "backward"): linked to its forward call, or
 * one of torch's own nodes (torch::autograd::AccumulateGrad, ...). */
int report_row_is_node(const tw_row_t *row);

#endif
