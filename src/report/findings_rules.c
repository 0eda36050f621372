/* SPDX-License-Identifier: MIT */
/*
 * The findings' first rules (findings_state.h), entries of the catalogue (findings_catalogue.c): at
 * settle each turns its tallies (findings.c) into a finding with its share of the run, severity (from
 * its entry's thresholds), lines, evidence and message; the fix and source are the entry's.
 */
#include "config.h"
#include "findings_rules.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "ranks.h"
#include "util.h"
#include "findings_tally.h"

#define ms findings_ms

/* Step time drifting: the last quarter of the steps slower than the first beyond their spread. */
void rule_step_time_drift(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    uint64_t run_ns = c->run_ns;
    size_t n = 0;
    uint64_t *times = f->steps != NULL ? malloc((f->max_step + 1) * sizeof *times) : NULL;
    for (uint64_t s = 0; times != NULL && s <= f->max_step; s++)
        if (f->steps[s].end > f->steps[s].start)
            times[n++] = f->steps[s].end - f->steps[s].start;
    size_t q = n / 4;
    /* (q 6 at least: with fewer, every step of the last quarter slower than the first's by chance is no
     * rarer than a busy machine's: q 3, twelve steps, p = 1/20, and the suite's 12-step MLP was named
     * drifting, high, beside busy processes) */
    if (n < 24 || q < 6) {
        free(times);
        return;
    }
    uint64_t *first = malloc(q * sizeof *first), *last = malloc(q * sizeof *last);
    if (first != NULL && last != NULL) {
        memcpy(first, times + 1, q * sizeof *first); /* the first step (warm-up) left out */
        memcpy(last, times + n - q, q * sizeof *last);
        double a = findings_median_u64(first, q), b = findings_median_u64(last, q);
        /* every last-quarter step slower than the slowest of the first quarter (a rank test's
         * extreme: p = 1/C(2q, q) <= 0.001 from q = 6 by chance alone), and by half in the median */
        int all_slower = 1;
        for (size_t i = 0; i < q; i++)
            all_slower &= last[i] > first[q - 1];
        if (b > 1.5 * a && all_slower) {
            double extra = (b - a) * (double)q;
            finding_t *x = findings_add(f, r, run_ns ? extra / (double)run_ns : 0);
            if (x != NULL) {
                findings_evidence(x, "first_steps_median_ms", a / 1e6);
                findings_evidence(x, "last_steps_median_ms", b / 1e6);
                findings_evidence(x, "steps", (double)n);
                snprintf(x->message, sizeof x->message,
                         "Steps get slower over the run: the last %zu steps take %.2f ms each (median), the first "
                         "%zu %.2f ms (+%.0f%%).", q, b / 1e6, q, a / 1e6, 100 * (b / a - 1));
            }
        }
    }
    free(first);
    free(last);
    free(times);
}

/* Memory growing step over step (config memory): the steps after the first keep what they allocate. */
void rule_memory_growth(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    (void)c;
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
    group_t **list = findings_ranked_groups(f, &f->kept_bytes, &n, &total, &count);
    finding_t *x = findings_add(f, r, -1);
    if (x != NULL) {
        x->severity = "medium";
        findings_add_where(x, list, n);
        findings_evidence(x, "kept_mib_per_step", (double)kept / (double)steps / 1048576.0);
        findings_evidence(x, "kept_mib", (double)kept / 1048576.0);
        findings_evidence(x, "growing_steps", (double)growing);
        findings_evidence(x, "steps", (double)steps);
        snprintf(x->message, sizeof x->message,
                 "Memory grows step over step: %zu of %zu steps keep what they allocate, %.2f MiB a step "
                 "(%.1f MiB in all), until the process runs out.", growing, steps,
                 (double)kept / (double)steps / 1048576.0, (double)kept / 1048576.0);
    }
    free(list);
}

