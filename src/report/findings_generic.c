/* SPDX-License-Identifier: MIT */
/*
 * The findings' rules over the step (findings_state.h), entries of the catalogue
 * (findings_catalogue.c) that read the per-line series (findings_series.h) rather than a tally of
 * their own (the program's loops are findings_loops.c's): a line whose cost grows over the run, calls a
 * training step does not need, settings that slow every call, float64 compute, evaluations with
 * autograd on, the program's syncs with the device at any depth, the Python before its outermost
 * calls, and any costly line of the program's own that no other rule explains. Each reads only the
 * steps' thread, and takes the first step out when settle leaves it out.
 */
#include "config.h"
#include "findings_generic.h"
#include "findings_candidates.h"
#include "findings_output.h"
#include "findings_tally.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- lines whose cost grows ------------------------------------------------------------------------ */

/* How a (line, API) grew over the run: its time a step, and the elements of the tensors it was given. */
typedef struct growth {
    double first_ns, last_ns, first_elems, last_elems;
    int time_rising, elems_rising;
} growth_t;

static int growth_read(const findings_t *f, const series_entry_t *e, growth_t *g)
{
    return report_series_ends(&f->series, e, SERIES_SELF, &g->first_ns, &g->last_ns, &g->time_rising) == 0 &&
           report_series_ends(&f->series, e, SERIES_ELEMS, &g->first_elems, &g->last_elems, &g->elems_rising) == 0;
}

/* Three times its first quarter's, rising through the last quarter: its time (and a five-hundredth of
 * a step more), or its tensors' elements (a tensor or list that grows each step: seen whatever a busy
 * machine does to the time). The weight: the time it grew by (a thousandth of a step at least). */
static double growth_of(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    (void)r;
    growth_t g;
    if (e->node || !growth_read(f, e, &g))
        return 0;
    double step = findings_mean_step(c), grown = g.last_ns - g.first_ns;
    /* (a line that slowed no more than the whole step did: the machine got busier, not the line) */
    int time = g.time_rising && g.last_ns >= 3 * g.first_ns && grown >= 0.002 * step &&
               g.last_ns >= 2 * f->step_growth * g.first_ns;
    /* where its tensors were measured, a time grown past what they explain (the square of their growth:
     * a pairwise op's) is the machine's: a call of a few hundred µs that waits for a preempted intra-op
     * thread takes ms while the step around it slows far less. The time alone speaks for the calls
     * whose inputs are no tensors (torch.tensor of a growing Python list). Tensors that grew with no
     * trend explain nothing: under detail "sampled", the last quarter's median of the elements can be
     * that of two detail steps, one of them validating four batches (the fixed attr_model.py's first
     * pooling line, 3x the elements, named growing once when a busy machine slowed it 6.5x). */
    if (time && (g.first_elems > 0 || g.last_elems > 0)) {
        double tensors = g.first_elems > 0 && g.elems_rising ? g.last_elems / g.first_elems : 0;
        time = g.last_ns <= tensors * tensors * g.first_ns;
    }
    /* (the tensors' growth beyond every line's typical one: inputs sorted by length grow every line's) */
    int elems = g.elems_rising && g.last_elems >= 3 * g.first_elems &&
                g.last_elems >= 2 * f->elems_growth * g.first_elems;
    /* or its tensors grew step after step in most steps (a list cleared every epoch), beyond what every
     * line's did */
    /* (and three times over at least between a step's least and most: a batch size cycling from 8 to 15 goes
     * up in most steps too) */
    int stepwise = e->elems_steps >= 8 &&
                   ((e->elems_up >= 0.7 * e->elems_steps && e->elems_max >= 3 * e->elems_min &&
                     (double)e->elems_up / e->elems_steps >= f->elems_up_share + 0.3) ||
                    (e->items_up >= 0.7 * e->elems_steps && e->items_max >= 3 * e->items_min));
    if (!time && !elems && !stepwise)
        return 0;
    if (!time && !elems) /* (what it costs a step: a cycle's growth is about half of it) */
        grown = (double)(e->self_ns - (f->skip_first ? e->first_self : 0)) / c->per_step / 2;
    double weight = grown > 0.001 * step ? grown : 0.001 * step;
    /* a call given a longer list each step is the cause, ranked before the loops over what it made */
    return e->elems_steps >= 8 && e->list_up >= 0.7 * e->elems_steps ? weight + step : weight;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The whole step's last quarter over its first (medians of the steps' times, the first step out); 1
 * under 8 steps. */
