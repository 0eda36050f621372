/* SPDX-License-Identifier: MIT */
/*
 * tw-report --findings: the rules over the pass's rows (see findings.h for the subtree counters).
 * Each rule adds to tallies keyed by the program's line (a site's text); settle turns the tallies
 * into findings with a share of the run's time, and findings_output.c prints them.
 *
 * The run's time: the span of the outermost calls of the busiest thread (the one that ran the
 * steps), first start to last end; its steps: the distinct steps of its rows.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "findings.h"
#include "groups.h"
#include "util.h"

#define FIND_DEPTH 64       /* calls deeper than this are counted as if at this depth */
#define FIND_THREADS 256    /* threads followed; the rows of more are still counted by API rules */
#define FIND_STEPS 65536    /* steps whose times are kept (drift) */
#define SMALL_CALL_NS 5000  /* "a small operation": a call with nothing inside under 5 us */
#define WHERE_TEXT_MAX 300

/* What the calls inside one call did (the rule counters of a subtree). */
typedef struct subtree {
    uint32_t rows, foreach_calls, fused_calls, inplace_calls, fills, conv_bias;
    uint64_t fill_ns;
} subtree_t;

/* The last call read at a depth of a thread: a convolution module's forward is kept for the next. */
typedef struct sibling {
    uint64_t parent_id;
    int conv;           /* a Conv*d.forward with a bias */
    char module[128];
} sibling_t;

typedef struct thread_state {
    int64_t pid;
    uint64_t tid;
    int used;
    uint64_t first_start, last_end; /* of its outermost calls */
    uint64_t outer_rows;
    subtree_t acc[FIND_DEPTH + 2]; /* acc[k]: rows at depth >= k since the last row at depth < k */
    sibling_t last[FIND_DEPTH + 1];
} thread_state_t;

typedef struct step_span {
    uint64_t start, end;
} step_span_t;

/* A rule's tally, keyed by a line's text (group_t: stats.calls a count, stats.total_ns time,
 * stats.self_ns a second number), over all steps and over the first step alone: settle takes the
 * first out when the run has steps enough (a first step holds one-off work: an import in an
 * optimizer's constructor took 1.7 s of a 1.9 s test). */
typedef struct tally {
    group_table_t all, first;
    int first_step_too; /* counted whatever the steps (a first compilation is one all the same) */
} tally_t;

typedef struct findings {
    report_sink_t sink;
    const options_t *o;
    const report_sites_t *sites;
    thread_state_t *threads;
    tally_t loader_wait, dataset_lines, syncs, gaps, small_ops, single_tensor_opt, fills, conv_bn, compiles;
    uint64_t leaf_calls[2], small_calls[2], small_ns[2]; /* all steps, the first step */
    int skip_first; /* settle: the first step (warm-up: imports, lazy inits) is left out of the rules */
    step_span_t *steps; /* of every thread's outermost calls: drift uses the busiest thread's only */
    int64_t steps_pid;
    uint64_t steps_tid;
    uint64_t max_step;
    int oom;
    int have_gpu; /* GPU records among the inputs */
    finding_t *found;
    size_t nfound;
    double run_ms;
    uint64_t nsteps;
} findings_t;

static int has_prefix(tw_str_t s, const char *prefix)
{
    size_t n = strlen(prefix);
    return s.len >= n && memcmp(s.ptr, prefix, n) == 0;
}

static int has_suffix(tw_str_t s, const char *suffix)
{
    size_t n = strlen(suffix);
    return s.len >= n && memcmp(s.ptr + s.len - n, suffix, n) == 0;
}

static int is(tw_str_t s, const char *name)
{
    return s.len == strlen(name) && memcmp(s.ptr, name, s.len) == 0;
}

/* The row's line as the findings name it: its site's text, or "(no site)". */
static const char *line_of(const findings_t *f, const tw_row_t *row)
{
    const char *text = row->site != 0 && f->sites != NULL ? report_site_text(f->sites, row->pid, row->site) : NULL;
    return text != NULL ? text : "(no site)";
}

static void tally_in(findings_t *f, group_table_t *t, const char *key, uint64_t count, uint64_t ns, uint64_t ns2)
{
    size_t len = strlen(key);
    group_t *g = report_group_get(t, key, len < WHERE_TEXT_MAX ? len : WHERE_TEXT_MAX);
    if (g == NULL) {
        f->oom = 1;
        return;
    }
    g->stats.calls += count;
    g->stats.total_ns += ns;
    g->stats.self_ns += ns2;
}

