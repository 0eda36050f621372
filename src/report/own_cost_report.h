/* SPDX-License-Identifier: MIT */
/*
 * The profiler's own cost in the reports: the line every report shows, and the share of it a step
 * carries (--by step), from what the manifests say (report_own_t, which inputs.c fills).
 */
#ifndef TW_REPORT_OWN_COST_REPORT_H
#define TW_REPORT_OWN_COST_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/reader.h"

/*
 * The profiler's own cost as the manifests say it ("own_cost", its "writer"; see python/core/call/
 * own_cost.h): ns summed over the processes, rates from the first that measured them.
 */
typedef struct report_own {
    size_t manifests;     /* that said it; 0: unknown (older files, records in memory) */
    uint64_t calls;       /* recorded calls the samples stand for */
    uint64_t calls_ns;    /* the wrappers' own time */
    uint64_t hooks_ns;    /* the model watch's hooks */
    uint64_t nodes;       /* autograd nodes recorded */
    uint64_t nodes_ns;    /* the node hooks' own time */
    uint64_t help_ns;     /* recording threads writing for a late writer thread */
    uint64_t close_ns;    /* the last writing, at stop */
    uint64_t writer_cpu_ns; /* the writer thread's CPU time (a thread of its own, lowest priority) */
    uint64_t run_ns;      /* the recording time, start to stop */
    double call_ns_detail, call_ns_plain, node_ns; /* per call in steps with and without detail; per node */
    /* the steps with detail (the manifest's "detail"): the first detail_first, then one in
     * detail_every; detail_every 0: every step */
    int64_t detail_first, detail_every;
} report_own_t;

/* Adds a manifest's "own_cost" and "writer" (its parsed JSON) to own: a manifest without "own_cost"
 * adds nothing. */
struct cJSON;
void report_own_add(report_own_t *own, const struct cJSON *root);

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
