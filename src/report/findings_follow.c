/* SPDX-License-Identifier: MIT */
/*
 * What the findings' pass follows row by row on a thread (findings_follow.h) besides its subtree counts:
 * the DataLoader's iterators and first batches, the processes that ran a Dataset's calls, the batches
 * its models were given and the program's calls a step (a loop over a batch's samples), and the grad and
 * eval modes its outermost calls switch.
 */
#include "config.h"
#include "findings_follow.h"

#include <stdio.h>
#include <string.h>

#include "findings_args.h"

/* A Dataset's call, counted to its process: a DataLoader's worker, or the main process. */
void findings_count_dataset_process(findings_t *f, const tw_row_t *row)
{
    for (unsigned i = 0; i < f->ndataset_pids; i++)
        if (f->dataset_pids[i] == row->pid) {
            f->dataset_pid_ns[i] += row->self_ns;
            return;
        }
    if (f->ndataset_pids == DATASET_PIDS) {
        f->dataset_pids_full = 1;
        return;
    }
    f->dataset_pids[f->ndataset_pids] = row->pid;
    f->dataset_pid_ns[f->ndataset_pids++] = row->self_ns;
}

/* A DataLoader's iterators on a thread (an epoch's start) and the first batch each gave. Rows come at
 * their calls' ends: an iterator's before its first batch's. */
void findings_follow_loader(thread_state_t *t, const tw_row_t *row, const site_line_t *line)
{
    if (findings_is(row->api, "torch.utils.data.DataLoader.__iter__")) {
        if (t->loader_iters++ == 0)
            t->startup_ns_first = row->cost_ns;
        t->ends_ns += t->last_batch_ns; /* (the previous iterator's end) */
        t->last_batch_ns = 0;
        t->loader_iter_ns += row->cost_ns;
        t->first_batch_pending = 1;
        /* the line of the costliest iterator (a cheap one interleaved, a validation loader without workers
         * say, does not take the name) */
        if (t->loader_iters == 1 || row->cost_ns > t->loader_where_ns) {
            t->loader_where_ns = row->cost_ns;
            snprintf(t->loader_where, sizeof t->loader_where, "%.*s", (int)line->len, line->text);
        }
    } else if (findings_is(row->api, "torch.utils.data.dataloader._BaseDataLoaderIter.__next__")) {
        t->last_batch_ns = row->cost_ns;
        if (t->first_batch_pending) {
            if (t->first_batches++ == 0)
                t->startup_ns_first += row->cost_ns;
            t->first_batch_ns += row->cost_ns;
            t->first_batch_pending = 0;
            t->last_batch_ns = 0; /* (an epoch of one batch: its first, counted) */
        }
    }
}

/* A module forward's batch: its first tensor's leading size, 2 or more, kept among the thread's. */
void findings_note_batch_lead(thread_state_t *t, const tw_row_t *row)
{
    long lead;
    int ndim;
    if (!report_series_first_tensor(row->args, &lead, &ndim) || lead < 2)
        return;
    for (unsigned i = 0; i < t->nbatch_leads; i++)
        if (t->batch_leads[i] == lead)
            return;
    if (t->nbatch_leads < BATCH_LEADS)
        t->batch_leads[t->nbatch_leads++] = lead;
}

/*
 * count more of the program's own calls of e (not a module's forward) in step: a step's done when the
 * next one begins, and one with as many calls as a batch the thread's models were given, 8 or more, is
 * a loop over that batch's samples, if the calls' tensors are samples (the rule asks: their leading
 * size 1). Counts at any depth: a loss computed in a LightningModule's training_step runs inside the
 * optimizer's step.
 */
void findings_count_program_step(const thread_state_t *t, series_entry_t *e, int64_t step, uint32_t count)
{
    if (e->module_forward || e->node)
        return;
    if (e->sample_step != step) {
        for (unsigned i = 0; i < t->nbatch_leads && e->sample_calls >= 8; i++)
            if ((long)e->sample_calls == t->batch_leads[i]) {
                e->per_sample_runs++;
                break;
            }
        e->sample_step = step;
        e->sample_calls = 0;
    }
    e->sample_calls += count;
}

/* The model class a Module.eval()/train() was called on ("((Net, False), {})": "Net"), into buf. */
static void module_class(tw_str_t args, char *buf, size_t cap)
{
    tw_str_t first;
    if (!findings_first_arg(args, &first))
        first.len = 0;
    snprintf(buf, cap, "%.*s", (int)first.len, first.ptr);
}

/* The outermost calls switch grad mode and eval mode: no_grad and inference_mode contexts, and the
 * model's eval()/train() (only the model's own class is followed: a frozen submodule in eval mode
 * leaves the model training). */
void findings_follow_modes(thread_state_t *t, const tw_row_t *row)
{
    if (findings_is(row->api, "torch.no_grad.__enter__") ||
        findings_is(row->api, "torch.inference_mode.__enter__"))
        t->grad_off++;
    else if ((findings_is(row->api, "torch.no_grad.__exit__") ||
              findings_is(row->api, "torch.inference_mode.__exit__")) && t->grad_off > 0)
        t->grad_off--;
    else if (findings_is(row->api, "torch.nn.Module.eval")) {
        module_class(row->args, t->eval_class, sizeof t->eval_class);
        t->eval_mode = t->eval_class[0] != '\0';
    } else if (findings_is(row->api, "torch.nn.Module.train")) {
        tw_str_t mode;
        int training = !findings_arg(row->args, 1, &mode) || findings_arg_bool(mode) != 0;
        module_class(row->args, t->eval_class, sizeof t->eval_class);
        t->eval_mode = !training && t->eval_class[0] != '\0';
    }
}

/* Whether an outermost module forward runs as an evaluation: under no_grad/inference_mode, or its
 * model in eval mode (its path's first part the class eval() was called on). */
int findings_is_evaluation(const thread_state_t *t, const tw_row_t *row, int *with_grad)
{
    *with_grad = 0;
    if (t->grad_off > 0)
        return 1;
    size_t n = strlen(t->eval_class);
    if (t->eval_mode && row->module.len >= n && memcmp(row->module.ptr, t->eval_class, n) == 0 &&
        (row->module.len == n || row->module.ptr[n] == '.')) {
        *with_grad = 1;
        return 1;
    }
    return 0;
}
