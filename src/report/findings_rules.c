/* SPDX-License-Identifier: MIT */
/*
 * tw-report --findings' rules (findings.h): at settle, each rule turns its tallies (findings.c) into a
 * finding with its share of the run, severity, lines, evidence, message and fix.
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "findings_internal.h"
#include "ranks.h"
#include "util.h"

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

/* Memory growing step over step (config memory): the steps after the first keep what they allocate. */
static void memory_growth_rule(findings_t *f)
{
    if (!f->have_memory || f->steps == NULL)
        return;
    size_t steps = 0, growing = 0;
    int64_t kept = 0;
    for (uint64_t s = 1; s <= f->max_step; s++) { /* the first holds one-off allocations (parameters) */
        if (f->steps[s].end == 0)
            continue;
        steps++;
        growing += f->steps[s].net_bytes > 0;
        kept += f->steps[s].net_bytes;
    }
    /* nearly every step keeps memory, 1 MiB in all at least */
    if (steps < 4 || growing * 10 < steps * 9 || kept < (1 << 20))
        return;
    size_t n;
    uint64_t total, count;
    group_t **list = ranked_groups(f, &f->kept_bytes, &n, &total, &count);
    finding_t *x = add_finding(f, "memory_growth", -1);
    if (x != NULL) {
        x->severity = "medium";
        add_where(x, list, n);
        evidence(x, "kept_mib_per_step", (double)kept / (double)steps / 1048576.0);
        evidence(x, "kept_mib", (double)kept / 1048576.0);
        evidence(x, "growing_steps", (double)growing);
        evidence(x, "steps", (double)steps);
        snprintf(x->message, sizeof x->message,
                 "Memory grows step over step: %zu of %zu steps keep what they allocate, %.2f MiB a step "
                 "(%.1f MiB in all), until the process runs out.", growing, steps,
                 (double)kept / (double)steps / 1048576.0, (double)kept / 1048576.0);
        snprintf(x->fix, sizeof x->fix,
                 "Find what outlives the step: a loss or output kept in a list with its graph (append "
                 "loss.item() or loss.detach()), tensors cached on self, hooks that store activations.");
    }
    free(list);
}