void rule_input_bound(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    uint64_t total, count;
    group_t **list;
    /* 1. input-bound: the wait for the DataLoader's next batch */
    if ((list = findings_ranked_groups(f, &f->loader_wait, &n, &total, &count)) != NULL && c->run_ns > 0) {
        double share = (double)total / (double)c->run_ns, wait_ms = ms(total) / c->per_step;
        /* A typical step's wait (the medians over the steps after the first): the first batch builds the
         * iterator and its sampler, and a garbage collection landing in one collate is no property of the
         * loader's */
        if (c->typical) {
            share = c->typical_wait / c->typical_step;
            wait_ms = c->typical_wait / 1e6;
        }
        size_t nd;
        uint64_t dataset_ns, dataset_calls;
        group_t **lines = findings_ranked_groups(f, &f->dataset_lines, &nd, &dataset_ns, &dataset_calls);
        /* a DataLoader's own per-batch work (indexing, collate) is a tenth of a small model's step on one
         * thread: from 10% (medium from 15%, high from 30%), and at any share where the program's own
         * Dataset builds the samples on the main process (its __getitem__ made calls): what the wait is
         * worth moves with the machine's load, where the samples are made does not */
        /* where the samples were made: the steps' process, worker processes, or nowhere that the program's
         * Dataset made calls (a TensorDataset) */
        uint64_t main_ns = 0, worker_ns = 0;
        unsigned workers = 0;
        for (unsigned i = 0; i < f->ndataset_pids; i++)
            if (c->thread != NULL && f->dataset_pids[i] == c->thread->pid)
                main_ns += f->dataset_pid_ns[i];
            else
                worker_ns += f->dataset_pid_ns[i], workers++;
        int on_main = nd > 0 && (main_ns > 0 || workers == 0);
        /* (by its share in most steps too: a TensorDataset's batch waited 18% of the middle steps' mean
         * beside a second test run, preempted in a few of them) */
        if ((share >= 0.10 && (!c->typical || c->median_wait_share >= 0.10)) || on_main) {
            finding_t *x = findings_add(f, r, share);
            if (x != NULL) {
                findings_add_where(x, lines, nd);
                findings_add_where(x, list, n);
                findings_evidence(x, "wait_ms_per_step", wait_ms);
                findings_evidence(x, "mean_wait_ms_per_step", ms(total) / c->per_step);
                findings_evidence(x, "batches", (double)count);
                findings_evidence(x, "dataset_ms", ms(dataset_ns));
                findings_evidence(x, "worker_processes", (double)workers);
                char where[120] = "";
                if (on_main)
                    snprintf(where, sizeof where, ", building batches on the main process");
                else if (workers > 0)
                    snprintf(where, sizeof where, ", waiting for the %u%s worker processes that made the samples "
                             "(%.1f ms of the Dataset's calls there)", workers, f->dataset_pids_full ? "+" : "",
                             ms(worker_ns));
                snprintf(x->message, sizeof x->message,
                         "The training loop waits for its data: %.1f%% of a step (%.2f ms) is spent in the "
                         "DataLoader's next()%s.", 100 * share, wait_ms, where);
            }
        }
        free(lines);
    }
    free(list);
}

/*
 * A DataLoader whose iterators after the first take as long to give their first batch as the first did: its
 * worker processes are started again every epoch (persistent_workers=False, the default), where persistent
 * ones make a later epoch's start as cheap as any batch. What it costs: each later epoch's start (its
 * iterator and first batch) less a typical batch's wait.
 */
