/* SPDX-License-Identifier: MIT */
/* The findings' catalogue (findings_catalogue.c): the table of rules, settle, the stragglers. */
#ifndef TW_REPORT_FINDINGS_CATALOGUE_H
#define TW_REPORT_FINDINGS_CATALOGUE_H

#include "findings_state.h"

/* The catalogue: every rule, in the order settle evaluates them. */
const rule_t *findings_rules(size_t *count);
/* The catalogue's rule of this kind. */
const rule_t *findings_rule(const char *kind);

/* Settle: the anatomy, then every rule of the catalogue, most severe first. */
int findings_settle(report_sink_t *sink);

/* The straggler finding from the ranks' analysis, once every sink settled. */
void findings_add_stragglers(findings_t *f);

#endif
