/* SPDX-License-Identifier: MIT */
/*
 * tw-report's options (cli.c parses and checks them): what every part of the report reads, and so
 * the one header the others share besides util.h.
 */
#ifndef TW_REPORT_CLI_H
#define TW_REPORT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MAX_FILTERS 32
#define REPORT_TREE_ALL INT64_MAX /* --tree all: every call of the thread, not one step's */

/* BY_MODULE: the table's --by module (module forwards and the nodes charged to them; with --folded,
 * --flamegraph or --html, --by module sets frames_by_module instead) */
typedef enum { BY_API, BY_THREAD, BY_PID, BY_PARENT, BY_STEP, BY_SITE, BY_SHAPE, BY_MODULE } group_by_t;
typedef enum { OUT_TABLE, OUT_CSV, OUT_JSON, OUT_MARKDOWN } out_format_t;
typedef enum { SORT_TOTAL, SORT_SELF, SORT_GPU, SORT_CALLS, SORT_MEAN, SORT_MIN, SORT_MAX, SORT_P50, SORT_P95,
               SORT_P99, SORT_NAME, SORT_FLOPS, SORT_MEM } sort_key_t;

typedef struct options {
    int help; /* --help was printed: nothing else to do */
    int rules; /* --rules: the findings' catalogue, nothing else */
    sort_key_t sort;
    size_t top;
    group_by_t by;
    out_format_t format;
    const char *apis[MAX_FILTERS];
    size_t napis;
    int64_t pids[MAX_FILTERS];
    size_t npids;
    uint64_t tids[MAX_FILTERS];
    size_t ntids;
    int has_window;
    double window_from, window_to; /* seconds after the run's start; to < 0: open */
    int has_steps;
    int64_t steps_from, steps_to;  /* --steps: calls of steps from..to (inclusive); to < 0: open */
    const char *trace;
    uint64_t limit;
    int64_t tree_step; /* -1: no tree; REPORT_TREE_ALL: --tree all */
    const char *boundary;
    int boundary_given; /* --boundary: steps counted by its calls even where rows carry their step */
    uint64_t max_depth; /* 0: all levels */
    const char **inputs; /* the positional arguments: options may come before, between or after them */
    size_t ninputs;
    /* --folded, --flamegraph, --html (flame.c, html.c) */
    const char *folded, *flamegraph, *html;
    int frames_by_module; /* --by module: module paths as frames */
    int backward_timeline; /* --backward timeline: autograd nodes where they ran, not under their forward call */
    /* --diff BASE (repeatable; the positional inputs are NEW), --fail-above, --alpha, --min-change (diff.c) */
    const char **diff_base;
    size_t ndiff_base;
    double diff_fail_above, diff_alpha, diff_min_change; /* diff_alpha 0: the default */
    int diff_fail_above_given, diff_min_change_given;
    int ranks; /* --ranks: per step and rank, the stragglers and why (ranks.c) */
    int findings; /* --findings: what is wrong, where, what it costs, the fix (findings.c) */
    /* -j N: threads reading the files (jobs.c); 1: one pass on the calling thread, as before -j */
    unsigned jobs;
} options_t;

#define REPORT_JOBS_MAX 1024

/*
 * Fills o from argv (help text to out, messages to err). Returns 0 (o->help set when --help was
 * printed), -EINVAL after a usage error's message (exit status 2), or TW_ENOMEM after its message.
 * o->inputs and o->diff_base are the caller's to free, whatever the result.
 */
int report_parse_options(int argc, char *const argv[], options_t *o, FILE *out, FILE *err);

#endif
