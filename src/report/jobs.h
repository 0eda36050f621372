/* SPDX-License-Identifier: MIT */
/*
 * tw-report -j N (jobs.c): the pass over the record files on N threads, each with sinks of its own,
 * merged into the driver's at the end, so that the output is the one thread's.
 */
#ifndef TW_REPORT_JOBS_H
#define TW_REPORT_JOBS_H

#include <stdio.h>

#include "torchwrapper/reader.h"

#include "inputs.h"
#include "pass.h"
#include "site_texts.h"

/* Environment variable, a test knob: the size of the byte ranges large files are cut into (default
 * REPORT_RANGE_BYTES), so that tests cut small files into many ranges. */
#define REPORT_RANGE_ENV "TW_REPORT_RANGE_BYTES"
#define REPORT_RANGE_BYTES (32ull << 20)

/*
 * Reads the inputs' record files on p->out.o->jobs threads into p's sinks and counters, and stats.
 * Returns 0 when they were read; 1 when the caller is to read them on its own thread, p, its sinks
 * and stats untouched: -j 1, a sink without merge, a single part to read, or anything that went
 * wrong on a thread (a read error, which the one-thread pass then reports as it always did; no
 * memory; a CSV range that began inside a quoted line end).
 */
int report_read_jobs(pass_t *p, const inputs_t *in, const report_sites_t *sites, tw_read_stats_t *stats,
                     FILE *err);

#endif
