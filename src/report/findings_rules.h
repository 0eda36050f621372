/* SPDX-License-Identifier: MIT */
/* The first catalogue's rules (findings_rules.c), entries of findings_catalogue.c's table. */
#ifndef TW_REPORT_FINDINGS_RULES_H
#define TW_REPORT_FINDINGS_RULES_H

#include "findings_state.h"

void rule_input_bound(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_loader_workers_restarted(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_many_small_ops(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_optimizer_single_tensor(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_zero_grad_fills(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_conv_bias_before_batchnorm(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_recompilation(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_step_time_drift(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_memory_growth(findings_t *f, const rule_t *r, const settle_context_t *c);

#endif
