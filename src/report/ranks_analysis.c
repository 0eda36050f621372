/* SPDX-License-Identifier: MIT */
/*
 * tw-report --ranks, the analysis of what the sink (ranks.c) gathered.
 *
 * A rank's step time is the sum of its calls' self times in the step (as --diff's: the step's
 * recorded time). Part of it is waiting: in collectives (torch.distributed.* calls, c10d operators)
 * a fast rank waits for the slow one, and under DistributedDataParallel the gradient allreduce is
 * waited for inside backward, after the graph's last node, in the engine's own time (the self time
 * of torch.autograd.backward and Tensor.backward where the autograd nodes are records of their own:
 * aten="backward", the default). That time is shown apart and never blamed: a rank's busy time is
 * its step time minus it, and the slowest rank of a step is the one with the most busy time.
 *
 * Noise: a rank is named a straggler when its busy time per step, against the median of the other
 * ranks' in the same steps, passes --diff's test in its paired form (ranks over the steps: the
 * Wilcoxon signed-rank test, exact up to 25 steps, p < --alpha, and a change of at least --min-change percent of the
 * median rank's step time); and for it, each API's self time per step against the median of the
 * others' is tested the same way, and those beyond noise are its explanation, the largest first. A
 * rank that is slowest in a few steps by chance passes neither.
 *
 * Too few steps: below 11 steps no change reaches p < 0.001, however clear. A rank that is not a
 * straggler but slowest in more steps than chance makes likely (the exact sign test: with no rank
 * slower, each is a step's slowest with probability 1/R; its binomial tail times R, for the R
 * ranks looked at, under 0.05) and slower by at least --min-change is a likely straggler: the
 * report says how many more steps like these the signed-rank test would need, and which APIs
 * explain its time at p < 0.05.
 */
#include "config.h"
#include "ranks_analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#define DEFAULT_ALPHA 0.001    /* --diff's */
#define DEFAULT_MIN_CHANGE 4.0 /* --diff's */
#define APIS_SHOWN 10
#define LIKELY_ALPHA 0.05       /* a likely straggler's sign test, and its APIs' signed-rank tests */
#define MAX_PROJECTED (1 << 16) /* steps looked ahead for the steps a likely straggler needs */

void report_ranks_result_free(ranks_result_t *res)
{
    if (res == NULL)
        return;
    for (size_t i = 0; i < res->nranks; i++)
        free(res->by_rank[i].apis);
    free(res->by_rank);
    free(res->order);
    free(res->steps);
    free(res->step_ns);
    free(res->wait_ns);
    free(res->busy_ns);
    free(res->start_ns);
    free(res->end_ns);
    free(res);
}

enum { API_OTHER, API_COLLECTIVE, API_BACKWARD };

/* Where a fast rank waits for a slow one: collectives, and (under DDP) backward's own time. */
static int api_class(const api_t *a)
{
    if (strncmp(a->name, "torch.distributed.", 18) == 0 || strstr(a->name, "c10d::") != NULL ||
        strncmp(a->name, "gloo:", 5) == 0 || strncmp(a->name, "nccl:", 5) == 0)
        return API_COLLECTIVE;
    if (strcmp(a->name, "torch.autograd.backward") == 0 || strcmp(a->name, "torch.Tensor.backward") == 0 ||
        strcmp(a->name, "torch.autograd.grad") == 0)
        return API_BACKWARD;
    return API_OTHER;
}

static int compare_doubles(const void *a, const void *b)
{
    double u = *(const double *)a, v = *(const double *)b;
    return (u > v) - (u < v);
}

/* The median of v[0..n) (reordered); NAN when n == 0. */
static double median(double *v, size_t n)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double mean(const double *v, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return n ? sum / (double)n : 0;
}

typedef struct test {
    double x, y, change, pct, p;
} test_t;

typedef struct signed_rank {
    double value; /* |x - y| */
    int positive;
} signed_rank_t;

static int compare_signed_ranks(const void *a, const void *b)
{
    double u = ((const signed_rank_t *)a)->value, v = ((const signed_rank_t *)b)->value;
    return (u > v) - (u < v);
}