static double step_growth(const findings_t *f, const thread_state_t *t)
{
    double *times = t != NULL && t->nparts > 0 ? malloc(t->nparts * sizeof *times) : NULL;
    size_t n = 0;
    for (uint64_t s = 1; times != NULL && s < t->nparts; s++) {
        if (!t->parts[s].used)
            continue;
        double sum = 0;
        for (int k = 0; k < PARTS; k++)
            sum += (double)t->parts[s].ns[k];
        times[n++] = sum;
    }
    double growth = 1;
    size_t q = n / 4;
    if (n >= 8 && q >= 2) {
        qsort(times, q, sizeof *times, compare_double);
        qsort(times + n - q, q, sizeof *times, compare_double);
        double first = q % 2 ? times[q / 2] : (times[q / 2 - 1] + times[q / 2]) / 2;
        double *last = times + n - q;
        double end = q % 2 ? last[q / 2] : (last[q / 2 - 1] + last[q / 2]) / 2;
        if (first > 0)
            growth = end / first;
    }
    free(times);
    (void)f;
    return growth > 1 ? growth : 1;
}

/* The median over the steps' thread's keys of their tensors' growth (last quarter over first); 1 when
 * none can say. */
static double elems_growth(const findings_t *f, const settle_context_t *c)
{
    double *ratios = malloc((f->series.count + 1) * sizeof *ratios);
    size_t n = 0;
    for (size_t i = 0; ratios != NULL && i < f->series.capacity; i++) {
        const series_entry_t *e = f->series.slots[i];
        growth_t g;
        if (findings_on_thread(e, c->thread) && !e->node && growth_read(f, e, &g) && g.first_elems > 0)
            ratios[n++] = g.last_elems / g.first_elems;
    }
    double median = 1;
    if (n > 0) {
        qsort(ratios, n, sizeof *ratios, compare_double);
        median = n % 2 ? ratios[n / 2] : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    }
    free(ratios);
    return median > 1 ? median : 1;
}

/* The median over the steps' thread's keys of the share of steps whose tensors outgrew the step before's. */
static double elems_up_share(const findings_t *f, const settle_context_t *c)
{
    double *shares = malloc((f->series.count + 1) * sizeof *shares);
    size_t n = 0;
    for (size_t i = 0; shares != NULL && i < f->series.capacity; i++) {
        const series_entry_t *e = f->series.slots[i];
        if (findings_on_thread(e, c->thread) && !e->node && e->elems_steps >= 8)
            shares[n++] = (double)e->elems_up / e->elems_steps;
    }
    double median = 0;
    if (n > 0) {
        qsort(shares, n, sizeof *shares, compare_double);
        median = n % 2 ? shares[n / 2] : (shares[n / 2 - 1] + shares[n / 2]) / 2;
    }
    free(shares);
    return median;
}

