/* SPDX-License-Identifier: MIT */
/*
 * --trace (chrome_trace.c, chrome_trace_nest.c): the trace event files torch.profiler writes
 * (Perfetto, chrome://tracing, HTA), written as the rows stream by: a sink whose write finishes them.
 */
#ifndef TW_REPORT_CHROME_TRACE_H
#define TW_REPORT_CHROME_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "inputs.h"
#include "sink.h"
#include "index.h"
#include "site_texts.h"

/*
 * Opens --trace's output: o->trace, a file (gzip when it ends in .gz), or with a path that ends in /
 * or names a directory, that directory (made if missing) where each rank's file is written as
 * rankR.pt.trace.json.gz, as HTA's TraceAnalysis(trace_dir=...) reads them (a run without ranks:
 * rank0.pt.trace.json.gz; a process without a rank in a run with ranks, a launcher:
 * unranked/pidP.pt.trace.json.gz). At most o->limit calls (0: all); in names the processes by rank
 * and gives their clocks; sites (may be NULL) the calls' sites; index the pass's (a backward node's
 * forward call, for its thread and its arrow). Returns 0, or after a message on
 * err: the -errno of the failed open or mkdir, or TW_ENOMEM.
 */
int report_chrome_trace_open(const options_t *o, const inputs_t *in, const report_sites_t *sites,
                             report_index_t *index, int64_t origin_ns, report_sink_t **sink, FILE *err);

/* The calls written, those beyond --limit, and the files written. */
void report_chrome_trace_counts(const report_sink_t *sink, uint64_t *events, uint64_t *skipped, size_t *files);

#endif