static void tally(findings_t *f, tally_t *t, const tw_row_t *row, const char *key, uint64_t count, uint64_t ns,
                  uint64_t ns2)
{
    tally_in(f, &t->all, key, count, ns, ns2);
    if (row->step == 0)
        tally_in(f, &t->first, key, count, ns, ns2);
}

/* The tally's groups less the first step's, when settle leaves the first step out. */
static void tally_settle(findings_t *f, tally_t *t)
{
    if (!f->skip_first || t->first_step_too)
        return;
    size_t n;
    group_t **first = report_group_list(&t->first, &n);
    for (size_t i = 0; first != NULL && i < n; i++) {
        group_t *g = report_group_get(&t->all, first[i]->key, first[i]->key_len);
        if (g == NULL)
            continue;
        g->stats.calls -= first[i]->stats.calls;
        g->stats.total_ns -= first[i]->stats.total_ns;
        g->stats.self_ns -= first[i]->stats.self_ns;
    }
    free(first);
}

static thread_state_t *thread_of(findings_t *f, int64_t pid, uint64_t tid)
{
    size_t h = (size_t)(report_pid_id_hash(pid, tid) % FIND_THREADS);
    for (size_t i = 0; i < FIND_THREADS; i++) {
        thread_state_t *t = &f->threads[(h + i) % FIND_THREADS];
        if (!t->used) {
            memset(t, 0, sizeof *t);
            t->used = 1, t->pid = pid, t->tid = tid;
            return t;
        }
        if (t->pid == pid && t->tid == tid)
            return t;
    }
    return NULL;
}