void rule_growing_line(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    f->step_growth = step_growth(f, c->thread);
    f->elems_growth = elems_growth(f, c);
    f->elems_up_share = elems_up_share(f, c);
    size_t n;
    candidate_t *list = findings_candidates(f, c, r, &n, growth_of);
    if (list == NULL)
        return;
    double step = findings_mean_step(c), grown = 0;
    for (size_t i = 0; i < n; i++)
        grown += list[i].weight >= step ? list[i].weight - step : list[i].weight; /* (less the ranking's bonus) */
    finding_t *x = findings_add(f, r, grown / step);
    if (x != NULL) {
        growth_t g;
        growth_read(f, list[0].e, &g);
        for (size_t i = 0; i < n; i++)
            findings_add_where_text(x, findings_line_text(f, list[i].e));
        findings_evidence(x, "first_ms_per_step", g.first_ns / 1e6);
        findings_evidence(x, "last_ms_per_step", g.last_ns / 1e6);
        findings_evidence(x, "first_elements_per_step", g.first_elems);
        findings_evidence(x, "last_elements_per_step", g.last_elems);
        findings_evidence(x, "lines", (double)n);
        findings_evidence(x, "grown_ms_per_step", grown / 1e6);
        char tensors[200] = "";
        const series_entry_t *e = list[0].e;
        if (g.elems_rising && g.last_elems >= 3 * g.first_elems)
            snprintf(tensors, sizeof tensors, "; the tensors it is given grew from %.3g to %.3g elements a step",
                     g.first_elems, g.last_elems);
        else if (e->elems_steps > 0 && e->items_up >= 0.7 * e->elems_steps)
            snprintf(tensors, sizeof tensors, "; it is given more tensors than the step before in %u of %u steps "
                     "(a list appended to every step)", e->items_up, e->elems_steps);
        else if (e->elems_steps > 0 && e->elems_up >= 0.7 * e->elems_steps)
            snprintf(tensors, sizeof tensors, "; the tensors it is given outgrew the step before's in %u of %u "
                     "steps (a list grown every step, cleared now and then)", e->elems_up, e->elems_steps);
        snprintf(x->message, sizeof x->message,
                 "%s at %s costs more every step: %.2f ms a step at first, %.2f ms at the end (the first and last "
                 "quarters' medians)%s; %zu line(s) grew by %.2f ms a step in all, %.1f%% of a mean step.",
                 list[0].e->api, findings_line_text(f, list[0].e), g.first_ns / 1e6, g.last_ns / 1e6, tensors, n,
                 grown / 1e6, 100 * grown / step);
    }
    free(list);
}

/* ---- calls a training step does not need, every step ----------------------------------------------- */

static double every_step(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    if (e->node || e->program_calls == 0 || !findings_api_in(e->api, e->api_len, r->apis))
        return 0;
    /* in most steps: half of them, three at least */
    if (e->steps_seen < 3 || (double)e->steps_seen < 0.5 * c->per_step)
        return 0;
    return (double)e->program_cost * findings_after_first(f, e);
}

/* The same for every call of the APIs, the program's or torch's own inside another call: a layer's
 * construction (its __init__ is not recorded) registers its parameters from torch's code, charged to the
 * line of the call it runs in (a model's forward that builds a layer), or to the program's line that built
 * it where no recorded call encloses it. */
static double every_step_any_caller(findings_t *f, const rule_t *r, const settle_context_t *c,
                                    const series_entry_t *e)
{
    if (e->node || e->calls == 0 || !findings_api_in(e->api, e->api_len, r->apis))
        return 0;
    if (e->steps_seen < 3 || (double)e->steps_seen < 0.5 * c->per_step)
        return 0;
    return (double)(e->cost_ns - (f->skip_first ? e->first_cost : 0));
}

static void calls_every_step(findings_t *f, const rule_t *r, const settle_context_t *c, candidate_weight_t *keep)
{
    size_t n;
    candidate_t *list = findings_candidates(f, c, r, &n, keep);
    if (list == NULL)
        return;
    double step = findings_mean_step(c), total = 0;
    for (size_t i = 0; i < n; i++)
        total += list[i].weight;
    total /= c->per_step;
    { /* (a definite mistake in most steps: named at any share, ranked by it) */
        finding_t *x = findings_add(f, r, total / step);
        if (x != NULL) {
            const series_entry_t *e = list[0].e;
            for (size_t i = 0; i < n; i++)
                findings_add_where_text(x, findings_line_text(f, list[i].e));
            findings_evidence(x, "steps_with_calls", (double)e->steps_seen);
            findings_evidence(x, "ms_per_step", total / 1e6);
            snprintf(x->message, sizeof x->message,
                     "%s runs in %" PRIu64 " of %.0f steps at %s: %.2f ms a step, %.1f%% of a step, %s",
                     e->api, e->steps_seen, c->per_step, findings_line_text(f, e), total / 1e6, 100 * total / step,
                     r->message);
        }
    }
    free(list);
}

void rule_calls_every_step(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    calls_every_step(f, r, c, every_step);
}

void rule_built_every_step(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    calls_every_step(f, r, c, every_step_any_caller);
}

/* ---- settings that slow every call ------------------------------------------------------------------ */