/*
 * The two-sided p value of the Wilcoxon signed-rank test of the pairs (x[k], y[k]): --diff's rank
 * test, in its paired form. Why paired: the steps of a distributed run are the same steps on every
 * rank (DDP synchronises them), so what makes a step slow for all (a larger batch, the machine
 * busier) cancels in each step's difference, where Mann-Whitney would count it as noise. Zero
 * differences are dropped (scipy's zero_method="wilcox"); tied differences share their mean rank.
 * With at most EXACT_PAIRS differences left, the p value is exact: the distribution of the positive
 * ranks' sum over the 2^m equally likely signs, conditional on the ties (what scipy's
 * wilcoxon(method="exact") computes where there are no ties). Beyond, the normal approximation
 * with tie and continuity corrections (scipy's method="approx", correction=True). Why exact on
 * short runs: there the approximation overstates p several times over (13 steps all one way: exact
 * 2/2^13 = 0.00024, approximated 0.0017), so that a rank slowest in every step of a short run was
 * "not beyond noise" at --alpha 0.001. 1 when no pair differs.
 */
#define EXACT_PAIRS 25 /* 2^25 sign patterns: counted exactly in doubles */

double report_signed_rank_p(const double *x, const double *y, size_t n, int *oom)
{
    signed_rank_t *d = malloc((n + 1) * sizeof *d);
    if (d == NULL) {
        *oom = 1;
        return NAN;
    }
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (x[k] != y[k])
            d[m++] = (signed_rank_t){fabs(x[k] - y[k]), x[k] > y[k]};
    qsort(d, m, sizeof *d, compare_signed_ranks);
    /* Doubled ranks: a tie group's mean rank times 2, an integer (i + 1 + j), so that the exact
     * distribution below is over integers. */
    unsigned twice[EXACT_PAIRS];
    double w = 0, ties = 0; /* ranks and tie sizes are integers: exact sums in any order */
    for (size_t i = 0; i < m;) {
        size_t j = i, positive = 0;
        while (j < m && d[j].value == d[i].value)
            positive += (size_t)d[j++].positive;
        double t = (double)(j - i);
        w += ((double)i + 1 + (double)j) / 2 * (double)positive;
        ties += t * t * t - t;
        for (size_t k = i; k < j && m <= EXACT_PAIRS; k++)
            twice[k] = (unsigned)(i + 1 + j);
        i = j;
    }
    free(d);
    if (m == 0)
        return 1;
    if (m <= EXACT_PAIRS) {
        /* count[s]: how many of the 2^m sign patterns give the doubled ranks of the positive ones
         * the sum s; at most 2^25 each, exact in a double */
        double count[EXACT_PAIRS * (EXACT_PAIRS + 1) + 1] = {1};
        unsigned total = 0;
        for (size_t k = 0; k < m; k++) {
            total += twice[k];
            for (unsigned s = total; s >= twice[k]; s--)
                count[s] += count[s - twice[k]];
        }
        /* the distribution is symmetric about total / 2: two-sided p = twice the tail beyond w */
        unsigned w2 = (unsigned)(2 * w), far = w2 > total - w2 ? w2 : total - w2;
        double tail = 0;
        for (unsigned s = far; s <= total; s++)
            tail += count[s];
        double p = 2 * tail / ldexp(1, (int)m);
        return p > 1 ? 1 : p;
    }
    double nm = (double)m, mean = nm * (nm + 1) / 4, variance = nm * (nm + 1) * (2 * nm + 1) / 24 - ties / 48;
    if (!(variance > 0))
        return 1;
    double distance = fabs(w - mean) - 0.5;
    double p = erfc((distance > 0 ? distance : 0) / sqrt(variance) / sqrt(2.0));
    return p > 1 ? 1 : p;
}

/*
 * x[k]: one rank's value in step k; y[k]: the median of the others' in step k. The change is the
 * difference of the median steps (of the means where both medians are 0: a call made in a few steps
 * only), as --diff's. scratch: 2 n doubles.
 */
static int compare_steps(const double *x, const double *y, size_t n, double step_ns, double *scratch, test_t *t)
{
    int oom = 0;
    t->p = report_signed_rank_p(x, y, n, &oom);
    if (oom)
        return TW_ENOMEM;
    memcpy(scratch, x, n * sizeof *x);
    memcpy(scratch + n, y, n * sizeof *y);
    t->x = median(scratch, n);
    t->y = median(scratch + n, n);
    if (t->x == 0 && t->y == 0) {
        t->x = mean(x, n);
        t->y = mean(y, n);
    }
    t->change = t->x - t->y;
    t->pct = step_ns > 0 ? 100 * t->change / step_ns : 0;
    return 0;
}

