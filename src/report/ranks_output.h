/* SPDX-License-Identifier: MIT */
/*
 * tw-report --ranks, the output (ranks_output.c): tables as text or markdown, CSV, JSON, and --html's
 * section.
 */
#ifndef TW_REPORT_RANKS_OUTPUT_H
#define TW_REPORT_RANKS_OUTPUT_H

#include <stdio.h>

#include "cli.h"
#include "ranks_result.h"

/* The report as --format asks, and --html's section. 0, or TW_ENOMEM / TW_EIO after
 * a message on err. */
int report_ranks_print(const ranks_result_t *r, const options_t *o, FILE *out, FILE *err);
void report_ranks_write_html(const ranks_result_t *r, FILE *out);

#endif