/* The host waits for the device at these calls (on a GPU); on a CPU they are counted all the same. */
static int is_sync(tw_str_t api)
{
    static const char *const names[] = {"torch.Tensor.item", "torch.Tensor.tolist", "torch.Tensor.cpu",
                                        "torch.Tensor.numpy", "torch.Tensor.__bool__", "torch.Tensor.__float__",
                                        "torch.Tensor.__int__", "torch.Tensor.__index__", "torch.Tensor.nonzero",
                                        "torch.nonzero", "torch.cuda.synchronize", "torch.Tensor.any",
                                        "torch.Tensor.all", "torch.masked_select", "torch.unique"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (is(api, names[i]))
            return 1;
    return 0;
}

/* Whether a convolution's arguments ("((f32[..]@cpu, f32[..]@cpu, f32[8]@cpu, ...), {...})") pass a
 * bias tensor: the third positional argument is a tensor, not None. */
static int conv_has_bias(tw_str_t args)
{
    if (args.len < 2 || args.ptr[0] != '(' || args.ptr[1] != '(')
        return 0;
    int depth = 0, index = 0;
    for (size_t i = 2; i < args.len; i++) {
        char c = args.ptr[i];
        if (c == '(' || c == '[' || c == '{')
            depth++;
        else if (c == ')' || c == ']' || c == '}') {
            if (depth-- == 0)
                return 0;
        } else if (c == ',' && depth == 0 && ++index == 2) {
            while (i + 1 < args.len && args.ptr[i + 1] == ' ')
                i++;
            return i + 4 < args.len && memcmp(args.ptr + i + 1, "None", 4) != 0 && args.ptr[i + 1] != ')';
        }
    }
    return 0;
}

/* Counts the row into its thread's subtree counters; returns the counters of the calls inside it. */
static subtree_t close_subtree(thread_state_t *t, const tw_row_t *row, size_t d)
{
    subtree_t inside = t->acc[d + 1];
    subtree_t own = {.rows = 1};
    if (has_prefix(row->api, "torch._foreach_"))
        own.foreach_calls = 1;
    if (has_prefix(row->api, "torch._fused_"))
        own.fused_calls = 1;
    if (has_prefix(row->api, "torch.Tensor.") && has_suffix(row->api, "_") && !has_suffix(row->api, "__"))
        own.inplace_calls = 1;
    if (is(row->api, "torch.Tensor.zero_") || is(row->api, "torch._foreach_zero_")) {
        own.fills = 1;
        own.fill_ns = row->cost_ns;
    }
    if ((is(row->api, "torch.conv1d") || is(row->api, "torch.conv2d") || is(row->api, "torch.conv3d")) &&
        conv_has_bias(row->args))
        own.conv_bias = 1;
    memset(&t->acc[d + 1], 0, sizeof t->acc[d + 1]);
    for (size_t k = d + 2; k <= FIND_DEPTH + 1 && t->acc[k].rows != 0; k++)
        memset(&t->acc[k], 0, sizeof t->acc[k]);
    for (size_t k = 0; k <= d; k++) {
        subtree_t *a = &t->acc[k];
        a->rows += own.rows + inside.rows;
        a->foreach_calls += own.foreach_calls + inside.foreach_calls;
        a->fused_calls += own.fused_calls + inside.fused_calls;
        a->inplace_calls += own.inplace_calls + inside.inplace_calls;
        a->fills += own.fills + inside.fills;
        a->fill_ns += own.fill_ns + inside.fill_ns;
        a->conv_bias += own.conv_bias + inside.conv_bias;
    }
    return inside;
}

static int is_module_forward(tw_str_t api, const char *family)
{
    /* torch.nn.Conv2d.forward: family "torch.nn.Conv", then a digit, "d.forward" */
    size_t n = strlen(family);
    return api.len == n + 10 && memcmp(api.ptr, family, n) == 0 && api.ptr[n] >= '1' && api.ptr[n] <= '3' &&
           memcmp(api.ptr + n + 1, "d.forward", 9) == 0;
}

static int findings_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    findings_t *f = (findings_t *)sink;
    (void)kept;
    if (row->kind != TW_FILE_CALLS)
        return 0;
    const char *line = line_of(f, row);
    if (row->fwd_call_id == 0 && is_sync(row->api)) {
        char key[WHERE_TEXT_MAX + 64];
        snprintf(key, sizeof key, "%s\t%.*s", line, (int)(row->api.len < 60 ? row->api.len : 60), row->api.ptr);
        tally(f, &f->syncs, row, key, 1, row->cost_ns, 0);
    }
    if (is(row->api, "torch.utils.data.dataloader._BaseDataLoaderIter.__next__"))
        tally(f, &f->loader_wait, row, line, 1, row->cost_ns, 0);
    if (is(row->api, "torch._dynamo (compilation)")) /* a range of _compile_watch.py's */
        tally(f, &f->compiles, row, line, 1, row->cost_ns, 0);
    const char *function = strchr(line, ' ');
    if (function != NULL && (strstr(function, "__getitem__") != NULL || strstr(function, "__getitems__") != NULL))
        tally(f, &f->dataset_lines, row, line, 1, row->self_ns, 0);

    thread_state_t *t = row->fwd_call_id == 0 ? thread_of(f, row->pid, row->tid) : NULL;
    if (t == NULL)
        return 0;
    size_t d = row->depth < FIND_DEPTH ? (size_t)row->depth : FIND_DEPTH;
    subtree_t inside = close_subtree(t, row, d);
    if (inside.rows == 0) {
        int first = row->step == 0;
        f->leaf_calls[0]++, f->leaf_calls[1] += first;
        if (row->cost_ns < SMALL_CALL_NS) {
            f->small_calls[0]++, f->small_calls[1] += first;
            f->small_ns[0] += row->cost_ns, f->small_ns[1] += first ? row->cost_ns : 0;
            tally(f, &f->small_ops, row, line, 1, row->cost_ns, 0);
        }
    }
    if (has_prefix(row->api, "torch.optim.") && has_suffix(row->api, ".step") && inside.foreach_calls == 0 &&
        inside.fused_calls == 0 && inside.inplace_calls >= 4) {
        char key[WHERE_TEXT_MAX + 80];
        snprintf(key, sizeof key, "%s\t%.*s", line, (int)(row->api.len < 70 ? row->api.len : 70), row->api.ptr);
        tally(f, &f->single_tensor_opt, row, key, 1, row->cost_ns, inside.inplace_calls);
    }
    /* set_to_none=True touches no gradient; False detaches and zeroes each (one by one, or with
     * torch._foreach_zero_, which is private and not recorded: its detach_/requires_grad_ are) */
    if (has_prefix(row->api, "torch.optim.") && has_suffix(row->api, ".zero_grad") &&
        (inside.fills > 0 || inside.inplace_calls > 0))
        tally(f, &f->fills, row, line, 1, row->cost_ns, inside.inplace_calls > inside.fills ? inside.inplace_calls
                                                                                        : inside.fills);
    /* a convolution with a bias, then a batch norm of the same parent: the norm cancels the bias */
    sibling_t *before = &t->last[d];
    /* (BatchNorm2d's forward is _BatchNorm's, a private class's: its F.batch_norm is the sibling seen) */
    int norm = is_module_forward(row->api, "torch.nn.BatchNorm") || is(row->api, "torch.nn.functional.batch_norm");
    if (norm && before->conv && before->parent_id == row->parent_id) {
        char key[WHERE_TEXT_MAX + 200];
        snprintf(key, sizeof key, "%s\t%s", line, before->module[0] ? before->module : "(the model)");
        tally(f, &f->conv_bn, row, key, 1, 0, 0);
    }
    /* the modules' order: a module forward (or a norm) is the last one seen at its depth; other calls
     * between (the norm's own input.dim(), its counter's add_) are not */
    if (norm || has_suffix(row->api, ".forward")) {
        before->parent_id = row->parent_id;
        before->conv = is_module_forward(row->api, "torch.nn.Conv") && inside.conv_bias > 0;
        snprintf(before->module, sizeof before->module, "%.*s",
                 (int)(row->module.len < 127 ? row->module.len : 127), row->module.ptr);
    }
    if (row->depth == 0 && row->step >= 0 && row->step < FIND_STEPS) {
        uint64_t s = (uint64_t)row->step, end = row->start_ns + row->cost_ns;
        if (f->steps == NULL || s > f->max_step) {
            uint64_t old = f->steps == NULL ? 0 : f->max_step + 1, grown = s + 1 > 2 * old ? s + 1 : 2 * old;
            step_span_t *more = realloc(f->steps, grown * sizeof *more);
            if (more == NULL) {
                f->oom = 1;
            } else {
                memset(more + old, 0, (grown - old) * sizeof *more);
                f->steps = more;
                f->max_step = grown - 1;
            }
        }
        if (f->steps != NULL && s <= f->max_step) {
            step_span_t *span = &f->steps[s];
            if (span->end == 0 || row->start_ns < span->start)
                span->start = row->start_ns;
            if (end > span->end)
                span->end = end;
        }
    }
    if (row->depth == 0) {
        uint64_t end = row->start_ns + row->cost_ns;
        if (t->outer_rows == 0 || row->start_ns < t->first_start)
            t->first_start = row->start_ns;
        if (end > t->last_end) {
            /* the gap before this call: the program's Python between two calls into torch */
            if (t->outer_rows > 0 && row->start_ns > t->last_end) {
                char key[WHERE_TEXT_MAX + 48];
                snprintf(key, sizeof key, "%s\t%" PRId64 ":%" PRIu64, line, t->pid, t->tid);
                tally(f, &f->gaps, row, key, 1, row->start_ns - t->last_end, 0);
            }
            t->last_end = end;
        }
        t->outer_rows++;
    }
    return 0;
}