void rule_loader_workers_restarted(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    const thread_state_t *t = c->thread;
    if (t == NULL || t->loader_iters < 2 || t->first_batches < 2 || c->run_ns == 0)
        return;
    uint64_t later = t->first_batches - 1;
    double later_ns = (double)(t->loader_iter_ns + t->first_batch_ns - t->startup_ns_first) / (double)later;
    double batch_ns = c->typical ? c->typical_wait : 0;
    /* half the first start or more, or ten batches' waits (a first start slowed on a busy machine leaves
     * the later ones below its half; persistent workers give a later epoch's first batch in about one) */
    if ((later_ns < 0.5 * (double)t->startup_ns_first && (batch_ns <= 0 || later_ns < 10 * batch_ns)) ||
        later_ns <= batch_ns)
        return;
    /* with each later epoch's start, the end of the one before (its last next(): the workers shut down) */
    double share = ((later_ns - batch_ns) * (double)later + (double)t->ends_ns) / (double)c->run_ns;
    finding_t *x = share >= 0.02 ? findings_add(f, r, share) : NULL;
    if (x == NULL)
        return;
    findings_add_where_text(x, t->loader_where);
    findings_evidence(x, "epochs", (double)t->loader_iters);
    findings_evidence(x, "first_epoch_start_ms", ms(t->startup_ns_first));
    findings_evidence(x, "later_epoch_start_ms", later_ns / 1e6);
    findings_evidence(x, "epoch_end_ms", ms(t->ends_ns) / (double)later);
    snprintf(x->message, sizeof x->message,
             "The DataLoader iterated at %.200s starts again at every epoch: %" PRIu64 " epochs, each after the first "
             "waiting %.1f ms for its first batch (the first: %.1f ms) and %.1f ms at the end of the one before, "
             "%.1f%% of the run. Its worker processes are started anew each time.", t->loader_where,
             t->loader_iters, later_ns / 1e6, ms(t->startup_ns_first), ms(t->ends_ns) / (double)later, 100 * share);
}

/*
 * The program's Python between its calls at lines (f->gaps, keyed "LINE\tPID:TID"): the loop that
 * makes the small operations. A small call's few microseconds are seldom preempted where the run's
 * time is (a busy machine stretches the steps, not the calls): the calls' own time alone made a share
 * that fell with the machine's load (a planted loop of 1,000 small ops a step: 5% of the run idle,
 * under 5% beside busy processes); with its loop's Python it is the loop's, as the step is.
 */
static uint64_t python_at_lines(findings_t *f, group_t **lines, size_t n)
{
    size_t ngaps;
    group_t **gaps = report_group_list(&f->gaps.all, &ngaps);
    uint64_t ns = 0;
    for (size_t g = 0; gaps != NULL && g < ngaps; g++) {
        size_t len = strcspn(gaps[g]->key, "\t");
        for (size_t i = 0; i < n; i++)
            if (strcspn(lines[i]->key, "\t") == len && memcmp(lines[i]->key, gaps[g]->key, len) == 0) {
                ns += gaps[g]->stats.total_ns;
                break;
            }
    }
    free(gaps);
    return ns;
}

void rule_many_small_ops(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    uint64_t total, count;
    group_t **list;
    /* 4. many small operations */
    if (f->leaf_calls[0] > 0 && c->run_ns > 0 && (double)f->small_calls[0] / c->per_step >= 200) {
        list = findings_ranked_groups(f, &f->small_ops, &n, &total, &count);
        double share = (double)(f->small_ns[0] + (list != NULL ? python_at_lines(f, list, n) : 0)) / (double)c->run_ns;
        if (list != NULL && share >= 0.05) {
            finding_t *x = findings_add(f, r, share);
            if (x != NULL) {
                findings_add_where(x, list, n);
                findings_evidence(x, "ops_per_step", (double)f->leaf_calls[0] / c->per_step);
                findings_evidence(x, "small_ops_per_step", (double)f->small_calls[0] / c->per_step);
                findings_evidence(x, "small_op_share", (double)f->small_calls[0] / (double)f->leaf_calls[0]);
                snprintf(x->message, sizeof x->message,
                         "%.0f operations a step take under 5 us each (with the Python at their lines, %.1f%% of "
                         "the run): the step is bound by dispatch and launch overhead, not by compute.",
                         (double)f->small_calls[0] / c->per_step,
                         100 * share);
            }
        }
        free(list);
    }
}

