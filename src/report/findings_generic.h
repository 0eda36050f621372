/* SPDX-License-Identifier: MIT */
/* The rules over the step's per-line series (findings_generic.c), entries of findings_catalogue.c's
 * table. */
#ifndef TW_REPORT_FINDINGS_GENERIC_H
#define TW_REPORT_FINDINGS_GENERIC_H

#include "findings_state.h"

void rule_host_sync(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_python_outside_torch(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_growing_line(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_built_every_step(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_calls_every_step(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_setting(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_dtype(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_eval_with_grad(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_evaluation_every_step(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_costly_line(findings_t *f, const rule_t *r, const settle_context_t *c);

#endif