/* Slower (by at least --min-change) with p < level. */
static int beyond_noise(const test_t *t, double level, const ranks_result_t *res)
{
    return t->p < level && t->change > 0 && t->pct >= res->min_change_pct;
}

/* log P(X = i) for X binomial(n, q) */
static double binomial_log_term(size_t i, size_t n, double log_q, double log_1q)
{
    return lgamma((double)n + 1) - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) + (double)i * log_q +
           (double)(n - i) * log_1q;
}

/*
 * P(X >= k) for X binomial(n, q), 0 < q < 1: the terms from k up when k is above the mean, else
 * 1 less the terms from k - 1 down; either way they shrink from the first, and the sum stops when
 * they no longer count (a few hundred terms at millions of steps, each from lgamma: no overflow).
 */
double report_binomial_tail(size_t k, size_t n, double q)
{
    if (k == 0)
        return 1;
    if (k > n)
        return 0;
    double sum = 0, log_q = log(q), log_1q = log1p(-q);
    int above = (double)k > (double)n * q;
    for (size_t i = above ? k : k - 1;; i += above ? 1 : (size_t)-1) {
        double term = exp(binomial_log_term(i, n, log_q, log_1q));
        sum += term;
        if (term <= sum * 1e-17 || i == (above ? n : 0)) /* shrinking: 0 once, 0 after */
            break;
    }
    double p = above ? sum : 1 - sum;
    return p < 0 ? 0 : p > 1 ? 1 : p;
}

/*
 * The number of steps, more than n, at which the signed-rank test of x against y passes level when
 * the n steps go on repeating in their order: how long the run would have had to be if its next
 * steps were like these; 0 when not within MAX_PROJECTED. One at a time up to 64 steps (the exact
 * test's steps are coarse there), then by doubling and halving (p falls with more steps of the same
 * kind; not strictly, so the number is "about"). 0 or TW_ENOMEM.
 */
static int steps_for_significance(const double *x, const double *y, size_t n, double level, size_t *steps)
{
    *steps = 0;
    if (n == 0)
        return 0;
    double *rx = malloc(2 * (size_t)MAX_PROJECTED * sizeof *rx);
    if (rx == NULL)
        return TW_ENOMEM;
    double *ry = rx + MAX_PROJECTED;
    for (size_t k = 0; k < MAX_PROJECTED; k++) {
        rx[k] = x[k % n];
        ry[k] = y[k % n];
    }
    int oom = 0;
    size_t below = n, above = 0; /* p >= level at below steps; p < level at above (0: none yet) */
    for (size_t m = n + 1; m <= MAX_PROJECTED && !oom; m = m < 64 ? m + 1 : 2 * m) {
        if (report_signed_rank_p(rx, ry, m, &oom) < level) {
            above = m;
            break;
        }
        below = m;
    }
    while (above > below + 1 && !oom) {
        size_t middle = below + (above - below) / 2;
        if (report_signed_rank_p(rx, ry, middle, &oom) < level)
            above = middle;
        else
            below = middle;
    }
    free(rx);
    if (oom)
        return TW_ENOMEM;
    *steps = above;
    return 0;
}

static int compare_apis(const void *a, const void *b)
{
    const ranks_api_t *u = a, *v = b;
    if (u->change_ns != v->change_ns)
        return u->change_ns < v->change_ns ? 1 : -1;
    return strcmp(u->api, v->api);
}