void rule_setting(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t k = 0;
    while (k < f->nswitch_rules && f->switch_rules[k] != r)
        k++;
    const thread_state_t *t = c->thread;
    if (k == f->nswitch_rules || t == NULL || f->switches[k].calls_on == 0)
        return;
    uint64_t on = 0, steps = 0;
    double part_ns = 0; /* of the steps it was on in: the parts it slows */
    for (uint64_t s = f->skip_first ? 1 : 0; s < t->nparts; s++) {
        const step_parts_t *p = &t->parts[s];
        if (!p->used)
            continue;
        steps++;
        if (!(p->switches & 1u << k))
            continue;
        on++;
        for (int part = 0; part < PARTS; part++) {
            if (r->affects == 0 || r->affects & 1 << part)
                part_ns += (double)p->ns[part];
        }
    }
    if (on == 0)
        return;
    double share = part_ns / (double)c->run_ns;
    finding_t *x = findings_add(f, r, share);
    if (x == NULL)
        return;
    findings_add_where_text(x, f->switches[k].where);
    findings_evidence(x, "steps_on", (double)on);
    findings_evidence(x, "steps", (double)steps);
    findings_evidence(x, "slowed_ms_per_step", part_ns / (double)on / 1e6);
    /* "the forward, backward and evaluation" (a few parts), or every operator */
    char parts[128] = "every operator of the step";
    int nparts = 0, seen = 0;
    for (int part = 0; part < PARTS; part++)
        nparts += (r->affects >> part) & 1;
    if (r->affects != 0 && nparts <= 3) {
        strcpy(parts, "the");
        for (int part = 0; part < PARTS; part++) {
            if (!(r->affects & 1 << part))
                continue;
            seen++;
            snprintf(parts + strlen(parts), sizeof parts - strlen(parts), "%s %s",
                     seen == 1 ? "" : seen == nparts ? " and" : ",", report_part_names[part]);
        }
    }
    snprintf(x->message, sizeof x->message,
             "%s: on in %" PRIu64 " of %" PRIu64 " steps, switched on at %s; it slows %s, %.1f%% of the run.",
             r->message, on, steps, f->switches[k].where, parts, 100 * share);
}

/* ---- matrix products and convolutions in float64 --------------------------------------------------- */

static double float64(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    (void)c;
    if (e->node || e->f64_calls == 0 || !findings_api_in(e->api, e->api_len, r->apis))
        return 0;
    return (double)e->f64_ns * report_series_detail_scale(e) * findings_after_first(f, e);
}

void rule_dtype(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    candidate_t *list = findings_candidates(f, c, r, &n, float64);
    if (list == NULL)
        return;
    double total = 0;
    uint64_t calls = 0;
    for (size_t i = 0; i < n; i++)
        total += list[i].weight, calls += list[i].e->f64_calls * report_series_detail_scale(list[i].e);
    double share = total / (double)c->run_ns;
    if (share >= 0.01) {
        finding_t *x = findings_add(f, r, share);
        if (x != NULL) {
            /* where the float64 tensors were made first (a model cast, the default dtype set), then where
             * they cost */
            for (size_t i = 0; i < f->series.capacity; i++) {
                const series_entry_t *e = f->series.slots[i];
                if (e != NULL && e->program_calls > 0 && !e->node &&
                    (findings_api_in(e->api, e->api_len, "torch.nn.Module.double|torch.Tensor.double") ||
                     (e->f64_made && findings_api_in(e->api, e->api_len, "torch.set_default_dtype|torch.Tensor.to|"
                                                                         "torch.nn.Module.to|torch.tensor|torch.as_tensor"))))
                    findings_add_where_text(x, findings_line_text(f, e));
            }
            for (size_t i = 0; i < n; i++)
                findings_add_where_text(x, findings_line_text(f, list[i].e));
            findings_evidence(x, "ms_per_step", total / c->per_step / 1e6);
            findings_evidence(x, "calls", (double)calls);
            snprintf(x->message, sizeof x->message,
                     "%.1f%% of the run is matrix products and convolutions on float64 tensors (%s at %s first, "
                     "%.2f ms a step): float64 runs at half float32's speed or less, and a GPU's tensor cores "
                     "do not take it.", 100 * share, list[0].e->api, findings_line_text(f, list[0].e),
                     total / c->per_step / 1e6);
        }
    }
    free(list);
}

/* ---- evaluations with autograd on --------------------------------------------------------------------- */

