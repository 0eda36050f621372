/* SPDX-License-Identifier: MIT */
/* tw-report --findings' outputs (findings_output.c): text, JSON and Markdown, and the HTML page's section,
 * from a list of findings and the step's anatomy; it knows neither the sink nor the rules. */
#ifndef TW_REPORT_FINDINGS_OUTPUT_H
#define TW_REPORT_FINDINGS_OUTPUT_H

#include <stdio.h>

#include "cli.h"
#include "findings_types.h"

/* The parts' names, as the outputs and the rules' messages say them (PART_*). */
extern const char *const report_part_names[PARTS];

/* The page's findings section (--html): the step's bar, then the findings (findings_output.c). */
void report_findings_write_html(const finding_t *findings, size_t count, const step_anatomy_t *anatomy, FILE *out);

/* Prints the anatomy and findings in o->format (table: text) (findings_output.c). */
void report_findings_print(const options_t *o, const finding_t *findings, size_t count,
                           const step_anatomy_t *anatomy, double run_ms, uint64_t steps, FILE *out);

#endif