/* The APIs beyond noise at level on rank i (by_rank index) of the ranked processes procs. */
static int explain(const ranks_t *r, ranks_result_t *res, const size_t *procs, size_t i, const int *classes,
                   double level, double *work)
{
    size_t n = res->nsteps, R = res->nranks;
    double *x = work, *y = x + n, *others = y + n, *scratch = others + R;
    ranks_rank_t *rank = &res->by_rank[i];
    int waits = r->procs[procs[i]].ddp && r->procs[procs[i]].nodes;
    for (size_t a = 0; a < r->napis; a++) {
        if (classes[a] == API_COLLECTIVE || (classes[a] == API_BACKWARD && waits))
            continue;
        int seen = 0;
        for (size_t k = 0; k < n; k++) {
            int64_t step = res->first_step + (int64_t)k;
            size_t m = 0;
            x[k] = 0;
            for (size_t j = 0; j < R; j++) {
                const proc_t *p = &r->procs[procs[j]];
                double v = a < p->napis ? (double)series_get(&p->apis[a], step) : 0;
                if (j == i)
                    x[k] = v;
                else
                    others[m++] = v;
                seen |= v != 0;
            }
            y[k] = median(others, m);
        }
        if (!seen)
            continue;
        test_t t;
        if (compare_steps(x, y, n, res->step_time_ns, scratch, &t) != 0)
            return TW_ENOMEM;
        if (!beyond_noise(&t, level, res))
            continue;
        ranks_api_t *grown = realloc(rank->apis, (rank->napis + 1) * sizeof *grown);
        if (grown == NULL)
            return TW_ENOMEM;
        rank->apis = grown;
        rank->apis[rank->napis++] = (ranks_api_t){r->apis[a].name, t.x, t.y, t.change, t.pct, t.p};
    }
    if (rank->napis > 1)
        qsort(rank->apis, rank->napis, sizeof *rank->apis, compare_apis);
    if (rank->napis > APIS_SHOWN)
        rank->napis = APIS_SHOWN;
    return 0;
}

typedef struct ranked {
    int64_t rank, pid;
    size_t proc;
    uint64_t total_ns;
} ranked_t;

static int compare_ranked(const void *a, const void *b)
{
    const ranked_t *u = a, *v = b;
    if (u->rank != v->rank)
        return u->rank < v->rank ? -1 : 1;
    if (u->total_ns != v->total_ns) /* a rank's busiest process first: its main one */
        return u->total_ns > v->total_ns ? -1 : 1;
    return (u->pid > v->pid) - (u->pid < v->pid);
}

static int compare_order(const void *a, const void *b, void *result)
{
    const ranks_result_t *res = result;
    const ranks_rank_t *u = &res->by_rank[*(const size_t *)a];
    const ranks_rank_t *v = &res->by_rank[*(const size_t *)b];
    if (u->slowest_steps != v->slowest_steps)
        return u->slowest_steps > v->slowest_steps ? -1 : 1;
    if (u->slowest_extra_ns != v->slowest_extra_ns)
        return u->slowest_extra_ns > v->slowest_extra_ns ? -1 : 1;
    return (u->rank > v->rank) - (u->rank < v->rank);
}

/* The ranked processes (one per rank: its busiest) into *out, by rank; their count. */
static size_t pick_ranks(const ranks_t *r, ranked_t *out, size_t *other_processes)
{
    uint64_t *totals = calloc(r->nprocs + 1, sizeof *totals);
    if (totals == NULL)
        return SIZE_MAX;
    for (size_t i = 0; i < r->nprocs; i++)
        for (size_t a = 0; a < r->procs[i].napis; a++)
            for (size_t k = 0; k < r->procs[i].apis[a].len; k++)
                totals[i] += r->procs[i].apis[a].v[k];
    int any_rank = 0;
    size_t n = 0;
    for (size_t i = 0; i < r->nprocs; i++) {
        const input_proc_t *p = report_input_proc(r->in, r->procs[i].pid, NULL);
        out[n] = (ranked_t){p != NULL ? p->rank : -1, r->procs[i].pid, i, totals[i]};
        any_rank |= out[n].rank >= 0;
        n++;
    }
    free(totals);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) /* with ranks in the manifests, the processes without one are not ranks */
        if (!any_rank || out[i].rank >= 0)
            out[kept++] = out[i];
    if (!any_rank) /* no ranks at all: each process is one, by pid */
        for (size_t i = 0; i < kept; i++)
            out[i].rank = out[i].pid;
    qsort(out, kept, sizeof *out, compare_ranked);
    size_t unique = 0;
    for (size_t i = 0; i < kept; i++)
        if (unique == 0 || out[i].rank != out[unique - 1].rank)
            out[unique++] = out[i];
    if (!any_rank)
        for (size_t i = 0; i < unique; i++)
            out[i].rank = -1;
    *other_processes = r->nprocs - unique;
    return unique;
}