/* ---- settle: tallies into findings ---------------------------------------------------------------- */

static int by_time_desc(const void *a, const void *b)
{
    const group_t *x = *(group_t *const *)a, *y = *(group_t *const *)b;
    if (x->stats.total_ns != y->stats.total_ns)
        return x->stats.total_ns < y->stats.total_ns ? 1 : -1;
    return strcmp(x->key, y->key);
}

/* The groups of a tally, most time first (NULL when empty or out of memory). */
static group_t **ranked_groups(findings_t *f, tally_t *t, size_t *n, uint64_t *total_ns, uint64_t *count)
{
    group_t **list = report_group_list(&t->all, n);
    *total_ns = *count = 0;
    if (list == NULL) {
        if (t->all.count > 0)
            f->oom = 1;
        *n = 0;
        return NULL;
    }
    size_t kept = 0; /* (a line of the first step alone is empty once that step is left out) */
    for (size_t i = 0; i < *n; i++)
        if (list[i]->stats.calls > 0)
            list[kept++] = list[i];
    *n = kept;
    if (*n == 0) {
        free(list);
        return NULL;
    }
    qsort(list, *n, sizeof *list, by_time_desc);
    for (size_t i = 0; i < *n; i++) {
        *total_ns += list[i]->stats.total_ns;
        *count += list[i]->stats.calls;
    }
    return list;
}

static const char *severity_of(double share, double high, double medium)
{
    return share >= high ? "high" : share >= medium ? "medium" : "low";
}

static finding_t *add_finding(findings_t *f, const char *kind, double share)
{
    finding_t *more = realloc(f->found, (f->nfound + 1) * sizeof *more);
    if (more == NULL) {
        f->oom = 1;
        return NULL;
    }
    f->found = more;
    finding_t *x = &f->found[f->nfound++];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->share = share;
    x->severity = severity_of(share, 0.20, 0.05);
    return x;
}

/* where: the first part (before a tab) of the groups' keys, most costly first, each once. */
static void add_where(finding_t *x, group_t **list, size_t n)
{
    for (size_t i = 0; i < n && x->nwhere < FINDING_WHERE_MAX; i++) {
        size_t len = strcspn(list[i]->key, "\t");
        int seen = 0;
        for (size_t k = 0; k < x->nwhere; k++)
            seen |= strlen(x->where[k]) == len && memcmp(x->where[k], list[i]->key, len) == 0;
        if (seen || (len == 9 && memcmp(list[i]->key, "(no site)", 9) == 0))
            continue;
        char *w = malloc(len + 1);
        if (w == NULL)
            return;
        memcpy(w, list[i]->key, len);
        w[len] = '\0';
        x->where[x->nwhere++] = w;
    }
}

