/* SPDX-License-Identifier: MIT */
/* The table (table.c): the aggregate's groups sorted by --sort, as text, CSV, JSON or Markdown. */
#ifndef TW_REPORT_TABLE_H
#define TW_REPORT_TABLE_H

#include <stdio.h>

#include "cli.h"
#include "groups.h"
#include "sink.h"

/* A group's achieved FLOP/s (config flops), as the table shows it (table.c). */
double report_flop_rate(const group_t *g, group_by_t by);

/*
 * Whether a group's FLOPs are unknown rather than 0 (table.c): a row of an API that surely computes
 * below torch's Python surface but has no FLOP formula (tensordot, matrix_power, cov, the linalg
 * factorizations and solvers, the FFTs, ...) and counted none. Its FLOP columns read n/a (table,
 * Markdown, HTML), empty (CSV) or null (JSON), never 0.
 */
int report_flops_unknown(const group_t *g, group_by_t by);

/*
 * Prints the groups, the first by --sort on top, and the footer (to out under the terminal table,
 * else to err when something was skipped). trace (NULL: none) is the --trace sink, whose calls the
 * footer counts. Returns 0 (a table that did not fit in memory is left out).
 */
int report_print_table(FILE *out, FILE *err, const group_table_t *groups, const report_pass_t *pass,
                       const report_sink_t *trace);

#endif