/* The medians over the steps after the first of their gaps and of their times; -1 under 3 steps. */
static int typical_step_ns(const findings_t *f, double *gap_ns, double *loader_ns, double *step_ns)
{
    size_t n = 0;
    uint64_t *gaps = f->steps != NULL ? malloc((f->max_step + 1) * sizeof *gaps) : NULL;
    uint64_t *loads = f->steps != NULL ? malloc((f->max_step + 1) * sizeof *loads) : NULL;
    uint64_t *spans = f->steps != NULL ? malloc((f->max_step + 1) * sizeof *spans) : NULL;
    for (uint64_t s = 1; gaps != NULL && loads != NULL && spans != NULL && s <= f->max_step; s++)
        if (f->steps[s].end > f->steps[s].start) {
            gaps[n] = f->steps[s].gap_ns;
            loads[n] = f->steps[s].loader_ns;
            /* (the gap before a step's first call lies before its span: counted in, which counts the
             * gaps inside twice, a share on the low side) */
            spans[n++] = f->steps[s].end - f->steps[s].start + f->steps[s].gap_ns;
        }
    int rc = n >= 3 ? 0 : -1;
    if (rc == 0) {
        *gap_ns = median_of(gaps, n);
        *loader_ns = median_of(loads, n);
        *step_ns = median_of(spans, n);
    }
    free(gaps);
    free(loads);
    free(spans);
    return rc;
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

int findings_settle(report_sink_t *sink)
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
    f->nsteps = steps;
    tally_t *tallies[] = {&f->loader_wait, &f->dataset_lines, &f->syncs, &f->gaps, &f->small_ops,
                          &f->single_tensor_opt, &f->fills, &f->conv_bn, &f->compiles, &f->kept_bytes};
    for (size_t i = 0; i < sizeof tallies / sizeof *tallies; i++)
        findings_tally_settle(f, tallies[i]);
    double per_step = steps > 0 ? (double)steps : 1;
    size_t n;
    uint64_t total, count;
    group_t **list;

    /* A typical step's gap and wait (the medians over the steps after the first), for rules 1 and 3 */
    double typical_gap, typical_wait, typical_step;
    int typical = typical_step_ns(f, &typical_gap, &typical_wait, &typical_step) == 0 && typical_step > 0;

    /* 1. input-bound: the wait for the DataLoader's next batch */
    if ((list = ranked_groups(f, &f->loader_wait, &n, &total, &count)) != NULL && run_ns > 0) {
        double share = (double)total / (double)run_ns, wait_ms = ms(total) / per_step;
        /* A typical step's wait (the medians over the steps after the first): the first batch builds the
         * iterator and its sampler, and a garbage collection landing in one collate is no property of the
         * loader's */
        if (typical) {
            share = typical_wait / typical_step;
            wait_ms = typical_wait / 1e6;
        }
        if (share >= 0.10) {
            finding_t *x = add_finding(f, "input_bound", share);
            if (x != NULL) {
                /* a DataLoader's own per-batch work (indexing, collate) is a tenth of a small model's step
                 * on one thread: medium from 15%, high from 30% */
                x->severity = severity_of(share, 0.30, 0.15);
                size_t nd;
                uint64_t dataset_ns, dataset_calls;
                group_t **lines = ranked_groups(f, &f->dataset_lines, &nd, &dataset_ns, &dataset_calls);
                add_where(x, lines, nd);
                add_where(x, list, n);
                free(lines);
                evidence(x, "wait_ms_per_step", wait_ms);
                evidence(x, "batches", (double)count);
                evidence(x, "dataset_ms", ms(dataset_ns));
                snprintf(x->message, sizeof x->message,
                         "The training loop waits for its data: %.1f%% of a step (%.2f ms) is spent in the "
                         "DataLoader's next(), building batches on the main process.", 100 * share, wait_ms);
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
            /* "3 calls in 30 steps" where there is less than one a step ("0.1 calls a step" read oddly) */
            char rate[64];
            double per = (double)count / per_step;
            if (per >= 1)
                snprintf(rate, sizeof rate, "%.1f calls a step", per);
            else
                snprintf(rate, sizeof rate, "%" PRIu64 " call%s in %.0f steps", (uint64_t)count, count == 1 ? "" : "s",
                         per_step);
            snprintf(x->message, sizeof x->message,
                     "%s %s a result to the host (%s at %.*s first): on a GPU each waits for all the work "
                     "queued before it.", rate, count == 1 ? "copies" : "copy", api != NULL ? api + 1 : "?",
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
        double share = (double)own / (double)run_ns, gap_ms = ms(own) / per_step;
        /* A typical step's (the medians over the steps after the first): a garbage collection or a
         * one-off pause in a few steps is not the program's Python of every step. */
        if (typical) {
            share = typical_gap / typical_step;
            gap_ms = typical_gap / 1e6;
        }
        /* every eager program spends some of its time in Python between operations: a finding from
         * 15% of the step (medium), 30% (high), and 1 ms a step (a tiny step's 50 us is no lead) */
        if (m > 0 && share >= 0.15 && gap_ms >= 1.0) {
            finding_t *x = add_finding(f, "python_outside_torch", share);
            if (x != NULL) {
                x->severity = severity_of(share, 0.30, 0.15);
                add_where(x, mine, m);
                evidence(x, "ms_per_step", gap_ms);
                snprintf(x->message, sizeof x->message,
                         "%.1f%% of a step is Python between calls into torch (%.2f ms a step), most of it "
                         "before %.*s.", 100 * share, gap_ms, (int)strcspn(mine[0]->key, "\t"), mine[0]->key);
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
                     "Use its multi-tensor path: foreach=True (torch's default for CUDA tensors only), or "
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
    memory_growth_rule(f);
    qsort(f->found, f->nfound, sizeof *f->found, by_severity_then_share);
    return f->oom ? TW_ENOMEM : 0;
}


void findings_add_stragglers(findings_t *f)
{
    if (f->ranks == NULL || f->ranks_done)
        return;
    f->ranks_done = 1;
    const ranks_result_t *r = report_ranks_result(f->ranks);
    for (size_t k = 0; r != NULL && k < r->nranks; k++) {
        const ranks_rank_t *rank = &r->by_rank[r->order[k]];
        if (!rank->straggler && !rank->likely)
            continue;
        /* its extra busy time a step, of the median rank's step: what every rank waits for */
        double share = r->step_time_ns > 0 ? rank->change_ns / r->step_time_ns : 0;
        finding_t *x = add_finding(f, "straggler", share);
        if (x == NULL)
            return;
        if (!rank->straggler) /* slowest more often than chance, too few steps for the test */
            x->severity = "low";
        char where[64];
        snprintf(where, sizeof where, "rank %" PRId64, rank->rank >= 0 ? rank->rank : rank->pid);
        if ((x->where[0] = malloc(strlen(where) + 1)) != NULL) {
            strcpy(x->where[0], where);
            x->nwhere = 1;
        }
        for (size_t a = 0; a < rank->napis && x->nwhere < FINDING_WHERE_MAX; a++)
            if ((x->where[x->nwhere] = malloc(strlen(rank->apis[a].api) + 1)) != NULL)
                strcpy(x->where[x->nwhere++], rank->apis[a].api);
        evidence(x, "slowest_steps", (double)rank->slowest_steps);
        evidence(x, "steps", (double)r->nsteps);
        evidence(x, "extra_ms_per_step", rank->change_ns / 1e6);
        evidence(x, "p_value", rank->p_value);
        if (!rank->straggler)
            evidence(x, "more_steps", (double)rank->more_steps);
        snprintf(x->message, sizeof x->message,
                 "%s is %sslower than the other ranks: slowest in %zu of %zu steps, +%.2f ms busy a step (%.1f%% of a "
                 "step), which every rank waits for in its collectives%s%s.", where,
                 rank->straggler ? "" : "likely ", rank->slowest_steps, r->nsteps,
                 rank->change_ns / 1e6, 100 * share, rank->napis > 0 ? "; most of it in " : "",
                 rank->napis > 0 ? rank->apis[0].api : "");
        snprintf(x->fix, sizeof x->fix,
                 "Look at what that rank does more: its data shard (uneven lengths, a slow sample), its host "
                 "(tw-report --ranks lists the APIs), and balance it; tw-report --ranks --html shows the steps.");
    }
    qsort(f->found, f->nfound, sizeof *f->found, by_severity_then_share);
}