static void evidence(finding_t *x, const char *key, double value)
{
    if (x->nevidence < FINDING_EVIDENCE_MAX) {
        x->evidence_keys[x->nevidence] = key;
        x->evidence[x->nevidence++] = value;
    }
}


static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

/* The busiest thread (most time in outermost calls' span): the one that ran the steps. */
static const thread_state_t *steps_thread(const findings_t *f)
{
    const thread_state_t *best = NULL;
    for (size_t i = 0; i < FIND_THREADS; i++) {
        const thread_state_t *t = &f->threads[i];
        if (t->used && t->outer_rows > 0 &&
            (best == NULL || t->last_end - t->first_start > best->last_end - best->first_start))
            best = t;
    }
    return best;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double median_of(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, compare_u64);
    return n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2;
}

/* Step time drifting: the last quarter of the steps slower than the first beyond their spread. */
static void drift_rule(findings_t *f, uint64_t run_ns)
{
    size_t n = 0;
    uint64_t *times = f->steps != NULL ? malloc((f->max_step + 1) * sizeof *times) : NULL;
    for (uint64_t s = 0; times != NULL && s <= f->max_step; s++)
        if (f->steps[s].end > f->steps[s].start)
            times[n++] = f->steps[s].end - f->steps[s].start;
    size_t q = n / 4;
    if (n < 12 || q < 3) {
        free(times);
        return;
    }
    uint64_t *first = malloc(q * sizeof *first), *last = malloc(q * sizeof *last);
    if (first != NULL && last != NULL) {
        memcpy(first, times + 1, q * sizeof *first); /* the first step (warm-up) left out */
        memcpy(last, times + n - q, q * sizeof *last);
        double a = median_of(first, q), b = median_of(last, q);
        /* every last-quarter step slower than the slowest of the first quarter (a rank test's
         * extreme: p = 1/C(2q, q) <= 0.001 from q = 6 by chance alone), and by half in the median */
        int all_slower = 1;
        for (size_t i = 0; i < q; i++)
            all_slower &= last[i] > first[q - 1];
        if (b > 1.5 * a && all_slower) {
            double extra = (b - a) * (double)q;
            finding_t *x = add_finding(f, "step_time_drift", run_ns ? extra / (double)run_ns : 0);
            if (x != NULL) {
                evidence(x, "first_steps_median_ms", a / 1e6);
                evidence(x, "last_steps_median_ms", b / 1e6);
                evidence(x, "steps", (double)n);
                snprintf(x->message, sizeof x->message,
                         "Steps get slower over the run: the last %zu steps take %.2f ms each (median), the first "
                         "%zu %.2f ms (+%.0f%%).", q, b / 1e6, q, a / 1e6, 100 * (b / a - 1));
                snprintf(x->fix, sizeof x->fix,
                         "Look for what grows with the run: tensors kept across steps (a loss appended to a list "
                         "without .item() or .detach()), caches, hooks added each step; compare an early and a "
                         "late step with tw-report --tree.");
            }
        }
    }
    free(first);
    free(last);
    free(times);
}

static int severity_rank(const char *severity)
{
    return strcmp(severity, "high") == 0 ? 0 : strcmp(severity, "medium") == 0 ? 1 : 2;
}

static int by_severity_then_share(const void *a, const void *b)
{
    const finding_t *x = a, *y = b;
    int rx = severity_rank(x->severity), ry = severity_rank(y->severity);
    if (rx != ry)
        return rx - ry;
    if (x->share != y->share)
        return x->share < y->share ? 1 : -1;
    return strcmp(x->kind, y->kind);
}

