/* SPDX-License-Identifier: MIT */
/*
 * tw-report --ranks (ranks.c gathers, ranks_analysis.c analyses, ranks_output.c prints; the result's
 * types are ranks_result.h's): per step and rank the
 * step's time, per step the skew and the slowest rank, the ranks by how often and how much they were
 * slowest, and for a rank slower than the others beyond noise the APIs that explain its extra time.
 * A sink (sink.h) that merges, so it is read on -j threads.
 */
#ifndef TW_REPORT_RANKS_H
#define TW_REPORT_RANKS_H

#include "cli.h"
#include "inputs.h"
#include "ranks_result.h"
#include "sink.h"

/* A new --ranks sink into *sink (reads in->procs for the ranks and clocks). 0 or TW_ENOMEM. */
int report_ranks_new(const options_t *o, const inputs_t *in, report_sink_t **sink);

/* The analysis, made once after the sink settled (NULL when out of memory). */
const ranks_result_t *report_ranks_result(report_sink_t *sink);

#endif