void rule_eval_with_grad(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    uint64_t total, count;
    group_t **list = findings_ranked_groups(f, &f->eval_grad, &n, &total, &count);
    if (list == NULL || c->run_ns == 0) {
        free(list);
        return;
    }
    double share = (double)total / (double)c->run_ns;
    finding_t *x = findings_add(f, r, share);
    if (x != NULL) {
        findings_add_where(x, list, n);
        findings_evidence(x, "forwards", (double)count);
        findings_evidence(x, "ms", findings_ms(total));
        snprintf(x->message, sizeof x->message,
                 "%" PRIu64 " forward(s) of a model in eval mode ran with autograd on (%.1f%% of the run, at %.*s "
                 "first): each records the graph and keeps its activations for a backward that never comes.",
                 count, 100 * share, (int)strcspn(list[0]->key, "\t"), list[0]->key);
    }
    free(list);
}

/* ---- an evaluation in every step ---------------------------------------------------------------------- */

/* An outermost module forward that ran as an evaluation (no_grad, inference_mode or eval mode) in most steps. */
static double evaluated_every_step(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    (void)r;
    if (!e->module_forward || (double)e->eval_steps * 2 < c->per_step)
        return 0;
    return (double)(e->cost_ns - (f->skip_first ? e->first_cost : 0));
}