static int findings_settle(report_sink_t *sink)
{
    findings_t *f = (findings_t *)sink;
    const thread_state_t *main_thread = steps_thread(f);
    uint64_t run_ns = main_thread != NULL ? main_thread->last_end - main_thread->first_start : 0;
    uint64_t steps = 0;
    for (uint64_t s = 0; f->steps != NULL && s <= f->max_step; s++)
        steps += f->steps[s].end > 0;
    f->nsteps = steps;
    /* the first step out of the rules' times and of the run's, from three steps on */
    if (steps >= 3 && f->steps[0].end > f->steps[0].start && f->steps[0].end - f->steps[0].start < run_ns) {
        f->skip_first = 1;
        run_ns -= f->steps[0].end - f->steps[0].start;
        steps--;
        f->leaf_calls[0] -= f->leaf_calls[1];
        f->small_calls[0] -= f->small_calls[1];
        f->small_ns[0] -= f->small_ns[1];
    }
    f->run_ms = ms(run_ns);
    tally_t *tallies[] = {&f->loader_wait, &f->dataset_lines, &f->syncs, &f->gaps, &f->small_ops,
                          &f->single_tensor_opt, &f->fills, &f->conv_bn, &f->compiles};
    for (size_t i = 0; i < sizeof tallies / sizeof *tallies; i++)
        tally_settle(f, tallies[i]);
    double per_step = steps > 0 ? (double)steps : 1;
    size_t n;
    uint64_t total, count;
    group_t **list;

    /* 1. input-bound: the wait for the DataLoader's next batch */
    if ((list = ranked_groups(f, &f->loader_wait, &n, &total, &count)) != NULL && run_ns > 0) {
        double share = (double)total / (double)run_ns;
        if (share >= 0.10) {
            finding_t *x = add_finding(f, "input_bound", share);
            if (x != NULL) {
                size_t nd;
                uint64_t dataset_ns, dataset_calls;
                group_t **lines = ranked_groups(f, &f->dataset_lines, &nd, &dataset_ns, &dataset_calls);
                add_where(x, lines, nd);
                add_where(x, list, n);
                free(lines);
                evidence(x, "wait_ms_per_step", ms(total) / per_step);
                evidence(x, "batches", (double)count);
                evidence(x, "dataset_ms", ms(dataset_ns));
                snprintf(x->message, sizeof x->message,
                         "The training loop waits for its data: %.1f%% of the run (%.2f ms a step) is spent in the "
                         "DataLoader's next(), building batches on the main process.", 100 * share,
                         ms(total) / per_step);
                snprintf(x->fix, sizeof x->fix,
                         "Load in worker processes: DataLoader(..., num_workers=4, pin_memory=True, "
                         "persistent_workers=True), and make the Dataset's __getitem__ cheap (vectorised tensor "
                         "ops, data prepared once).");
            }
        }
    }
    free(list);

    /* 2. host-device syncs */
    if ((list = ranked_groups(f, &f->syncs, &n, &total, &count)) != NULL && count > 0) {
        double share = run_ns ? (double)total / (double)run_ns : 0;
        finding_t *x = add_finding(f, "host_sync", share);
        if (x != NULL) {
            /* on a CPU they cost little; on a GPU each waits for every kernel queued before it */
            x->severity = share >= 0.05 ? severity_of(share, 0.20, 0.05) : "low";
            add_where(x, list, n);
            evidence(x, "syncs_per_step", (double)count / per_step);
            evidence(x, "ms_per_step", ms(total) / per_step);
            const char *api = strchr(list[0]->key, '\t');
            snprintf(x->message, sizeof x->message,
                     "%.1f calls a step copy a result to the host (%s at %.*s first): on a GPU each waits for "
                     "all the work queued before it.", (double)count / per_step, api != NULL ? api + 1 : "?",
                     (int)strcspn(list[0]->key, "\t"), list[0]->key);
            snprintf(x->fix, sizeof x->fix,
                     "Keep values on the device: accumulate metrics as tensors (total += loss.detach()) and call "
                     ".item()/.tolist()/.cpu() once every N steps or at the end; avoid `if tensor:` and "
                     "nonzero() in the step.");
        }
    }
    free(list);

    /* 3. Python outside torch: the gaps between the steps' thread's calls into torch */
    if ((list = ranked_groups(f, &f->gaps, &n, &total, &count)) != NULL && run_ns > 0 && main_thread != NULL) {
        uint64_t own = 0; /* the steps' thread's only (its keys end with its pid:tid) */
        char suffix[48];
        snprintf(suffix, sizeof suffix, "\t%" PRId64 ":%" PRIu64, main_thread->pid, main_thread->tid);
        group_t **mine = malloc(n * sizeof *mine + 1);
        size_t m = 0;
        for (size_t i = 0; mine != NULL && i < n; i++)
            if (report_has_suffix(list[i]->key, suffix)) {
                own += list[i]->stats.total_ns;
                mine[m++] = list[i];
            }
        double share = (double)own / (double)run_ns;
        /* every eager program spends some of its time in Python between operations: a finding from
         * 15% of the run (medium), 30% (high) */
        if (share >= 0.15) {
            finding_t *x = add_finding(f, "python_outside_torch", share);
            if (x != NULL) {
                x->severity = severity_of(share, 0.30, 0.15);
                add_where(x, mine, m);
                evidence(x, "ms_per_step", ms(own) / per_step);
                snprintf(x->message, sizeof x->message,
                         "%.1f%% of the run is Python between calls into torch (%.2f ms a step), most of it "
                         "before %.*s.", 100 * share, ms(own) / per_step, (int)strcspn(mine[0]->key, "\t"),
                         mine[0]->key);
                snprintf(x->fix, sizeof x->fix,
                         "Replace Python loops over tensor elements by tensor operations (a metric as "
                         "(pred == y).float().mean()), move per-step bookkeeping out of the loop, or run it "
                         "every N steps.");
            }
        }
        free(mine);
    }
    free(list);

    /* 4. many small operations */
    if (f->leaf_calls[0] > 0 && run_ns > 0 && (double)f->small_calls[0] / per_step >= 200) {
        double share = (double)f->small_ns[0] / (double)run_ns;
        if ((list = ranked_groups(f, &f->small_ops, &n, &total, &count)) != NULL && share >= 0.05) {
            finding_t *x = add_finding(f, "many_small_ops", share);
            if (x != NULL) {
                x->severity = severity_of(share, 0.50, 0.25);
                add_where(x, list, n);
                evidence(x, "ops_per_step", (double)f->leaf_calls[0] / per_step);
                evidence(x, "small_ops_per_step", (double)f->small_calls[0] / per_step);
                evidence(x, "small_op_share", (double)f->small_calls[0] / (double)f->leaf_calls[0]);
                snprintf(x->message, sizeof x->message,
                         "%.0f operations a step take under 5 us each (%.1f%% of the run): the step is bound by "
                         "dispatch and launch overhead, not by compute.", (double)f->small_calls[0] / per_step,
                         100 * share);
                snprintf(x->fix, sizeof x->fix,
                         "Fuse them: torch.compile(model), a fused or foreach optimizer (Adam(fused=True)), "
                         "CUDA graphs on a GPU; batch the small per-element work.");
            }
        }
        free(list);
    }

    /* 5. an optimizer on its single-tensor path */
    if ((list = ranked_groups(f, &f->single_tensor_opt, &n, &total, &count)) != NULL && run_ns > 0) {
        double share = (double)total / (double)run_ns;
        finding_t *x = add_finding(f, "optimizer_single_tensor", share);
        if (x != NULL) {
            /* foreach is torch's default on a GPU only: on a CPU the single-tensor path is the default */
            x->severity = f->have_gpu ? severity_of(share, 0.30, 0.03) : "low";
            add_where(x, list, n);
            const char *api = strchr(list[0]->key, '\t');
            evidence(x, "ms_per_step", ms(total) / per_step);
            evidence(x, "tensor_ops_per_step", (double)list[0]->stats.self_ns / (double)list[0]->stats.calls);
            snprintf(x->message, sizeof x->message,
                     "%s updates its parameters one tensor at a time (%.0f in-place operations a step, %.1f%% of "
                     "the run).", api != NULL ? api + 1 : "The optimizer",
                     (double)list[0]->stats.self_ns / (double)list[0]->stats.calls, 100 * share);
            snprintf(x->fix, sizeof x->fix,
                     "Use its multi-tensor path: foreach=True (the default when foreach=False is not given), or "
                     "fused=True where the optimizer has it (Adam, AdamW, SGD).");
        }
    }
    free(list);

    /* 6. zero_grad(set_to_none=False) */
    if ((list = ranked_groups(f, &f->fills, &n, &total, &count)) != NULL) {
        double share = run_ns ? (double)total / (double)run_ns : 0;
        finding_t *x = add_finding(f, "zero_grad_fills", share);
        if (x != NULL) {
            x->severity = severity_of(share, 0.10, 0.01);
            if (strcmp(x->severity, "low") == 0)
                x->severity = "medium"; /* a memset of every gradient, every step: always worth the one word */
            add_where(x, list, n);
            uint64_t fills = 0;
            for (size_t i = 0; i < n; i++)
                fills += list[i]->stats.self_ns;
            evidence(x, "gradients_per_step", (double)fills / per_step);
            evidence(x, "ms_per_step", ms(total) / per_step);
            snprintf(x->message, sizeof x->message,
                     "zero_grad() fills %.0f gradients a step with zeros instead of dropping them: "
                     "set_to_none=False.", (double)fills / per_step);
            snprintf(x->fix, sizeof x->fix,
                     "optimizer.zero_grad(set_to_none=True) (the default): no memset, and backward writes the "
                     "gradients instead of adding to zeros.");
        }
    }
    free(list);

    /* 7. a convolution's bias before a batch norm */
    if ((list = ranked_groups(f, &f->conv_bn, &n, &total, &count)) != NULL) {
        finding_t *x = add_finding(f, "conv_bias_before_batchnorm", -1);
        if (x != NULL) {
            x->severity = "low";
            add_where(x, list, n);
            for (size_t i = 0; i < n && x->nwhere < FINDING_WHERE_MAX; i++) {
                const char *module = strchr(list[i]->key, '\t');
                size_t len = module != NULL ? strlen(module + 1) + 8 : 0;
                if (module != NULL && (x->where[x->nwhere] = malloc(len)) != NULL)
                    snprintf(x->where[x->nwhere++], len, "module %s", module + 1);
            }
            evidence(x, "convolutions", (double)n);
            snprintf(x->message, sizeof x->message,
                     "%zu convolution(s) with a bias feed a BatchNorm, which subtracts the mean: the bias is "
                     "computed, stored and updated for nothing.", n);
            snprintf(x->fix, sizeof x->fix, "Build those convolutions with bias=False (nn.Conv2d(..., bias=False)).");
        }
    }
    free(list);

    /* 8. recompilation */
    if ((list = ranked_groups(f, &f->compiles, &n, &total, &count)) != NULL && count > n) {
        double share = run_ns ? (double)total / (double)run_ns : 0;
        finding_t *x = add_finding(f, "recompilation", share);
        if (x != NULL) {
            if (count - n >= 2 && strcmp(x->severity, "low") == 0)
                x->severity = "medium";
            add_where(x, list, n);
            evidence(x, "compilations", (double)count);
            evidence(x, "recompilations", (double)(count - n));
            evidence(x, "compile_ms", ms(total));
            snprintf(x->message, sizeof x->message,
                     "torch.compile compiled again %" PRIu64 " time(s) during the run (%.0f ms compiling in all), "
                     "first at %.*s.", count - n, ms(total), (int)strcspn(list[0]->key, "\t"), list[0]->key);
            snprintf(x->fix, sizeof x->fix,
                     "Keep the inputs' shapes and types stable, or compile for varying shapes: "
                     "torch.compile(fn, dynamic=True) or torch._dynamo.mark_dynamic(x, 0); TORCH_LOGS=recompiles "
                     "says why each recompilation happened.");
        }
    }
    free(list);

    drift_rule(f, run_ns);
    qsort(f->found, f->nfound, sizeof *f->found, by_severity_then_share);
    return f->oom ? TW_ENOMEM : 0;
}

