/* SPDX-License-Identifier: MIT */
/* What every findings rule uses at settle (findings_tally.c): tallies ranked, findings made from a
 * catalogue entry, their lines and evidence. */
#ifndef TW_REPORT_FINDINGS_TALLY_H
#define TW_REPORT_FINDINGS_TALLY_H

#include "findings_state.h"

/* Takes the first step's counts out of t's when settle leaves the first step out. */
void findings_tally_settle(findings_t *f, tally_t *t);
/* The groups of a tally, most time first (NULL when empty or out of memory). */
group_t **findings_ranked_groups(findings_t *f, tally_t *t, size_t *n, uint64_t *total_ns, uint64_t *count);
const char *findings_severity(double share, double high, double medium);
/* A new finding of rule (its kind, severity from its thresholds and share, its fix); NULL when out of
 * memory. */
finding_t *findings_add(findings_t *f, const rule_t *rule, double share);
/* where: the first part (before a tab) of the groups' keys, most costly first, each once. */
void findings_add_where(finding_t *x, group_t **list, size_t n);
/* where: text, unless already there. */
void findings_add_where_text(finding_t *x, const char *text);
void findings_evidence(finding_t *x, const char *key, double value);
/* f's findings, most severe first, then by share. */
void findings_sort(findings_t *f);
double findings_ms(uint64_t ns);
/* The median of v[0..n) (n > 0), sorting v. */
double findings_median_u64(uint64_t *v, size_t n);
/* The text of e's line ("train.py:42 main"), or "(no site)". */
const char *findings_line_text(const findings_t *f, const series_entry_t *e);
/* Whether api is one of the '|'-separated names of list (a trailing '*': a prefix). */
int findings_api_in(const char *api, size_t len, const char *list);

#endif