int report_ranks_compute(const ranks_t *r, ranks_result_t *res)
{
    const options_t *o = r->o;
    res->alpha = o->diff_alpha > 0 ? o->diff_alpha : DEFAULT_ALPHA;
    res->min_change_pct = o->diff_min_change_given ? o->diff_min_change : DEFAULT_MIN_CHANGE;
    res->likely_alpha = LIKELY_ALPHA;
    res->no_step_rows = r->no_step;
    res->clock_error_ns = -1;
    ranked_t *ranked = malloc((r->nprocs + 1) * sizeof *ranked);
    int *classes = malloc((r->napis + 1) * sizeof *classes);
    size_t *procs = malloc((r->nprocs + 1) * sizeof *procs), *rank_of = malloc((r->nprocs + 1) * sizeof *rank_of);
    double *work = NULL;
    int rc = TW_ENOMEM;
    size_t R = ranked == NULL ? SIZE_MAX : pick_ranks(r, ranked, &res->other_processes);
    if (classes == NULL || procs == NULL || rank_of == NULL || R == SIZE_MAX)
        goto out;
    rc = 0;
    res->nranks = R;
    for (size_t a = 0; a < r->napis; a++)
        classes[a] = api_class(&r->apis[a]);
    for (size_t i = 0; i < r->nprocs; i++)
        rank_of[i] = SIZE_MAX;
    int64_t lo = INT64_MAX, hi = -1;
    for (size_t i = 0; i < R; i++) {
        procs[i] = ranked[i].proc;
        rank_of[ranked[i].proc] = i;
    }
    for (size_t i = 0; i < R; i++) {
        const proc_t *p = &r->procs[procs[i]];
        if (p->max_step >= 0) {
            lo = p->min_step < lo ? p->min_step : lo;
            hi = p->max_step > hi ? p->max_step : hi;
        }
    }
    if (R == 0 || hi < 0)
        goto out; /* nothing to compare: the output says so */
    if (!o->has_steps && hi - lo >= 2) { /* warm-up, and a last step maybe cut off: as --diff */
        lo++;
        hi--;
        res->steps_cut = 1;
    }
    size_t n = (size_t)(hi - lo + 1);
    res->first_step = lo;
    res->last_step = hi;
    res->nsteps = n;
    rc = TW_ENOMEM;
    if (n > SIZE_MAX / 8 / (R + 1))
        goto out;
    res->by_rank = calloc(R, sizeof *res->by_rank);
    res->order = malloc(R * sizeof *res->order);
    res->steps = calloc(n, sizeof *res->steps);
    res->step_ns = calloc(n * R, sizeof *res->step_ns);
    res->wait_ns = calloc(n * R, sizeof *res->wait_ns);
    res->busy_ns = calloc(n * R, sizeof *res->busy_ns);
    res->start_ns = calloc(n * R, sizeof *res->start_ns);
    res->end_ns = calloc(n * R, sizeof *res->end_ns);
    work = malloc((6 * n + 2 * R + 8) * sizeof *work);
    if (res->by_rank == NULL || res->order == NULL || res->steps == NULL || res->step_ns == NULL ||
        res->wait_ns == NULL || res->busy_ns == NULL || res->start_ns == NULL || res->end_ns == NULL || work == NULL)
        goto out;
    rc = 0;
    for (size_t i = 0; i < R; i++) {
        ranks_rank_t *k = &res->by_rank[i];
        k->rank = ranked[i].rank;
        k->pid = ranked[i].pid;
        k->change_ns = k->change_pct = 0;
        k->p_value = k->sign_p = NAN;
        const input_proc_t *p = report_input_proc(r->in, k->pid, NULL);
        if (p != NULL && p->has_clock) {
            k->has_clock = 1;
            k->clock_offset_ns = p->clock_offset_ns;
            k->clock_error_ns = p->clock_error_ns;
            res->clocks++;
            if (p->clock_error_ns > res->clock_error_ns)
                res->clock_error_ns = p->clock_error_ns;
        }
    }
    /* step x rank: the step's time and the waiting in it */
    for (size_t j = 0; j < R; j++) {
        const proc_t *p = &r->procs[procs[j]];
        for (size_t a = 0; a < p->napis && a < r->napis; a++) { /* p->napis: room, maybe more */
            int waits = classes[a] == API_COLLECTIVE || (classes[a] == API_BACKWARD && p->ddp && p->nodes);
            for (size_t k = 0; k < n; k++) {
                uint64_t v = series_get(&p->apis[a], lo + (int64_t)k);
                res->step_ns[k * R + j] += v;
                if (waits)
                    res->wait_ns[k * R + j] += v;
            }
        }
    }
    for (size_t k = 0; k < n; k++)
        for (size_t j = 0; j < R; j++) {
            size_t at = k * R + j;
            res->busy_ns[at] = res->step_ns[at] - res->wait_ns[at];
            const proc_t *p = &r->procs[procs[j]];
            uint64_t first = series_get(&p->first_ns, lo + (int64_t)k), end = series_get(&p->end_ns, lo + (int64_t)k);
            if (first != 0) { /* on rank 0's clock */
                int64_t offset = res->by_rank[j].has_clock ? res->by_rank[j].clock_offset_ns : 0;
                res->start_ns[at] = (int64_t)first + offset;
                res->end_ns[at] = (int64_t)end + offset;
            }
        }
    /* per step: the median rank, the slowest, the skew */
    double *row = work, *medians = work + R + 1;
    for (size_t k = 0; k < n; k++) {
        size_t slowest = 0;
        for (size_t j = 0; j < R; j++) {
            row[j] = (double)res->busy_ns[k * R + j];
            if (res->busy_ns[k * R + j] > res->busy_ns[k * R + slowest])
                slowest = j;
        }
        ranks_step_t *s = &res->steps[k];
        s->step = lo + (int64_t)k;
        s->median_busy_ns = median(row, R);
        s->skew_ns = (double)res->busy_ns[k * R + slowest] - s->median_busy_ns;
        s->slowest = s->skew_ns > 0 ? slowest : SIZE_MAX; /* ranks tied at the top: no one is slowest */
        if (s->slowest != SIZE_MAX) {
            res->decided_steps++;
            res->by_rank[slowest].slowest_steps++;
            res->by_rank[slowest].slowest_extra_ns += s->skew_ns;
        }
        for (size_t j = 0; j < R; j++)
            row[j] = (double)res->step_ns[k * R + j];
        medians[k] = median(row, R);
    }
    res->step_time_ns = median(medians, n);
    /* per rank: its medians, and its busy time against the others' */
    double *x = work, *y = x + n, *others = y + n, *scratch = others + R;
    for (size_t i = 0; i < R; i++) {
        ranks_rank_t *rank = &res->by_rank[i];
        double *cols[3] = {x, y, others};
        const uint64_t *from[3] = {res->step_ns, res->wait_ns, res->busy_ns};
        double *to[3] = {&rank->step_ns, &rank->wait_ns, &rank->busy_ns};
        for (int m = 0; m < 3; m++) {
            (void)cols;
            for (size_t k = 0; k < n; k++)
                scratch[k] = (double)from[m][k * R + i];
            *to[m] = median(scratch, n);
        }
        if (R < 2)
            continue;
        for (size_t k = 0; k < n; k++) {
            size_t count = 0;
            for (size_t j = 0; j < R; j++)
                if (j != i)
                    others[count++] = (double)res->busy_ns[k * R + j];
            x[k] = (double)res->busy_ns[k * R + i];
            y[k] = median(others, count);
        }
        test_t t;
        if ((rc = compare_steps(x, y, n, res->step_time_ns, scratch, &t)) != 0)
            goto out;
        rank->change_ns = t.change;
        rank->change_pct = t.pct;
        rank->p_value = t.p;
        rank->straggler = beyond_noise(&t, res->alpha, res);
        /* Too few steps for the signed-rank test, or a level set low: slowest in more steps than
         * chance makes likely, by the exact sign test (each rank is a step's slowest with
         * probability 1/R when none is slower; times R for the R ranks looked at), and slower by
         * at least --min-change. */
        rank->sign_p = R * report_binomial_tail(rank->slowest_steps, res->decided_steps, 1.0 / (double)R);
        if (rank->sign_p > 1)
            rank->sign_p = 1;
        rank->likely = !rank->straggler && rank->sign_p < res->likely_alpha && beyond_noise(&t, INFINITY, res);
        if (rank->likely && (rc = steps_for_significance(x, y, n, res->alpha, &rank->more_steps)) != 0)
            goto out;
        if (rank->more_steps > 0)
            rank->more_steps -= n;
        if ((rank->straggler || rank->likely) &&
            (rc = explain(r, res, procs, i, classes, rank->straggler ? res->alpha : res->likely_alpha, work)) != 0)
            goto out;
    }
    for (size_t i = 0; i < R; i++)
        res->order[i] = i;
    qsort_r(res->order, R, sizeof *res->order, compare_order, res);
out:
    free(work);
    free(ranked);
    free(classes);
    free(procs);
    free(rank_of);
    return rc;
}