static void findings_free(report_sink_t *sink)
{
    findings_t *f = (findings_t *)sink;
    tally_t *tallies[] = {&f->loader_wait, &f->dataset_lines, &f->syncs, &f->gaps, &f->small_ops,
                          &f->single_tensor_opt, &f->fills, &f->conv_bn, &f->compiles};
    for (size_t i = 0; i < sizeof tallies / sizeof *tallies; i++) {
        report_group_table_free(&tallies[i]->all);
        report_group_table_free(&tallies[i]->first);
    }
    for (size_t i = 0; i < f->nfound; i++)
        for (size_t k = 0; k < f->found[i].nwhere; k++)
            free(f->found[i].where[k]);
    free(f->found);
    free(f->threads);
    free(f->steps);
    free(f);
}

static int findings_print(report_sink_t *sink, const report_pass_t *pass, FILE *out, FILE *err)
{
    findings_t *f = (findings_t *)sink;
    (void)pass;
    (void)err;
    if (f->o->findings) /* (for --html alone, the page shows them) */
        report_findings_print(f->o, f->found, f->nfound, f->run_ms, f->nsteps, out);
    return 0;
}

const finding_t *report_findings_result(const report_sink_t *sink, size_t *count)
{
    const findings_t *f = (const findings_t *)sink;
    *count = f->nfound;
    return f->found;
}

static const report_sink_ops_t findings_ops = {
    .name = "findings",
    .row = findings_row,
    .settle = findings_settle,
    .print = findings_print,
    .free = findings_free,
};

int report_findings_new(const options_t *o, const report_sites_t *sites, int have_gpu_files, report_sink_t **sink)
{
    findings_t *f = calloc(1, sizeof *f);
    if (f == NULL || (f->threads = calloc(FIND_THREADS, sizeof *f->threads)) == NULL) {
        free(f);
        return TW_ENOMEM;
    }
    f->sink = (report_sink_t){&findings_ops, SINK_ROWS_KEPT};
    f->o = o;
    f->sites = sites;
    f->have_gpu = have_gpu_files;
    f->compiles.first_step_too = 1;
    f->conv_bn.first_step_too = 1;
    *sink = &f->sink;
    return 0;
}
