/* SPDX-License-Identifier: MIT */
/*
 * The findings' rules on the program's Python loops (findings_loops.h), entries of the catalogue
 * (findings_catalogue.c) over the per-line series: a module called again and again in one call of its
 * caller (once per sample, or a loop the model needs), a function called once per sample of the batch,
 * and one called over tensors of changing shapes (a loop over parameters). A loop is named once, by the
 * first of these that sees it.
 */
#include "config.h"
#include "findings_loops.h"
#include "findings_candidates.h"
#include "findings_output.h"
#include "findings_tally.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a call repeated in a Python loop -------------------------------------------------------------- */

/* The program's calls of e: at least 8 in one invocation of their caller, 8 a step. */
static double repeated_weight(findings_t *f, const settle_context_t *c, const series_entry_t *e)
{
    if (e->node || e->max_run < 8 || (double)e->program_calls / (c->per_step + 1) < 8)
        return 0;
    return (double)e->program_cost * findings_after_first(f, e);
}

static double repeated_module(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    (void)r;
    return e->module_forward ? repeated_weight(f, c, e) : 0;
}

/* Most of e's calls (of those with argument summaries) are on a tensor whose leading size is 1. */
static int mostly_single(const series_entry_t *e)
{
    return e->single_calls * 2 * report_series_detail_scale(e) >= e->calls;
}

/* Whether a loop rule named e's line already (the module's loop, or the samples', say it once). */
static int line_named(findings_t *f, const series_entry_t *e)
{
    const char *line = findings_line_text(f, e);
    for (size_t k = 0; k < f->nfound; k++)
        if (strcmp(f->found[k].kind, "repeated_module") == 0 || strcmp(f->found[k].kind, "per_sample_loop") == 0)
            for (size_t w = 0; w < f->found[k].nwhere; w++)
                if (strcmp(f->found[k].where[w], line) == 0)
                    return 1;
    return 0;
}

/* A torch function or method (no module) called once per sample: in some step as many times as a batch
 * the thread's models were given, on one sample each (mostly a leading size of 1): a loss or a metric
 * computed sample by sample. (A decoding loop at batch 1 is not, unless its length happens to equal a batch
 * the models were given: the records hold no more than the two counts.) */
static double per_sample_api(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    (void)r;
    if (e->module_forward || e->dataset || e->per_sample_runs == 0 || !mostly_single(e) || line_named(f, e))
        return 0;
    return repeated_weight(f, c, e);
}

static double repeated_api(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    (void)r;
    /* a torch function or method over tensors of changing shapes: a loop over parameters, not over a
     * batch (a loop over a batch's slices has one shape: the module rule's case, or a metric's) */
    if (e->module_forward || e->dataset || e->shape_changes * 2 * report_series_detail_scale(e) < e->calls)
        return 0; /* (a Dataset's indexing is the input's: input_bound's) */
    /* a line whose module or function runs once per sample is said once (those rules come first): the
     * indexing that takes each sample is the same loop */
    if (line_named(f, e))
        return 0;
    return repeated_weight(f, c, e);
}

enum { REPEATED_MODULE, REPEATED_SAMPLES, REPEATED_TENSORS };

static void repeated(findings_t *f, const rule_t *r, const settle_context_t *c, int what)
{
    size_t n;
    int modules = what == REPEATED_MODULE;
    candidate_t *list = findings_candidates(f, c, r, &n, modules ? repeated_module
                                                : what == REPEATED_SAMPLES ? per_sample_api : repeated_api);
    if (list == NULL)
        return;
    double step = findings_mean_step(c), total = 0;
    for (size_t i = 0; i < n; i++) {
        /* the calls' own time, or their line's with the backward it causes where more */
        double calls = list[i].weight / c->per_step, line = findings_line_ns(f, c, list[i].e);
        total += line > calls ? line : calls;
    }
    { /* (the loop is the evidence, whatever it costs: severity from its share) */
        finding_t *x = findings_add(f, r, total / step);
        if (x != NULL) {
            const series_entry_t *e = list[0].e;
            for (size_t i = 0; i < n; i++)
                findings_add_where_text(x, findings_line_text(f, list[i].e));
            double per_step = (double)e->program_calls * findings_after_first(f, e) / c->per_step;
            int single = mostly_single(e);
            int samples = single || e->per_sample_runs > 0;
            /* without a sample a call (layers sharing weights, a recurrence over time steps) the loop may be the
             * model's own design: said, at low */
            if (modules && !samples)
                x->severity = "low";
            findings_evidence(x, "calls_per_step", per_step);
            findings_evidence(x, "most_in_one_call", (double)e->max_run);
            findings_evidence(x, "ms_per_step", total / 1e6);
            if (modules)
                snprintf(x->message, sizeof x->message,
                         "%s%s%s runs %.0f times a step from %s, up to %u times in one call of its caller%s: "
                         "%.2f ms a step, %.1f%% of a step.", e->api, e->module_len ? " (" : "",
                         e->module_len ? e->module : "", per_step, findings_line_text(f, e), e->max_run,
                         single ? ", one sample at a time (its input's leading dimension is 1)"
                         : samples ? ", once per sample of its caller's batch"
                                   : " (layers that share weights, or a recurrence over time steps, may need this)",
                         total / 1e6, 100 * total / step);
            else if (what == REPEATED_SAMPLES)
                snprintf(x->message, sizeof x->message,
                         "%s runs %.0f times a step from %s, once per sample of the batch the model is given (up to "
                         "%u times in a step, one sample at a time: its input's leading dimension is 1): %.2f ms a "
                         "step, %.1f%% of a step.", e->api, per_step, findings_line_text(f, e), e->max_run,
                         total / 1e6, 100 * total / step);
            else
                snprintf(x->message, sizeof x->message,
                         "%s runs %.0f times a step from %s, up to %u times in a row, on tensors of changing "
                         "shapes (a Python loop over parameters or a list): %.2f ms a step, %.1f%% of a step.",
                         e->api, per_step, findings_line_text(f, e), e->max_run, total / 1e6, 100 * total / step);
            /* (a module whose message says "(" needs its ")") */
            if (modules && e->module_len) {
                char *open = strstr(x->message, e->module);
                if (open != NULL) {
                    size_t at = (size_t)(open - x->message) + e->module_len, len = strlen(x->message);
                    if (len + 1 < sizeof x->message) {
                        memmove(x->message + at + 1, x->message + at, len - at + 1);
                        x->message[at] = ')';
                    }
                }
            }
        }
    }
    free(list);
}

void rule_repeated_module(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    repeated(f, r, c, REPEATED_MODULE);
}

void rule_per_sample_loop(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    repeated(f, r, c, REPEATED_SAMPLES);
}

void rule_per_tensor_loop(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    repeated(f, r, c, REPEATED_TENSORS);
}
