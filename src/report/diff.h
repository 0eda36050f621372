/* SPDX-License-Identifier: MIT */
/*
 * tw-report --diff BASE NEW (diff.c reads and compares the runs, diff_output.c prints the diff,
 * diff_html.c makes its page): a mode of its own, beside the sinks' pass.
 */
#ifndef TW_REPORT_DIFF_H
#define TW_REPORT_DIFF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"

/* A two-sided Mann-Whitney U test (normal approximation, tie and continuity corrections): u is x's U
 * (the pairs (x_i, y_j) with x_i > y_j, ties counting one half), z its signed normal score, p the
 * two-sided p value (NAN when a sample is empty). 0, or TW_ENOMEM. */
typedef struct mann_whitney {
    double u, z, p;
} mann_whitney_t;
int report_mann_whitney(const double *x, size_t nx, const double *y, size_t ny, mann_whitney_t *out);

typedef enum { DIFF_SAME, DIFF_REGRESSION, DIFF_IMPROVEMENT, DIFF_APPEARED, DIFF_VANISHED } diff_verdict_t;

/* One API in one run: per step (means over the steps compared) and per call. */
typedef struct diff_side {
    double calls, total_ns, self_ns;
    double median_self_ns; /* the median step's self time */
    uint64_t p50_ns, p99_ns;
} diff_side_t;

typedef struct diff_row {
    char *api;
    diff_verdict_t verdict;
    diff_side_t base, new_;
    double change_ns;         /* a step's self time, NEW - BASE: medians (means where both medians are 0) */
    double change_pct;        /* change_ns in percent of BASE's step time */
    double self_change_pct, total_change_pct; /* of the means, in percent of BASE's; NAN when BASE's is 0 */
    double u, p_value;        /* Mann-Whitney of NEW's per-step self times against BASE's */
    int fails;                /* triggers --fail-above */
} diff_row_t;

typedef struct diff_run {
    const char *const *inputs;
    size_t ninputs, files, steps;
    uint64_t records;
    int64_t first_step, last_step, seen_last_step; /* the steps compared; the last step with records */
    double step_ns, mean_step_ns; /* median and mean over steps of the self time of all calls */
} diff_run_t;

typedef struct diff {
    diff_run_t base, new_;
    diff_row_t *rows; /* sorted: beyond noise first, then the rest; each the largest change first */
    size_t count;
    double step_change_pct, step_p_value; /* the step time's median change, and its test */
    double alpha, min_change_pct, fail_above_pct; /* fail_above_pct < 0: no --fail-above */
    int failed;
} diff_t;

/* Reads both runs and compares them: 0, or a negative errno after a message on err (TW_ENOMEM, a
 * record file that could not be read, -ENODATA: a run with no call records or no step to compare). */
int report_diff_run(const options_t *o, diff_t *d, FILE *err);
void report_diff_write_json(FILE *out, const diff_t *d); /* the whole diff, as --format json prints it */
/* --html with --diff: 0, or after a message on err the -errno of the failed open or TW_EIO. */
int report_diff_write_html(const diff_t *d, const char *path, FILE *err);
const char *report_diff_verdict_name(diff_verdict_t v);
void report_diff_free(diff_t *d);

/*
 * tw-report --diff: reads, compares, prints the diff to out (--html: its page too) and what
 * --fail-above finds to err; *failed is 1 when --fail-above is triggered. Returns 0, or a negative
 * errno after a message on err.
 */
int report_diff_main(const options_t *o, FILE *out, FILE *err, int *failed);

#endif
