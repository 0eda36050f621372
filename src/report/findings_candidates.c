/* SPDX-License-Identifier: MIT */
/*
 * What the rules over the per-line series share (findings_candidates.h): the entries of the steps'
 * thread a rule weighs, heaviest first, the share of an entry's calls after the first step, the mean
 * step and a line's time a step.
 */
#include "config.h"
#include "findings_candidates.h"

#include <stdlib.h>
#include <string.h>

int findings_on_thread(const series_entry_t *e, const thread_state_t *t)
{
    return e != NULL && t != NULL && e->pid == t->pid && e->tid == t->tid;
}

/* A share of the time of e's calls after the first step (what settle counts), of all of theirs. */
double findings_after_first(const findings_t *f, const series_entry_t *e)
{
    if (!f->skip_first || e->calls == 0)
        return 1;
    return (double)(e->calls - e->first_calls) / (double)e->calls;
}

static int by_weight_desc(const void *a, const void *b)
{
    const candidate_t *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight < y->weight ? 1 : -1;
    return strcmp(x->e->api, y->e->api);
}

/* The candidates of f's series on the steps' thread that keep() picks, heaviest first; NULL if none. */
candidate_t *findings_candidates(findings_t *f, const settle_context_t *c, const rule_t *r, size_t *n,
                               candidate_weight_t *keep)
{
    candidate_t *list = NULL;
    size_t cap = 0;
    *n = 0;
    for (size_t i = 0; i < f->series.capacity; i++) {
        const series_entry_t *e = f->series.slots[i];
        if (!findings_on_thread(e, c->thread))
            continue;
        double w = keep(f, r, c, e);
        if (w <= 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            candidate_t *more = realloc(list, cap * sizeof *more);
            if (more == NULL) {
                f->oom = 1;
                break;
            }
            list = more;
        }
        list[(*n)++] = (candidate_t){e, w};
    }
    if (*n == 0) {
        free(list);
        return NULL;
    }
    qsort(list, *n, sizeof *list, by_weight_desc);
    return list;
}

/* The mean step of the run (after the first), ns. */
double findings_mean_step(const settle_context_t *c)
{
    return (double)c->run_ns / c->per_step;
}

/* The self time a step of every call at e's line on its thread (autograd nodes charged there included):
 * what the line costs, whatever calls it makes. */
double findings_line_ns(const findings_t *f, const settle_context_t *c, const series_entry_t *of)
{
    double ns = 0;
    for (size_t i = 0; i < f->series.capacity; i++) {
        const series_entry_t *e = f->series.slots[i];
        if (findings_on_thread(e, c->thread) && e->site == of->site && e->site != 0)
            ns += (double)(e->self_ns - (f->skip_first ? e->first_self : 0));
    }
    return ns / c->per_step;
}