void rule_evaluation_every_step(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    candidate_t *list = findings_candidates(f, c, r, &n, evaluated_every_step);
    if (list == NULL || c->run_ns == 0) {
        free(list);
        return;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += list[i].weight;
    double share = total / (double)c->run_ns;
    /* (a twentieth of the run at least; low always: a teacher's or an averaged model's forward under no_grad is
     * the step's own work, and the records cannot tell it from a validation) */
    finding_t *x = share >= 0.05 ? findings_add(f, r, share) : NULL;
    if (x != NULL) {
        const series_entry_t *e = list[0].e;
        double steps = (double)e->eval_steps < c->per_step ? (double)e->eval_steps : c->per_step;
        for (size_t i = 0; i < n; i++)
            findings_add_where_text(x, findings_line_text(f, list[i].e));
        findings_evidence(x, "evaluation_steps", steps);
        findings_evidence(x, "ms_per_step", total / c->per_step / 1e6);
        snprintf(x->message, sizeof x->message,
                 "%s runs without autograd or in eval mode in %.0f of %.0f steps, at %s: %.2f ms a step, %.1f%% of "
                 "the run. A validation every step?", e->api, steps, c->per_step, findings_line_text(f, e),
                 total / c->per_step / 1e6, 100 * share);
    }
    free(list);
}

/* ---- a costly line no rule explains ----------------------------------------------------------------- */

/* Whether a module's forward is called at the line (a model's forward written in the program: its layers'
 * calls, charged to the line that makes them, are the forward's part of the step). */
static int line_calls_a_module(const findings_t *f, const settle_context_t *c, const char *where)
{
    for (size_t i = 0; i < f->series.capacity; i++) {
        const series_entry_t *e = f->series.slots[i];
        if (findings_on_thread(e, c->thread) && e->module_forward && strcmp(findings_line_text(f, e), where) == 0)
            return 1;
    }
    return 0;
}

void rule_costly_line(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    const step_anatomy_t *a = &f->anatomy;
    for (size_t i = 0; i < a->nlines; i++) {
        const char *runs = a->lines[i].runs;
        size_t len = strlen(runs);
        /* the model's own parts have their part of the step: a module forward, backward, the optimizer */
        if (a->lines[i].share < 0.10 || a->lines[i].library || /* (the program's own lines: what it can change) */ (len > 8 && strcmp(runs + len - 8, ".forward") == 0) ||
            strncmp(runs, "torch.optim.", 12) == 0 || strstr(runs, "backward") != NULL ||
            strncmp(runs, "torch.nn.utils.clip_grad", 24) == 0 || line_calls_a_module(f, c, a->lines[i].where))
            continue;
        int named = 0; /* by another finding already */
        for (size_t k = 0; k < f->nfound && !named; k++)
            for (size_t w = 0; w < f->found[k].nwhere && !named; w++)
                named = strcmp(f->found[k].where[w], a->lines[i].where) == 0;
        if (named)
            continue;
        finding_t *x = findings_add(f, r, a->lines[i].share);
        if (x == NULL)
            return;
        findings_add_where_text(x, a->lines[i].where);
        findings_evidence(x, "ms_per_step", a->lines[i].ms);
        snprintf(x->message, sizeof x->message,
                 "%.1f%% of a step at %s: %s (%.2f ms a step). No rule of the catalogue knows its cause: does "
                 "every step need it?", 100 * a->lines[i].share, a->lines[i].where, runs, a->lines[i].ms);
    }
}

/* ---- the program's syncs with the device, at any depth ---------------------------------------------- */

static double program_syncs(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    (void)c;
    if (e->node || e->program_calls == 0 || !findings_api_in(e->api, e->api_len, r->apis))
        return 0;
    return (double)e->program_calls * findings_after_first(f, e); /* (a sync's cost is its wait: the calls count) */
}

void rule_host_sync(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    candidate_t *list = findings_candidates(f, c, r, &n, program_syncs);
    if (list == NULL || c->run_ns == 0) {
        free(list);
        return;
    }
    double count = 0, ns = 0;
    for (size_t i = 0; i < n; i++) {
        count += list[i].weight;
        ns += (double)list[i].e->program_cost * findings_after_first(f, list[i].e);
    }
    double share = ns / (double)c->run_ns, per = count / c->per_step;
    finding_t *x = findings_add(f, r, share);
    if (x == NULL) {
        free(list);
        return;
    }
    for (size_t i = 0; i < n; i++)
        findings_add_where_text(x, findings_line_text(f, list[i].e));
    findings_evidence(x, "syncs_per_step", per);
    findings_evidence(x, "ms_per_step", ns / c->per_step / 1e6);
    /* "3 calls in 30 steps" where there is less than one a step ("0.1 calls a step" read oddly) */
    char rate[64];
    if (per >= 1)
        snprintf(rate, sizeof rate, "%.1f calls a step", per);
    else
        snprintf(rate, sizeof rate, "%.0f call%s in %.0f steps", count, count < 1.5 ? "" : "s", c->per_step);
    snprintf(x->message, sizeof x->message,
             "%s %s a result to the host (%s at %s first): on a GPU each waits for all the work queued before it.",
             rate, count < 1.5 ? "copies" : "copy", list[0].e->api, findings_line_text(f, list[0].e));
    free(list);
}

/* ---- Python between the program's calls into torch ---------------------------------------------------- */

/* The Python before the program's outermost calls, the training loop's. (Inside calls, the gap between
 * two of the program's calls holds torch's own call machinery and the profiler's recording as much as
 * the program's Python: a model's forward would look like a Python loop. A Python loop that calls into
 * torch inside a forward or a closure is named by the calls it makes: host_sync, per_tensor_loop.) */
static double python_before(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    (void)r, (void)c;
    if (e->node || !e->outermost)
        return 0;
    return (double)(e->program_gap_ns - (f->skip_first ? e->first_gap_ns : 0));
}

void rule_python_outside_torch(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    candidate_t *list = findings_candidates(f, c, r, &n, python_before);
    if (list == NULL || c->run_ns == 0) {
        free(list);
        return;
    }
    /* a typical step's (the anatomy's: a garbage collection or a one-off pause in a few steps is not the
     * program's Python of every step) */
    double gap = 0;
    for (size_t i = 0; i < n; i++)
        gap += list[i].weight / c->per_step;
    double step = findings_mean_step(c);
    if (c->typical)
        gap = c->typical_gap, step = c->typical_step;
    double share = gap / step;
    /* every eager program spends some of its time in Python between operations: a finding from 15% of
     * the step (medium), 30% (high), and 1 ms a step (a tiny step's 50 us is no lead); in most steps (the
     * median step's share), where a busy machine preempting the process in a few steps' gaps lifts the
     * middle steps' mean (a suite's CNN loop: medium, beside a second test run and busy processes) */
    if (share >= 0.15 && gap >= 1e6 && (!c->typical || c->median_gap_share >= 0.15)) {
        finding_t *x = findings_add(f, r, share);
        if (x != NULL) {
            for (size_t i = 0; i < n; i++)
                findings_add_where_text(x, findings_line_text(f, list[i].e));
            findings_evidence(x, "ms_per_step", gap / 1e6);
            snprintf(x->message, sizeof x->message,
                     "%.1f%% of a step is Python between calls into torch (%.2f ms a step), most of it before %s.",
                     100 * share, gap / 1e6, findings_line_text(f, list[0].e));
        }
    }
    free(list);
}
