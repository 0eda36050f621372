/* SPDX-License-Identifier: MIT */
/*
 * tw-report --diff BASE NEW: per API, what a step costs in each run, the change, and whether the
 * change is beyond the runs' own step-to-step noise; sorted by the change of a step's time.
 *
 * Each run is read in one streaming pass. What is kept is per API and per step (calls, total and
 * self time: memory grows with APIs x steps, never with records) plus a histogram per API for its
 * percentiles. Steps are the samples: an API's self time in each step of BASE is compared with its
 * self time in each step of NEW by a Mann-Whitney U test (report_mann_whitney).
 *
 * Why self time: the self times of a step's calls add up to the step's recorded time, so an API's
 * change of self time is exactly its share of the step's change; a total time counts a slowdown once
 * for every caller above it (F.linear, Linear.forward, Module.__call__ all grow by the same amount).
 * Totals are shown too.
 *
 * Why medians for the size of a change: a step in which the machine preempted the process adds a
 * millisecond to whatever API was running, and one such step moves a mean by more than a real 20%
 * slowdown of a small API. The change is the difference of the median steps (of the means where
 * an API is absent from most steps of both runs, so that both medians are 0); the means are shown.
 *
 * A change is called a regression (or an improvement) when the test rejects "same distribution" at
 * --alpha (default 0.001: dozens of APIs are tested at once) AND the change is at least --min-change
 * percent of BASE's step time (default 4). The second condition is what keeps a diff of one program
 * against itself quiet: two processes of one program differ systematically (memory layout, caches,
 * where the scheduler preempts them), by 5-20% on APIs of a microsecond and by up to ~4.5% on one
 * that takes half the step, and the test calls that significant with 60 steps. Measured on a 2-core
 * VM at load 6-11 (tests/python/test_diff.py's runs, ~40 pairs): such changes reached 2.0% of a step
 * at worst, while a matmul made 20% slower, ~45% of the step, showed as 6.9-11%; 4% sits between.
 */
#include "config.h"
#include "diff.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"
#include "torchwrapper/reader.h"
#include "torchwrapper/stats.h"
#include "../stats_internal.h"

#include "filter.h"
#include "groups.h"
#include "inputs.h"

#define DEFAULT_ALPHA 0.001
#define DEFAULT_MIN_CHANGE 4.0

/* ---- the Mann-Whitney U test -------------------------------------------------------------------- */

typedef struct ranked {
    double value;
    int from_x;
} ranked_t;

static int compare_ranked(const void *a, const void *b)
{
    double u = ((const ranked_t *)a)->value, v = ((const ranked_t *)b)->value;
    return (u > v) - (u < v);
}

/*
 * The normal approximation, with the tie correction and the continuity correction (what scipy's
 * mannwhitneyu(method="asymptotic") computes). Why not the exact distribution or a bootstrap: a diff
 * compares 10 to thousands of steps per run, where the approximation's p is within ~0.001 of the
 * exact one for n >= 10 (and --alpha is 0.001 on p values far below that when a change is real);
 * the exact distribution does not exist in closed form with ties (many APIs take 0 ns in some
 * steps) and costs O(n1 n2 (n1 + n2)); a bootstrap would make the verdict depend on a seed. Ranks
 * make one preempted step count as one step, however long.
 */
