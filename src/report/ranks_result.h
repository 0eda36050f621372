/* SPDX-License-Identifier: MIT */
/*
 * tw-report --ranks: the result of the analysis (ranks_analysis.c makes it, ranks_output.c prints it,
 * the findings and --html read it through ranks.h): types only.
 */
#ifndef TW_REPORT_RANKS_RESULT_H
#define TW_REPORT_RANKS_RESULT_H

#include <stddef.h>
#include <stdint.h>

/* An API that explains a straggler's extra time: its self time per step on that rank and the median
 * of the other ranks', each the median over the steps compared. */
typedef struct ranks_api {
    const char *api;
    double rank_ns, others_ns, change_ns, change_pct, p_value;
} ranks_api_t;

typedef struct ranks_rank {
    int64_t rank; /* -1: the manifests name no ranks (each process is one, named by its pid) */
    int64_t pid;
    size_t slowest_steps;     /* the steps compared in which it was the slowest */
    double slowest_extra_ns;  /* summed over those steps: its busy time minus the median rank's */
    double step_ns, wait_ns, busy_ns; /* medians over the steps compared */
    double change_ns, change_pct, p_value; /* busy time against the median of the others' */
    int straggler;
    /* Not a straggler, but slowest in more steps than chance makes likely (sign_p < 0.05) and slower
     * by at least --min-change: too few steps to tell yet. sign_p: the one-sided sign test of
     * slowest_steps (each rank slowest in a step with probability 1 / ranks), times the number of
     * ranks; more_steps: about how many more steps like these the signed-rank test needs to pass
     * --alpha (0: more than ranks_analysis.c looks ahead). */
    int likely;
    double sign_p;
    size_t more_steps;
    int has_clock;
    int64_t clock_offset_ns, clock_error_ns;
    ranks_api_t *apis; /* a straggler's (or a likely one's), the largest extra time first */
    size_t napis;
} ranks_rank_t;

typedef struct ranks_step {
    int64_t step;
    double median_busy_ns, skew_ns;
    size_t slowest; /* index into the ranks by rank number (ranks_result_t.by_rank); SIZE_MAX: none
                     * (the busiest ranks tie with the median) */
} ranks_step_t;

typedef struct ranks_result {
    ranks_rank_t *by_rank; /* in rank order */
    size_t nranks;
    size_t *order;         /* by_rank indices: most often slowest first, then by how much */
    ranks_step_t *steps;
    size_t nsteps;
    int64_t first_step, last_step; /* the steps compared */
    int steps_cut;                 /* the first and last steps were left out (no --steps) */
    /* per step x rank (step-major): the step's time, the time in collectives, the rest; the span of
     * the rank's calls in the step on rank 0's clock (0: none) */
    uint64_t *step_ns, *wait_ns, *busy_ns;
    int64_t *start_ns, *end_ns;
    double step_time_ns;   /* the median rank's step time, median over steps: what percentages are of */
    double alpha, min_change_pct;
    double likely_alpha;     /* the level of a likely straggler's sign test and of its APIs' tests */
    size_t decided_steps;    /* the steps that have a slowest rank */
    int64_t clock_error_ns; /* the largest of the ranks' clock errors; -1: no rank's clock measured */
    size_t clocks;          /* ranks with a measured clock offset */
    size_t other_processes; /* processes left out: no rank where others have one, or a rank's second */
    uint64_t no_step_rows;  /* rows of files without the step column */
} ranks_result_t;

#endif
