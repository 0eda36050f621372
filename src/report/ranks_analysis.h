/* SPDX-License-Identifier: MIT */
/* tw-report --ranks, the analysis (ranks_analysis.c) of what the sink gathered (ranks_tables.h). */
#ifndef TW_REPORT_RANKS_ANALYSIS_H
#define TW_REPORT_RANKS_ANALYSIS_H

#include <stddef.h>

#include "ranks_result.h"
#include "ranks_tables.h"

/* The analysis of what r gathered into res (zeroed by the caller; freed with
 * report_ranks_result_free whatever the result). 0 or TW_ENOMEM. */
int report_ranks_compute(const ranks_t *r, ranks_result_t *res);
void report_ranks_result_free(ranks_result_t *res);

/* The two-sided p value of the Wilcoxon signed-rank test of the pairs (x[k], y[k]), k < n: exact
 * with up to 25 pairs that differ, the normal approximation beyond (ranks_analysis.c says why).
 * NAN and *oom set when out of memory. */
double report_signed_rank_p(const double *x, const double *y, size_t n, int *oom);

/* P(X >= k) for X binomial(n, q), 0 < q < 1. */
double report_binomial_tail(size_t k, size_t n, double q);

#endif
