/* SPDX-License-Identifier: MIT */
/*
 * tw-report --findings (findings.c, findings_output.c): what is wrong in a run, where (the program's
 * lines), what it costs and how to fix it, from the call records in the one pass every report makes.
 *
 * A sink of the pass that keeps per thread a few counters per call depth: records are written when a
 * call returns, so the calls inside a call are the rows of its thread read just before it, deeper
 * than it; each row closes the subtree above it (its counts) in O(1), with no table of pending
 * calls. Memory is flat: per thread, per step and per (rule, line), never per call.
 */
#ifndef TW_REPORT_FINDINGS_H
#define TW_REPORT_FINDINGS_H

#include "cli.h"
#include "sink.h"
#include "site_texts.h"

int report_findings_new(const options_t *o, const report_sites_t *sites, int have_gpu_files, report_sink_t **sink);

/* One finding, as the outputs print it. */
#define FINDING_WHERE_MAX 5
#define FINDING_EVIDENCE_MAX 8
typedef struct finding {
    const char *kind;     /* a stable identifier: input_bound, host_sync, ... */
    const char *severity; /* high, medium, low */
    double share;         /* of the run's time (the steps' thread), 0..1; <0: not a time */
    char *where[FINDING_WHERE_MAX]; /* the program's lines (or module paths), most costly first */
    size_t nwhere;
    const char *evidence_keys[FINDING_EVIDENCE_MAX];
    double evidence[FINDING_EVIDENCE_MAX];
    size_t nevidence;
    char message[512];
    char fix[512];
} finding_t;

/* The ranks' analysis (a --ranks sink, settled with the others) gives the straggler finding. */
void report_findings_use_ranks(report_sink_t *findings, report_sink_t *ranks);

/* The findings of a settled sink (most severe first), *count their number. */
const finding_t *report_findings_result(const report_sink_t *sink, size_t *count);

/* The page's findings section (--html), from a settled sink. */
void report_findings_write_html(const report_sink_t *sink, FILE *out);

/* Prints findings in o->format (table: text). */
void report_findings_print(const options_t *o, const finding_t *findings, size_t count, double run_ms,
                           uint64_t steps, FILE *out);

#endif