void rule_optimizer_single_tensor(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    uint64_t total, count;
    group_t **list;
    /* 5. an optimizer on its single-tensor path */
    if ((list = findings_ranked_groups(f, &f->single_tensor_opt, &n, &total, &count)) != NULL && c->run_ns > 0) {
        double share = (double)total / (double)c->run_ns;
        finding_t *x = findings_add(f, r, share);
        if (x != NULL) {
            /* foreach is torch's default on a GPU only: on a CPU the single-tensor path is the default */
            x->severity = f->have_gpu ? findings_severity(share, r->high, r->medium) : "low";
            findings_add_where(x, list, n);
            const char *api = strchr(list[0]->key, '\t');
            findings_evidence(x, "ms_per_step", ms(total) / c->per_step);
            findings_evidence(x, "tensor_ops_per_step", (double)list[0]->stats.self_ns / (double)list[0]->stats.calls);
            snprintf(x->message, sizeof x->message,
                     "%s updates its parameters one tensor at a time (%.0f in-place operations a step, %.1f%% of "
                     "the run).", api != NULL ? api + 1 : "The optimizer",
                     (double)list[0]->stats.self_ns / (double)list[0]->stats.calls, 100 * share);
        }
    }
    free(list);
}

void rule_zero_grad_fills(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    uint64_t total, count;
    group_t **list;
    /* 6. zero_grad(set_to_none=False) */
    if ((list = findings_ranked_groups(f, &f->fills, &n, &total, &count)) != NULL) {
        double share = c->run_ns ? (double)total / (double)c->run_ns : 0;
        finding_t *x = findings_add(f, r, share);
        if (x != NULL) {
            if (strcmp(x->severity, "low") == 0)
                x->severity = "medium"; /* a memset of every gradient, every step: always worth the one word */
            findings_add_where(x, list, n);
            uint64_t fills = 0;
            for (size_t i = 0; i < n; i++)
                fills += list[i]->stats.self_ns;
            findings_evidence(x, "gradients_per_step", (double)fills / c->per_step);
            findings_evidence(x, "ms_per_step", ms(total) / c->per_step);
            snprintf(x->message, sizeof x->message,
                     "zero_grad() fills %.0f gradients a step with zeros instead of dropping them: "
                     "set_to_none=False.", (double)fills / c->per_step);
        }
    }
    free(list);
}

void rule_conv_bias_before_batchnorm(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    uint64_t total, count;
    group_t **list;
    /* 7. a convolution's bias before a batch norm */
    if ((list = findings_ranked_groups(f, &f->conv_bn, &n, &total, &count)) != NULL) {
        finding_t *x = findings_add(f, r, -1);
        if (x != NULL) {
            x->severity = "low";
            findings_add_where(x, list, n);
            for (size_t i = 0; i < n && x->nwhere < FINDING_WHERE_MAX; i++) {
                const char *module = strchr(list[i]->key, '\t');
                size_t len = module != NULL ? strlen(module + 1) + 8 : 0;
                if (module != NULL && (x->where[x->nwhere] = malloc(len)) != NULL)
                    snprintf(x->where[x->nwhere++], len, "module %s", module + 1);
            }
            findings_evidence(x, "convolutions", (double)n);
            snprintf(x->message, sizeof x->message,
                     "%zu convolution(s) with a bias feed a BatchNorm, which subtracts the mean: the bias is "
                     "computed, stored and updated for nothing.", n);
        }
    }
    free(list);
}

void rule_recompilation(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    size_t n;
    uint64_t total, count;
    group_t **list;
    /* 8. recompilation */
    if ((list = findings_ranked_groups(f, &f->compiles, &n, &total, &count)) != NULL && count > n) {
        double share = c->run_ns ? (double)total / (double)c->run_ns : 0;
        finding_t *x = findings_add(f, r, share);
        if (x != NULL) {
            if (count - n >= 2 && strcmp(x->severity, "low") == 0)
                x->severity = "medium";
            findings_add_where(x, list, n);
            findings_evidence(x, "compilations", (double)count);
            findings_evidence(x, "recompilations", (double)(count - n));
            findings_evidence(x, "compile_ms", ms(total));
            snprintf(x->message, sizeof x->message,
                     "torch.compile compiled again %" PRIu64 " time(s) during the run (%.0f ms compiling in all), "
                     "first at %.*s.", count - n, ms(total), (int)strcspn(list[0]->key, "\t"), list[0]->key);
        }
    }
    free(list);
}
