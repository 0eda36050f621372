/* SPDX-License-Identifier: MIT */
/* The rules on the program's Python loops (findings_loops.c), entries of findings_catalogue.c's table. */
#ifndef TW_REPORT_FINDINGS_LOOPS_H
#define TW_REPORT_FINDINGS_LOOPS_H

#include "findings_state.h"

void rule_repeated_module(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_per_sample_loop(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_per_tensor_loop(findings_t *f, const rule_t *r, const settle_context_t *c);

#endif