int report_mann_whitney(const double *x, size_t nx, const double *y, size_t ny, mann_whitney_t *out)
{
    *out = (mann_whitney_t){0, 0, NAN};
    if (nx == 0 || ny == 0)
        return 0;
    size_t n = nx + ny;
    ranked_t *all = malloc(n * sizeof *all);
    if (all == NULL)
        return TW_ENOMEM;
    for (size_t i = 0; i < nx; i++)
        all[i] = (ranked_t){x[i], 1};
    for (size_t i = 0; i < ny; i++)
        all[nx + i] = (ranked_t){y[i], 0};
    qsort(all, n, sizeof *all, compare_ranked);
    /* Tied values share the mean of their ranks; ranks and tie sizes are integers, exact in a double
     * far beyond any step count, so the sums below do not depend on the order of addition. */
    double rank_sum_x = 0, ties = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        size_t in_x = 0;
        while (j < n && all[j].value == all[i].value)
            in_x += (size_t)all[j++].from_x;
        double t = (double)(j - i), mean_rank = ((double)i + 1 + (double)j) / 2;
        rank_sum_x += mean_rank * (double)in_x;
        ties += t * t * t - t;
        i = j;
    }
    free(all);
    double n1 = (double)nx, n2 = (double)ny, total = (double)n;
    out->u = rank_sum_x - n1 * (n1 + 1) / 2;
    double mean = n1 * n2 / 2;
    double variance = n1 * n2 / 12 * ((total + 1) - (total > 1 ? ties / (total * (total - 1)) : 0));
    if (!(variance > 0)) { /* every value the same: nothing tells the runs apart */
        out->p = 1;
        return 0;
    }
    double distance = fabs(out->u - mean) - 0.5;
    out->z = (distance > 0 ? distance : 0) / sqrt(variance) * (out->u < mean ? -1 : 1);
    out->p = erfc(fabs(out->z) / sqrt(2.0));
    if (out->p > 1)
        out->p = 1;
    return 0;
}

/* ---- one run, read ------------------------------------------------------------------------------ */

typedef struct step_cell {
    uint64_t calls, total_ns, self_ns;
} step_cell_t;

typedef struct run_api {
    char *name;
    size_t len;
    uint64_t hash;
    step_cell_t *steps; /* indexed by step - the run's first step */
    size_t nsteps;
    tw_api_stats_t stats; /* the call costs of the steps kept, for percentiles */
    /* Without --steps the run's last step is left out (it may be cut off), but which step is last is
     * known only at the end: the calls of the API's latest step wait here until a later one comes. */
    int64_t held_step;
    uint64_t *held;
    size_t nheld, held_capacity;
} run_api_t;

typedef struct run {
    report_filter_t filter; /* --api, --pid, --tid, --steps */
    int64_t first;   /* the first step kept */
    int drop_last;   /* no --steps: the last step seen is left out */
    run_api_t **slots;
    size_t capacity, count;
    uint64_t *step_rows; /* rows per step, indexed by step - first */
    size_t nsteps;
    int64_t max_step;
    const char *path;     /* the file being read */
    int no_step_column;   /* a call record without a step: stops the pass */
    int oom;
    uint64_t beyond;      /* rows of steps past DIFF_MAX_STEPS after the first: skipped */
    tw_read_stats_t stats;
    size_t files;
} run_t;

