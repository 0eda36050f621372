/* SPDX-License-Identifier: MIT */
/*
 * tw-report --findings (findings.c): a typical step's anatomy, then what is wrong in a run, where (the
 * program's lines), what it costs and how to fix it, from the call records in the one pass every report
 * makes; the rules are the catalogue's (findings_catalogue.c, docs/findings.md).
 *
 * A sink of the pass that keeps per thread a few counters per call depth: records are written when a
 * call returns, so the calls inside a call are the rows of its thread read just before it, deeper
 * than it; each row closes the subtree above it (its counts) in O(1), with no table of pending
 * calls. Memory is flat: per thread, per step and per (rule, line) or (line, API, module), never per
 * call.
 */
#ifndef TW_REPORT_FINDINGS_H
#define TW_REPORT_FINDINGS_H

#include "cli.h"
#include "sink.h"
#include "findings_types.h"
#include "site_texts.h"

int report_findings_new(const options_t *o, const report_sites_t *sites, int have_gpu_files, report_sink_t **sink);

/* The host's usable CPUs and torch's threads when profiling began, from the manifest (0: not said):
 * what the threads rules weigh torch.set_num_threads against. */
void report_findings_use_host(report_sink_t *findings, int64_t cpus, int64_t torch_threads);

/* The steps whose calls carry the detail (argument summaries, nodes, FLOPs), as the manifest says:
 * the first `first`, then one in `every` (every 0: all steps). */
void report_findings_use_detail(report_sink_t *findings, int64_t first, int64_t every);

/* The ranks' analysis (a --ranks sink, settled with the others) gives the straggler finding. */
void report_findings_use_ranks(report_sink_t *findings, report_sink_t *ranks);

/* The findings of a settled sink (most severe first), *count their number. */
const finding_t *report_findings_result(const report_sink_t *sink, size_t *count);

/* The typical step of a settled sink. */
const step_anatomy_t *report_findings_anatomy(const report_sink_t *sink);

/* The catalogue's rules, one a line: kind, severity thresholds, source (tw-report --rules). */
void report_findings_print_rules(FILE *out);

#endif
