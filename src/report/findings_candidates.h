/* SPDX-License-Identifier: MIT */
/* What the rules over the step's per-line series share (findings_candidates.c): findings_generic.c's and
 * findings_loops.c's. */
#ifndef TW_REPORT_FINDINGS_CANDIDATES_H
#define TW_REPORT_FINDINGS_CANDIDATES_H

#include "findings_state.h"

/* Whether e is a call of thread t (the steps' thread). */
int findings_on_thread(const series_entry_t *e, const thread_state_t *t);

/* A share of the time of e's calls after the first step (what settle counts), of all of theirs. */
double findings_after_first(const findings_t *f, const series_entry_t *e);

/* Candidates: an entry and its weight, the heaviest first. */
typedef struct candidate {
    const series_entry_t *e;
    double weight;
} candidate_t;

/* What a rule weighs an entry at: 0 leaves it out. */
typedef double candidate_weight_t(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e);

/* The candidates of f's series on the steps' thread that keep() picks, heaviest first; NULL if none
 * (f->oom set when out of memory). Freed by the caller. */
candidate_t *findings_candidates(findings_t *f, const settle_context_t *c, const rule_t *r, size_t *n,
                                 candidate_weight_t *keep);

/* The mean step of the run (after the first), ns. */
double findings_mean_step(const settle_context_t *c);

/* The self time a step of every call at of's line on its thread (autograd nodes charged there included):
 * what the line costs, whatever calls it makes. */
double findings_line_ns(const findings_t *f, const settle_context_t *c, const series_entry_t *of);

#endif
