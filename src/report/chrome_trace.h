/* SPDX-License-Identifier: MIT */
/*
 * --trace (chrome_trace.c): the Chrome trace event file (Perfetto, chrome://tracing), written as the
 * rows stream by: a sink whose write finishes the file.
 */
#ifndef TW_REPORT_CHROME_TRACE_H
#define TW_REPORT_CHROME_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "inputs.h"
#include "sink.h"

/*
 * Opens o->trace (gzip when it ends in .gz) and writes the trace's head into *sink: at most o->limit
 * calls (0: all); in names the processes by rank. Returns 0, or after a message on err: the -errno
 * of the failed open, or TW_ENOMEM.
 */
int report_chrome_trace_open(const options_t *o, const inputs_t *in, int64_t origin_ns, report_sink_t **sink,
                             FILE *err);

/* The calls written, and those beyond --limit. */
void report_chrome_trace_counts(const report_sink_t *sink, uint64_t *events, uint64_t *skipped);

#endif