static uint64_t hash_name(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a: API names are short, a diff is not the hot path */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static run_api_t *run_find(const run_t *run, const char *name, size_t len, uint64_t h)
{
    if (run->capacity == 0)
        return NULL;
    for (size_t j = h & (run->capacity - 1); run->slots[j] != NULL; j = (j + 1) & (run->capacity - 1)) {
        run_api_t *a = run->slots[j];
        if (a->hash == h && a->len == len && memcmp(a->name, name, len) == 0)
            return a;
    }
    return NULL;
}

static run_api_t *run_api(run_t *run, const char *name, size_t len)
{
    uint64_t h = hash_name(name, len);
    run_api_t *a = run_find(run, name, len, h);
    if (a != NULL)
        return a;
    if ((run->count + 1) * 2 > run->capacity) {
        size_t capacity = run->capacity ? run->capacity * 2 : 256;
        run_api_t **slots = calloc(capacity, sizeof *slots);
        if (slots == NULL)
            return NULL;
        for (size_t i = 0; i < run->capacity; i++) {
            if (run->slots[i] == NULL)
                continue;
            size_t j = run->slots[i]->hash & (capacity - 1);
            while (slots[j] != NULL)
                j = (j + 1) & (capacity - 1);
            slots[j] = run->slots[i];
        }
        free(run->slots);
        run->slots = slots;
        run->capacity = capacity;
    }
    if ((a = calloc(1, sizeof *a)) == NULL || (a->name = malloc(len + 1)) == NULL) {
        free(a);
        return NULL;
    }
    memcpy(a->name, name, len);
    a->name[len] = '\0';
    a->len = len;
    a->hash = h;
    a->held_step = -1;
    size_t j = h & (run->capacity - 1);
    while (run->slots[j] != NULL)
        j = (j + 1) & (run->capacity - 1);
    run->slots[j] = a;
    run->count++;
    return a;
}

/* Steps compared at most: memory is 24 bytes per API and step (a record's step is a 32-bit number,
 * so a malformed or hostile file could otherwise ask for terabytes). */
#define DIFF_MAX_STEPS (1u << 22)

/* Makes room for index i (< DIFF_MAX_STEPS) in an array of *count elements of size bytes, zeroing
 * what it adds. */
static int grow_to(void **items, size_t *count, size_t i, size_t size)
{
    if (i < *count)
        return 0;
    size_t capacity = *count ? *count * 2 : 64;
    if (capacity <= i)
        capacity = i + 1;
    if (capacity > DIFF_MAX_STEPS)
        capacity = DIFF_MAX_STEPS;
    if (i >= capacity || capacity > SIZE_MAX / size)
        return TW_ENOMEM;
    char *bigger = realloc(*items, capacity * size);
    if (bigger == NULL)
        return TW_ENOMEM;
    memset(bigger + *count * size, 0, (capacity - *count) * size);
    *items = bigger;
    *count = capacity;
    return 0;
}

static void flush_held(run_t *run, run_api_t *a)
{
    for (size_t i = 0; i < a->nheld; i++)
        if (tw_api_stats_add(&a->stats, a->held[i], 0, 0, 0) != 0)
            run->oom = 1;
    a->nheld = 0;
}

static int diff_on_row(void *ctx, const tw_row_t *row)
{
    run_t *run = ctx;
    if (row->kind != TW_FILE_CALLS) /* GPU records carry no step: a diff compares host time */
        return 0;
    if (row->step < 0) {
        run->no_step_column = 1;
        return TW_EINVAL; /* stops the pass */
    }
    if (row->step < run->first || !report_filter_keep(&run->filter, row))
        return 0;
    if ((uint64_t)(row->step - run->first) >= DIFF_MAX_STEPS) {
        run->beyond++;
        return 0;
    }
    size_t i = (size_t)(row->step - run->first);
    run_api_t *a = run_api(run, row->api.ptr, row->api.len);
    if (a == NULL || grow_to((void **)&a->steps, &a->nsteps, i, sizeof *a->steps) != 0 ||
        grow_to((void **)&run->step_rows, &run->nsteps, i, sizeof *run->step_rows) != 0) {
        run->oom = 1;
        return 0;
    }
    a->steps[i].calls++;
    a->steps[i].total_ns += row->cost_ns;
    a->steps[i].self_ns += row->self_ns;
    run->step_rows[i]++;
    if (row->step > run->max_step)
        run->max_step = row->step;
    if (!run->drop_last) {
        if (tw_api_stats_add(&a->stats, row->cost_ns, 0, 0, 0) != 0)
            run->oom = 1;
        return 0;
    }
    if (row->step > a->held_step) {
        flush_held(run, a);
        a->held_step = row->step;
    }
    if (row->step < a->held_step) {
        if (tw_api_stats_add(&a->stats, row->cost_ns, 0, 0, 0) != 0)
            run->oom = 1;
        return 0;
    }
    if (a->nheld == a->held_capacity) {
        size_t capacity = a->held_capacity ? a->held_capacity * 2 : 16;
        uint64_t *held = realloc(a->held, capacity * sizeof *held);
        if (held == NULL) {
            run->oom = 1;
            return 0;
        }
        a->held = held;
        a->held_capacity = capacity;
    }
    a->held[a->nheld++] = row->cost_ns;
    return 0;
}

static void run_free(run_t *run)
{
    for (size_t i = 0; i < run->capacity; i++) {
        run_api_t *a = run->slots[i];
        if (a == NULL)
            continue;
        free(a->name);
        free(a->steps);
        free(a->held);
        free(a->stats.histogram);
        free(a);
    }
    free(run->slots);
    free(run->step_rows);
    memset(run, 0, sizeof *run);
}

/* Reads the inputs of one run (paths: directories or files); 0, or after a message to err a negative
 * errno: report_collect_inputs's, tw_read_file's, TW_EINVAL (no step column) or -ENODATA (no call
 * records). */
static int run_read(run_t *run, const options_t *o, const char *const *paths, size_t npaths, const char *which,
                    FILE *err)
{
    options_t side = *o;
    side.inputs = (const char **)paths;
    side.ninputs = npaths;
    inputs_t in;
    memset(&in, 0, sizeof in);
    int rc = report_collect_inputs(&side, &in, err);
    run->filter = (report_filter_t){.o = o, .window_to_ns = INT64_MAX};
    run->first = o->has_steps ? o->steps_from : 1;
    run->drop_last = !o->has_steps;
    run->max_step = -1;
    for (size_t i = 0; rc == 0 && i < in.count; i++) {
        if (in.files[i].kind != TW_FILE_CALLS)
            continue;
        char message[512];
        run->path = in.files[i].path;
        run->files++;
        int read = tw_read_file(in.files[i].path, diff_on_row, run, &run->stats, message, sizeof message);
        if (run->no_step_column) {
            fprintf(err, "tw-report: --diff compares runs step by step, and %s (%s) has no step column: it was "
                         "written by a TorchWrapper older than the step column; record both runs again\n",
                    in.files[i].path, which);
            rc = TW_EINVAL;
        } else if (read != 0) {
            fprintf(err, "tw-report: %s\n", message);
            rc = read;
        }
    }
    /* The calls held back are counted now, but those of the run's last step, which is left out. */
    for (size_t i = 0; run->drop_last && i < run->capacity; i++)
        if (run->slots[i] != NULL && run->slots[i]->held_step != run->max_step)
            flush_held(run, run->slots[i]);
    if (rc == 0 && run->files == 0) {
        fprintf(err, "tw-report: --diff: %s holds no call records (only GPU records or empty files)\n", which);
        rc = -ENODATA;
    }
    report_free_inputs(&in);
    return rc;
}

/* ---- one run, summed up ------------------------------------------------------------------------- */

static int compare_doubles(const void *a, const void *b)
{
    double u = *(const double *)a, v = *(const double *)b;
    return (u > v) - (u < v);
}

/* The median of values[0..n) (sorts a copy in scratch); NAN when n == 0. */
static double median_of(const double *values, size_t n, double *scratch)
{
    if (n == 0)
        return NAN;
    memcpy(scratch, values, n * sizeof *scratch);
    qsort(scratch, n, sizeof *scratch, compare_doubles);
    return n % 2 ? scratch[n / 2] : (scratch[n / 2 - 1] + scratch[n / 2]) / 2;
}

typedef struct run_steps {
    int64_t *steps; /* the steps compared */
    size_t count;
} run_steps_t;

/* The steps of a run that are compared: those with records, from the first kept to the last kept. */
static int run_steps(const run_t *run, const options_t *o, run_steps_t *out, diff_run_t *summary)
{
    int64_t last = run->max_step;
    if (o->has_steps && o->steps_to >= 0 && o->steps_to < last)
        last = o->steps_to;
    if (run->drop_last)
        last--;
    out->count = 0;
    out->steps = malloc((run->nsteps ? run->nsteps : 1) * sizeof *out->steps);
    if (out->steps == NULL)
        return TW_ENOMEM;
    for (int64_t s = run->first; s <= last; s++)
        if (run->step_rows[s - run->first] != 0)
            out->steps[out->count++] = s;
    summary->steps = out->count;
    summary->first_step = out->count ? out->steps[0] : -1;
    summary->last_step = out->count ? out->steps[out->count - 1] : -1;
    summary->seen_last_step = run->max_step;
    summary->files = run->files;
    summary->records = run->stats.rows;
    return 0;
}

/* An API's self time in each compared step (0 where it made no call). */
static void api_samples(const run_api_t *a, const run_t *run, const run_steps_t *steps, double *out)
{
    for (size_t k = 0; k < steps->count; k++) {
        size_t i = (size_t)(steps->steps[k] - run->first);
        out[k] = a != NULL && i < a->nsteps ? (double)a->steps[i].self_ns : 0;
    }
}

static void api_side(const run_api_t *a, const run_t *run, const run_steps_t *steps, const double *samples,
                     double *scratch, diff_side_t *side)
{
    memset(side, 0, sizeof *side);
    if (steps->count == 0)
        return;
    double calls = 0, total = 0, self = 0;
    for (size_t k = 0; a != NULL && k < steps->count; k++) {
        size_t i = (size_t)(steps->steps[k] - run->first);
        if (i < a->nsteps) {
            calls += (double)a->steps[i].calls;
            total += (double)a->steps[i].total_ns;
            self += (double)a->steps[i].self_ns;
        }
    }
    side->calls = calls / (double)steps->count;
    side->total_ns = total / (double)steps->count;
    side->self_ns = self / (double)steps->count;
    side->median_self_ns = median_of(samples, steps->count, scratch);
    if (a != NULL) {
        side->p50_ns = tw_stats_percentile(&a->stats, 0.50);
        side->p99_ns = tw_stats_percentile(&a->stats, 0.99);
    }
}

/* ---- the diff ------------------------------------------------------------------------------------ */

static double percent(double part, double whole)
{
    return whole > 0 ? 100.0 * part / whole : NAN;
}

static double magnitude(double v)
{
    return isnan(v) ? -1 : fabs(v);
}

/* Rows beyond noise (and APIs that appeared or vanished) first, then the others; each by the size of
 * the change of a step's time: a large change that the test cannot tell from noise is not news. */
static int compare_rows(const void *a, const void *b)
{
    const diff_row_t *x = a, *y = b;
    if ((x->verdict == DIFF_SAME) != (y->verdict == DIFF_SAME))
        return x->verdict == DIFF_SAME ? 1 : -1;
    double u = magnitude(x->change_ns), v = magnitude(y->change_ns);
    if (u != v)
        return u < v ? 1 : -1;
    u = fabs(x->new_.self_ns - x->base.self_ns);
    v = fabs(y->new_.self_ns - y->base.self_ns);
    if (u != v)
        return u < v ? 1 : -1;
    return strcmp(x->api, y->api);
}

/* Fills one row from the two runs' APIs (either may be NULL). */
static int diff_row(diff_row_t *row, const diff_t *d, const run_api_t *a, const run_t *base, const run_steps_t *bs,
                    const run_api_t *b, const run_t *new_, const run_steps_t *ns, double *buffers)
{
    double *x = buffers, *y = x + bs->count, *scratch = y + ns->count;
    api_samples(a, base, bs, x);
    api_samples(b, new_, ns, y);
    api_side(a, base, bs, x, scratch, &row->base);
    api_side(b, new_, ns, y, scratch, &row->new_);
    mann_whitney_t test;
    if (report_mann_whitney(y, ns->count, x, bs->count, &test) != 0)
        return TW_ENOMEM;
    row->u = test.u;
    row->p_value = test.p;
    /* The median step's change; the mean's where the API is absent from most steps of both runs. */
    if (row->base.median_self_ns == 0 && row->new_.median_self_ns == 0)
        row->change_ns = row->new_.self_ns - row->base.self_ns;
    else
        row->change_ns = row->new_.median_self_ns - row->base.median_self_ns;
    row->change_pct = percent(row->change_ns, d->base.step_ns);
    row->self_change_pct = percent(row->new_.self_ns - row->base.self_ns, row->base.self_ns);
    row->total_change_pct = percent(row->new_.total_ns - row->base.total_ns, row->base.total_ns);
    int beyond = test.p < d->alpha && fabs(row->change_pct) >= d->min_change_pct;
    if (row->base.calls == 0)
        row->verdict = DIFF_APPEARED;
    else if (row->new_.calls == 0)
        row->verdict = DIFF_VANISHED;
    else if (beyond)
        row->verdict = row->change_ns > 0 ? DIFF_REGRESSION : DIFF_IMPROVEMENT;
    else
        row->verdict = DIFF_SAME;
    /* New work in every step gates like a slowdown of what was there. */
    row->fails = d->fail_above_pct >= 0 && beyond && row->change_ns > 0 && row->change_pct > d->fail_above_pct &&
                 (row->verdict == DIFF_REGRESSION || row->verdict == DIFF_APPEARED);
    return 0;
}

static int diff_compute(diff_t *d, const options_t *o, run_t *base, run_t *new_)
{
    run_steps_t bs = {0}, ns = {0};
    double *buffers = NULL, *step_x = NULL, *step_y = NULL;
    int rc = TW_ENOMEM;
    if (run_steps(base, o, &bs, &d->base) != 0 || run_steps(new_, o, &ns, &d->new_) != 0)
        goto done;
    size_t nbuf = 2 * (bs.count + ns.count) + 1;
    if ((buffers = malloc(nbuf * sizeof *buffers)) == NULL ||
        (step_x = calloc(bs.count + 1, sizeof *step_x)) == NULL ||
        (step_y = calloc(ns.count + 1, sizeof *step_y)) == NULL)
        goto done;
    /* The step time: the self time of every API in the step, i.e. the recorded calls' time. */
    run_t *runs[2] = {base, new_};
    run_steps_t *steps[2] = {&bs, &ns};
    double *sums[2] = {step_x, step_y};
    diff_run_t *sides[2] = {&d->base, &d->new_};
    for (int r = 0; r < 2; r++) {
        double mean = 0;
        for (size_t i = 0; i < runs[r]->capacity; i++) {
            if (runs[r]->slots[i] == NULL)
                continue;
            api_samples(runs[r]->slots[i], runs[r], steps[r], buffers);
            for (size_t k = 0; k < steps[r]->count; k++)
                sums[r][k] += buffers[k];
        }
        for (size_t k = 0; k < steps[r]->count; k++)
            mean += sums[r][k];
        sides[r]->mean_step_ns = steps[r]->count ? mean / (double)steps[r]->count : NAN;
        sides[r]->step_ns = median_of(sums[r], steps[r]->count, buffers);
    }
    mann_whitney_t test;
    if (report_mann_whitney(step_y, ns.count, step_x, bs.count, &test) != 0)
        goto done;
    d->step_p_value = test.p;
    d->step_change_pct = percent(d->new_.step_ns - d->base.step_ns, d->base.step_ns);
    /* The rows: BASE's APIs, then those only NEW has. */
    if ((d->rows = calloc(base->count + new_->count + 1, sizeof *d->rows)) == NULL)
        goto done;
    for (int r = 0; r < 2; r++) {
        for (size_t i = 0; i < runs[r]->capacity; i++) {
            const run_api_t *a = runs[r]->slots[i];
            if (a == NULL || (r == 1 && run_find(base, a->name, a->len, a->hash) != NULL))
                continue;
            const run_api_t *other = run_find(runs[1 - r], a->name, a->len, a->hash);
            diff_row_t *row = &d->rows[d->count];
            if ((row->api = strdup(a->name)) == NULL)
                goto done;
            d->count++;
            if (diff_row(row, d, r == 0 ? a : NULL, base, &bs, r == 0 ? other : a, new_, &ns, buffers) != 0)
                goto done;
            if (row->base.calls == 0 && row->new_.calls == 0) { /* only in steps left out */
                free(row->api);
                d->count--;
            }
        }
    }
    qsort(d->rows, d->count, sizeof *d->rows, compare_rows);
    for (size_t i = 0; i < d->count; i++)
        d->failed |= d->rows[i].fails;
    rc = 0;
done:
    free(bs.steps);
    free(ns.steps);
    free(buffers);
    free(step_x);
    free(step_y);
    return rc;
}

const char *report_diff_verdict_name(diff_verdict_t v)
{
    switch (v) {
    case DIFF_REGRESSION: return "regression";
    case DIFF_IMPROVEMENT: return "improvement";
    case DIFF_APPEARED: return "appeared";
    case DIFF_VANISHED: return "vanished";
    default: return "same";
    }
}

void report_diff_free(diff_t *d)
{
    for (size_t i = 0; i < d->count; i++)
        free(d->rows[i].api);
    free(d->rows);
    d->rows = NULL;
    d->count = 0;
}

/* ---- both runs, read and compared ---------------------------------------------------------------- */

/* The smallest p the test can give for samples of n1 and n2 steps (all of one above all of the other). */
static double smallest_p(size_t n1, size_t n2)
{
    double a = (double)n1, b = (double)n2;
    double z = (a * b / 2 - 0.5) / sqrt(a * b * (a + b + 1) / 12);
    return n1 && n2 ? erfc(z / sqrt(2.0)) : 1;
}

int report_diff_run(const options_t *o, diff_t *d, FILE *err)
{
    memset(d, 0, sizeof *d);
    d->alpha = o->diff_alpha > 0 ? o->diff_alpha : DEFAULT_ALPHA;
    d->min_change_pct = o->diff_min_change_given ? o->diff_min_change : DEFAULT_MIN_CHANGE;
    d->fail_above_pct = o->diff_fail_above_given ? o->diff_fail_above : -1;
    d->base.inputs = o->diff_base;
    d->base.ninputs = o->ndiff_base;
    d->new_.inputs = o->inputs;
    d->new_.ninputs = o->ninputs;
    run_t base, new_;
    memset(&base, 0, sizeof base);
    memset(&new_, 0, sizeof new_);
    int rc = run_read(&base, o, o->diff_base, o->ndiff_base, "BASE", err);
    if (rc == 0)
        rc = run_read(&new_, o, o->inputs, o->ninputs, "NEW", err);
    for (int k = 0; rc == 0 && k < 2; k++) {
        const run_t *run = k == 0 ? &base : &new_;
        if (run->beyond > 0)
            fprintf(err, "tw-report: %s: %llu records of steps more than %u after the first were left out (give "
                         "--steps A:B)\n", k == 0 ? "BASE" : "NEW", (unsigned long long)run->beyond, DIFF_MAX_STEPS);
    }
    if (rc == 0 && (base.oom || new_.oom)) {
        fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
        rc = TW_ENOMEM;
    }
    if (rc == 0 && diff_compute(d, o, &base, &new_) != 0) {
        fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
        rc = TW_ENOMEM;
    }
    const diff_run_t *runs[2] = {&d->base, &d->new_};
    for (int r = 0; rc == 0 && r < 2; r++) {
        if (runs[r]->steps == 0) {
            fprintf(err, "tw-report: --diff: %s has no step to compare (", r ? "NEW" : "BASE");
            if (o->has_steps)
                fprintf(err, "none with records in --steps");
            else
                fprintf(err, "steps seen: 0 to %" PRId64 "; without --steps the first is left out as warm-up and "
                             "the last as possibly cut off", runs[r]->seen_last_step);
            fprintf(err, "): profile more steps, or give --steps FIRST:LAST\n");
            rc = -ENODATA;
        }
    }
    if (rc == 0 && smallest_p(d->base.steps, d->new_.steps) >= d->alpha)
        fprintf(err, "tw-report: --diff: %zu steps in BASE and %zu in NEW are too few for any change to be beyond "
                     "noise at --alpha %g: compare 10 steps or more in each (profile more steps, or widen "
                     "--steps)\n", d->base.steps, d->new_.steps, d->alpha);
    run_free(&base);
    run_free(&new_);
    if (rc != 0)
        report_diff_free(d);
    return rc;
}

