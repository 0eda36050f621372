/* SPDX-License-Identifier: MIT */
/*
 * tw-report --findings, the sink and its pass over the rows (findings.h): per row, its key's series
 * (findings_series.c), the tallies keyed by the program's line (a site's text), the subtree counters
 * of its thread (the calls inside a call, and the runs of the program's own calls among its children:
 * a Python loop), the outermost calls' parts of their step (the anatomy's), the settings switched by
 * the calls that switch them, and a convolution's output followed to the batch norm that reads it.
 * Settle (findings_catalogue.c) turns all of it into findings; findings_output.c prints them.
 *
 * The run's time: the span of the outermost calls of the busiest thread (the one that ran the
 * steps), first start to last end; its steps: the distinct steps of its rows.
 */
#include "config.h"
#include "findings.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "findings_args.h"
#include "findings_catalogue.h"
#include "findings_follow.h"
#include "findings_gpu.h"
#include "findings_output.h"
#include "findings_state.h"
#include "own_cost_report.h"
#include "ranks.h"

/* The row's line as the findings name it: its site's text, or "(no site)"; looked up in the sites
 * (and its text read) once per (process, site) while it stays in the cache. */
static site_line_t *line_of(findings_t *f, const tw_row_t *row)
{
    uint64_t site = f->sites != NULL ? row->site : 0;
    site_line_t *e = &f->lines[report_pid_id_hash(row->pid, site) & (SITE_CACHE - 1)];
    if (e->used && e->pid == row->pid && e->site == site)
        return e;
    memset(e, 0, sizeof *e);
    e->used = 1, e->pid = row->pid, e->site = site;
    const char *text = site != 0 ? report_site_text(f->sites, row->pid, site) : NULL;
    e->text = text != NULL ? text : "(no site)";
    size_t len = strlen(e->text);
    e->len = len < WHERE_TEXT_MAX ? len : WHERE_TEXT_MAX;
    const char *function = strchr(e->text, ' ');
    e->dataset = function != NULL && (strstr(function, "__getitem__") != NULL || strstr(function, "__getitems__") != NULL);
    e->library = site != 0 && report_site_is_library(f->sites, row->pid, site);
    return e;
}

/* Counts into *slot, the group of key (len bytes) in table, found on its first use. */
static void add_to(findings_t *f, group_table_t *table, group_t **slot, const char *key, size_t len, uint64_t count,
                   uint64_t ns, uint64_t ns2)
{
    if (*slot == NULL && (*slot = report_group_get(table, key, len)) == NULL) {
        f->oom = 1;
        return;
    }
    (*slot)->stats.calls += count;
    (*slot)->stats.total_ns += ns;
    (*slot)->stats.self_ns += ns2;
}

/* Counts the row into t under key (len bytes, at most WHERE_TEXT_MAX), over all steps and, for a row
 * of the first step, over that step; slots: the groups of key in t->all and t->first once found (the
 * site_line_t's), or NULL to look them up now. */
static void tally(findings_t *f, tally_t *t, const tw_row_t *row, group_t **slots, const char *key, size_t len,
                  uint64_t count, uint64_t ns, uint64_t ns2)
{
    group_t *found[2] = {NULL, NULL};
    if (slots == NULL)
        slots = found;
    add_to(f, &t->all, &slots[0], key, len, count, ns, ns2);
    if (row->step == 0)
        add_to(f, &t->first, &slots[1], key, len, count, ns, ns2);
}

/* A tally keyed by the row's line alone (which: LINE_*). */
static void tally_line(findings_t *f, tally_t *t, const tw_row_t *row, site_line_t *line, int which, uint64_t count,
                       uint64_t ns, uint64_t ns2)
{
    tally(f, t, row, line->line[which], line->text, line->len, count, ns, ns2);
}

/* Into buf (WHERE_TEXT_MAX bytes): the key "LINE\tMORE" (more: len bytes, up to a NUL), cut at
 * WHERE_TEXT_MAX bytes as every key is; its length. */
static size_t join_key(char *buf, const site_line_t *line, const char *more, size_t len)
{
    size_t n = line->len;
    memcpy(buf, line->text, n);
    if (n < WHERE_TEXT_MAX)
        buf[n++] = '\t';
    const char *nul = memchr(more, '\0', len);
    if (nul != NULL)
        len = (size_t)(nul - more);
    if (len > WHERE_TEXT_MAX - n)
        len = WHERE_TEXT_MAX - n;
    memcpy(buf + n, more, len);
    return n + len;
}

static thread_state_t *thread_of(findings_t *f, int64_t pid, uint64_t tid)
{
    if (f->last_thread != NULL && f->last_thread->pid == pid && f->last_thread->tid == tid)
        return f->last_thread;
    size_t h = (size_t)(report_pid_id_hash(pid, tid) % FIND_THREADS);
    for (size_t i = 0; i < FIND_THREADS; i++) {
        thread_state_t **slot = &f->threads[(h + i) % FIND_THREADS];
        if (*slot == NULL) { /* (a thread's state is ~80 KB: allocated for the threads that come) */
            if ((*slot = calloc(1, sizeof **slot)) == NULL) {
                f->oom = 1;
                return NULL;
            }
            (*slot)->used = 1, (*slot)->pid = pid, (*slot)->tid = tid;
            return f->last_thread = *slot;
        }
        if ((*slot)->pid == pid && (*slot)->tid == tid)
            return f->last_thread = *slot;
    }
    return NULL;
}

/* a += b (the counters; not the runs, which are the level's own) */
static inline void add_subtree(subtree_t *a, const subtree_t *b)
{
    a->rows += b->rows;
    a->foreach_calls += b->foreach_calls;
    a->fused_calls += b->fused_calls;
    a->inplace_calls += b->inplace_calls;
    a->fills += b->fills;
    a->fill_ns += b->fill_ns;
    a->conv_bias += b->conv_bias;
    a->forward_ns += b->forward_ns;
    a->backward_ns += b->backward_ns;
}

static int is_backward(tw_str_t api)
{
    return findings_is(api, "torch.Tensor.backward") || findings_is(api, "torch.autograd.backward") ||
           findings_is(api, "torch.autograd.grad");
}

/* The calls of a run at a level: one more of entry e. */
static void add_run(subtree_t *level, series_entry_t *e, const tw_row_t *row)
{
    long lead = 0;
    int ndim;
    if (e->module_forward && !report_series_first_tensor(row->args, &lead, &ndim))
        lead = 0;
    for (uint32_t i = level->nruns; i-- > 0;) /* (from the last: a loop's calls come one after another) */
        if (level->runs[i].entry == e) {
            level->runs[i].count++;
            level->runs[i].cost_ns += row->cost_ns;
            level->runs[i].lead = lead;
            return;
        }
    if (level->nruns < LEVEL_RUNS)
        level->runs[level->nruns++] = (level_run_t){e, 1, row->cost_ns, lead};
}

/* A run of module calls is one a sample: as many calls as the caller's batch (its first tensor's
 * leading size), each on a tensor of another leading size (1, or the sample without its batch
 * dimension). A loop over layers that share weights, or over time steps, has other counts. */
static int per_sample(const level_run_t *run, const tw_row_t *caller)
{
    long lead;
    int ndim;
    return run->entry->module_forward && run->lead > 0 && report_series_first_tensor(caller->args, &lead, &ndim) &&
           lead >= 2 && run->count == (uint64_t)lead && run->lead != lead;
}

/*
 * Counts the row into its thread's subtree counters; returns the counters of the calls inside it.
 * The rows at depth >= k since the last row at a depth < k are level[k] + level[k + 1] + ...: a row
 * at depth d takes the levels above d (its subtree, every row of it read since the last row at
 * depth <= d) and adds them, with its own counts, into level[d]. The levels above d are those of
 * its children alone, but for a row whose parent is not read: one level a row, whatever the depth.
 * The runs of level d + 1 are the row's children's: those made at another line than the row's were
 * made by the program itself (in "boundary" sites, torch's own calls take their caller's line).
 */
static subtree_t close_subtree(thread_state_t *t, const tw_row_t *row, size_t d, series_entry_t *e)
{
    subtree_t inside = {0};
    if (d + 1 <= t->top) {
        const subtree_t *children = &t->level[d + 1];
        for (uint32_t i = 0; i < children->nruns; i++) {
            const level_run_t *run = &children->runs[i];
            if (run->entry->site == row->site)
                continue; /* torch's own calls inside the row */
            report_series_program(run->entry, run->count, run->cost_ns);
            run->entry->per_sample_runs += per_sample(run, row);
            findings_count_program_step(t, run->entry, row->step, run->count);
        }
    }
    for (size_t k = d + 1; k <= t->top; k++) {
        add_subtree(&inside, &t->level[k]);
        memset(&t->level[k], 0, offsetof(subtree_t, runs)); /* (the runs past nruns = 0 are not read) */
    }
    subtree_t own = {.rows = 1};
    if (findings_has_prefix(row->api, "torch._foreach_"))
        own.foreach_calls = 1;
    if (findings_has_prefix(row->api, "torch._fused_"))
        own.fused_calls = 1;
    if (findings_has_prefix(row->api, "torch.Tensor.") && findings_has_suffix(row->api, "_") &&
        !findings_has_suffix(row->api, "__"))
        own.inplace_calls = 1;
    if (findings_is(row->api, "torch.Tensor.zero_") || findings_is(row->api, "torch._foreach_zero_")) {
        own.fills = 1;
        own.fill_ns = row->cost_ns;
    }
    subtree_t carried = inside;
    if (is_backward(row->api)) { /* all of it backward (a checkpoint's forwards run again inside) */
        carried.forward_ns = 0;
        own.backward_ns = row->cost_ns > inside.backward_ns ? row->cost_ns - inside.backward_ns : 0;
    } else if (e != NULL && e->module_forward) { /* all of it forward: the outermost module's */
        carried.forward_ns = carried.backward_ns = 0;
        own.forward_ns = row->cost_ns;
    }
    add_subtree(&t->level[d], &own);
    add_subtree(&t->level[d], &carried);
    if (e != NULL && d > 0)
        add_run(&t->level[d], e, row);
    t->top = d;
    return inside;
}

static int is_module_forward(tw_str_t api, const char *family)
{
    /* torch.nn.Conv2d.forward: family "torch.nn.Conv", then a digit, "d.forward" */
    size_t n = strlen(family);
    return api.len == n + 10 && memcmp(api.ptr, family, n) == 0 && api.ptr[n] >= '1' && api.ptr[n] <= '3' &&
           memcmp(api.ptr + n + 1, "d.forward", 9) == 0;
}

/* The row's step's parts on thread t, grown as steps come; NULL out of memory or past FIND_STEPS. */
static step_parts_t *parts_of(findings_t *f, thread_state_t *t, int64_t step)
{
    if (step < 0 || step >= FIND_STEPS)
        return NULL;
    uint64_t s = (uint64_t)step;
    if (s >= t->nparts) {
        uint64_t grown = s + 1 > 2 * t->nparts ? s + 1 : 2 * t->nparts;
        step_parts_t *more = realloc(t->parts, grown * sizeof *more);
        if (more == NULL) {
            f->oom = 1;
            return NULL;
        }
        memset(more + t->nparts, 0, (grown - t->nparts) * sizeof *more);
        t->parts = more, t->nparts = grown;
    }
    t->parts[s].used = 1;
    return &t->parts[s];
}

/* The catalogue's settings switched by this row (process-wide: the first process's are followed). */
static void follow_switches(findings_t *f, const tw_row_t *row, site_line_t *line)
{
    if (row->api.len >= sizeof f->switch_lengths || !f->switch_lengths[row->api.len])
        return;
    if (f->switches_pid == 0)
        f->switches_pid = row->pid;
    if (row->pid != f->switches_pid)
        return;
    for (size_t i = 0; i < f->nswitch_names; i++) {
        const struct switch_name *n = &f->switch_names[i];
        if (n->len != row->api.len || memcmp(n->name, row->api.ptr, n->len) != 0)
            continue;
        const rule_t *r = f->switch_rules[n->rule];
        switch_state_t *s = &f->switches[n->rule];
        int on = 0;
        if (!n->off) {
            tw_str_t first;
            int has_first = findings_first_arg(row->args, &first);
            if (r->switch_kind == SWITCH_FIRST_ARG)
                on = has_first ? findings_arg_bool(first) : -1;
            else if (r->switch_kind == SWITCH_ONE_THREAD)
                on = has_first && first.len == 1 && first.ptr[0] == '1' && f->cpus != 1;
            else if (r->switch_kind == SWITCH_MORE_THREADS) /* more threads than the process's CPUs */
                on = has_first && f->cpus > 0 && strtol(first.ptr, NULL, 10) > f->cpus;
            else
                on = 1;
        }
        if (on == 1) {
            if (!s->on) /* the line that switched it on (a context entered while on changes nothing) */
                snprintf(s->where, sizeof s->where, "%.*s", (int)line->len, line->text);
            s->on = 1;
            s->calls_on++;
        } else if (on == 0) {
            s->on = 0;
        }
    }
}

/* A convolution with a bias whose output a batch norm then normalizes, followed through the data: the
 * norm's input is the tensor the convolution made (its sizes), with no other call reading it between. */
static void follow_conv_output(findings_t *f, thread_state_t *t, const tw_row_t *row, site_line_t *line)
{
    if (findings_is(row->api, "torch.conv1d") || findings_is(row->api, "torch.conv2d") ||
        findings_is(row->api, "torch.conv3d")) {
        t->conv.set = findings_conv_output(row->args, t->conv.shape, sizeof t->conv.shape, &t->conv.shape_len);
        t->conv.module[0] = '\0';
        memcpy(t->conv.where, line->text, line->len);
        t->conv.where_len = line->len;
        return;
    }
    if (!t->conv.set)
        return;
    if (is_module_forward(row->api, "torch.nn.Conv") && t->conv.module[0] == '\0') { /* the conv's module */
        snprintf(t->conv.module, sizeof t->conv.module, "%.*s",
                 (int)(row->module.len < 127 ? row->module.len : 127), row->module.ptr);
        return;
    }
    tw_str_t first;
    if (!findings_first_arg(row->args, &first) || first.len != t->conv.shape_len ||
        memcmp(first.ptr, t->conv.shape, first.len) != 0)
        return;
    if (findings_is(row->api, "torch.batch_norm") || findings_is(row->api, "torch.nn.functional.batch_norm")) {
        char key[WHERE_TEXT_MAX];
        const char *module = t->conv.module[0] ? t->conv.module : "(the model)";
        site_line_t conv_line = {.text = t->conv.where, .len = t->conv.where_len}; /* keyed at the conv's line */
        size_t len = join_key(key, &conv_line, module, strlen(module));
        tally(f, &f->conv_bn, row, NULL, key, len, 1, 0, 0);
        t->conv.set = 0;
    } else if (!(findings_has_prefix(row->api, "torch.Tensor.") &&
                 (findings_is(row->api, "torch.Tensor.dim") || findings_is(row->api, "torch.Tensor.size") ||
                  findings_is(row->api, "torch.Tensor.numel") || findings_is(row->api, "torch.Tensor.is_contiguous") ||
                  findings_is(row->api, "torch.Tensor.__len__") || findings_is(row->api, "torch.Tensor.stride")))) {
        t->conv.set = 0; /* read by another call first: not the convolution's output the norm sees */
    }
}

/* An outermost call's part of its step (PART_*), and what it carries of forward and backward. */
static void count_outermost(findings_t *f, thread_state_t *t, const tw_row_t *row, series_entry_t *e,
                            const subtree_t *inside, site_line_t *line)
{
    step_parts_t *p = parts_of(f, t, row->step);
    if (f->switches_pid == 0) /* (the settings followed are the first process's) */
        f->switches_pid = row->pid;
    for (size_t k = 0; k < f->nswitch_rules; k++)
        if (p != NULL && f->switches[k].on && row->pid == f->switches_pid)
            p->switches |= 1u << k;
    int with_grad = 0, eval = findings_is_evaluation(t, row, &with_grad);
    if (e != NULL && e->module_forward) {
        if (p != NULL)
            p->ns[eval ? PART_EVAL : PART_FORWARD] += row->cost_ns;
        if (eval && row->step != e->eval_step) /* (a step's: validating every step, or a teacher's forward) */
            e->eval_steps++, e->eval_step = row->step;
        if (eval && with_grad) /* an evaluation that builds the autograd graph for nothing */
            tally_line(f, &f->eval_grad, row, line, LINE_EVAL_GRAD, 1, row->cost_ns, 0);
        return;
    }
    findings_follow_modes(t, row);
    if (p == NULL)
        return;
    if (is_backward(row->api)) {
        p->ns[PART_BACKWARD] += row->cost_ns;
        return;
    }
    int part = findings_is(row->api, "torch.utils.data.dataloader._BaseDataLoaderIter.__next__") ? PART_DATA
               : findings_has_prefix(row->api, "torch.optim.") ||
                         findings_has_prefix(row->api, "torch.nn.utils.clip_grad")
                   ? PART_OPTIMIZER
                   : PART_OTHER;
    uint64_t inner = inside->forward_ns + inside->backward_ns;
    p->ns[part] += row->cost_ns > inner ? row->cost_ns - inner : 0;
    p->ns[eval ? PART_EVAL : PART_FORWARD] += inside->forward_ns; /* a closure's forward, say */
    p->ns[PART_BACKWARD] += inside->backward_ns;
}

static int findings_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    findings_t *f = (findings_t *)sink;
    (void)kept;
    if (row->kind == TW_FILE_GPU)
        findings_gpu_row(f, row);
    if (row->kind != TW_FILE_CALLS)
        return 0;
    site_line_t *line = line_of(f, row);
    char key[WHERE_TEXT_MAX];
    series_entry_t *e = report_series_get(&f->series, row, row->fwd_call_id != 0);
    if (e != NULL && e->calls == 0)
        e->library = line->library, e->dataset = line->dataset;
    if (e != NULL)
        report_series_add(&f->series, e, row);
    else
        f->oom = 1;
    follow_switches(f, row, line);
    if (findings_is(row->api, "torch.set_float32_matmul_precision") && row->args.len > 0)
        f->fp32_precision_lowered = !findings_has_prefix(row->args, "(('highest'");
    if (findings_is(row->api, "torch.utils.data.dataloader._BaseDataLoaderIter.__next__")) {
        tally_line(f, &f->loader_wait, row, line, LINE_LOADER, 1, row->cost_ns, 0);
        if (f->steps != NULL && row->step >= 0 && (uint64_t)row->step <= f->max_step)
            f->steps[row->step].loader_ns += row->cost_ns;
    }
    if (findings_is(row->api, "torch._dynamo (compilation)")) /* a range of _compile_watch.py's */
        tally_line(f, &f->compiles, row, line, LINE_COMPILES, 1, row->cost_ns, 0);
    if (line->dataset) {
        tally_line(f, &f->dataset_lines, row, line, LINE_DATASET, 1, row->self_ns, 0);
        findings_count_dataset_process(f, row);
    }

    thread_state_t *t = row->fwd_call_id == 0 ? thread_of(f, row->pid, row->tid) : NULL;
    if (t == NULL)
        return 0;
    findings_follow_loader(t, row, line);
    size_t d = row->depth < FIND_DEPTH ? (size_t)row->depth : FIND_DEPTH;
    subtree_t inside = close_subtree(t, row, d, e);
    if (inside.rows == 0) {
        int first = row->step == 0;
        f->leaf_calls[0]++, f->leaf_calls[1] += first;
        if (row->cost_ns < SMALL_CALL_NS) {
            f->small_calls[0]++, f->small_calls[1] += first;
            f->small_ns[0] += row->cost_ns, f->small_ns[1] += first ? row->cost_ns : 0;
            tally_line(f, &f->small_ops, row, line, LINE_SMALL_OPS, 1, row->cost_ns, 0);
        }
    }
    if (findings_has_prefix(row->api, "torch.optim.") && findings_has_suffix(row->api, ".step") &&
        inside.foreach_calls == 0 &&
        inside.fused_calls == 0 && inside.inplace_calls >= 4) {
        size_t len = join_key(key, line, row->api.ptr, row->api.len < 70 ? row->api.len : 70);
        /* (its own time: a closure's forward and backward inside it, as Lightning runs them, are not) */
        uint64_t inner = inside.forward_ns + inside.backward_ns;
        tally(f, &f->single_tensor_opt, row, NULL, key, len, 1, row->cost_ns > inner ? row->cost_ns - inner : 0,
              inside.inplace_calls);
    }
    /* set_to_none=True touches no gradient; False detaches and zeroes each (one by one, or with
     * torch._foreach_zero_, which is private and not recorded: its detach_/requires_grad_ are) */
    if (findings_has_prefix(row->api, "torch.optim.") && findings_has_suffix(row->api, ".zero_grad") &&
        (inside.fills > 0 || inside.inplace_calls > 0))
        tally_line(f, &f->fills, row, line, LINE_FILLS, 1, row->cost_ns,
                   inside.inplace_calls > inside.fills ? inside.inplace_calls : inside.fills);
    follow_conv_output(f, t, row, line);
    if (row->depth == 0 && e != NULL) { /* the program's own: a loop over calls counts a step */
        e->outermost = 1;
        if (e->run_step != row->step)
            e->run_step = row->step, e->run_calls = 0;
        e->run_calls++;
        e->program_calls++;
        e->program_cost += row->cost_ns;
        if (e->run_calls > e->max_run)
            e->max_run = e->run_calls;
        findings_count_program_step(t, e, row->step, 1);
    }
    if (e != NULL && e->module_forward && row->args.len > 0)
        findings_note_batch_lead(t, row);
    if (row->depth == 0)
        count_outermost(f, t, row, e, &inside, line);
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
            span->net_bytes += (int64_t)row->mem_alloc - (int64_t)row->mem_freed;
        }
        if (row->mem_alloc > row->mem_freed) /* what a line keeps from one step to the next */
            tally_line(f, &f->kept_bytes, row, line, LINE_KEPT, 1, row->mem_alloc - row->mem_freed, 0);
    }
    f->have_memory |= row->mem_alloc != 0 || row->mem_freed != 0;
    if (row->depth == 0) {
        uint64_t end = row->start_ns + row->cost_ns;
        if (t->outer_rows == 0 || row->start_ns < t->first_start)
            t->first_start = row->start_ns;
        if (end > t->last_end) {
            /* the gap before this call: the program's Python between two calls into torch */
            if (t->outer_rows > 0 && row->start_ns > t->last_end) { /* keyed "LINE\tPID:TID" */
                if (!line->gap_set || line->gap_tid != t->tid) {
                    line->gap_set = 1, line->gap_tid = t->tid;
                    line->gap[0] = line->gap[1] = NULL;
                }
                size_t len = 0;
                if (line->gap[0] == NULL || (row->step == 0 && line->gap[1] == NULL)) { /* the key, once */
                    char thread[48];
                    int n = snprintf(thread, sizeof thread, "%" PRId64 ":%" PRIu64, t->pid, t->tid);
                    len = join_key(key, line, thread, (size_t)n);
                }
                tally(f, &f->gaps, row, line->gap, key, len, 1, row->start_ns - t->last_end, 0);
                if (e != NULL) { /* (an outermost call is the program's own) */
                    e->program_gap_ns += row->start_ns - t->last_end;
                    e->first_gap_ns += row->step == 0 ? row->start_ns - t->last_end : 0;
                }
                step_parts_t *p = parts_of(f, t, row->step);
                if (p != NULL)
                    p->ns[PART_PYTHON] += row->start_ns - t->last_end;
                if (f->steps != NULL && row->step >= 0 && (uint64_t)row->step <= f->max_step)
                    f->steps[row->step].gap_ns += row->start_ns - t->last_end;
            }
            t->last_end = end;
        }
        t->outer_rows++;
    }
    return 0;
}

static void findings_free(report_sink_t *sink)
{
    findings_t *f = (findings_t *)sink;
    tally_t *tallies[] = {&f->loader_wait, &f->dataset_lines, &f->gaps, &f->small_ops,
                          &f->single_tensor_opt, &f->fills, &f->conv_bn, &f->compiles, &f->kept_bytes,
                          &f->eval_grad};
    for (size_t i = 0; i < sizeof tallies / sizeof *tallies; i++) {
        report_group_table_free(&tallies[i]->all);
        report_group_table_free(&tallies[i]->first);
    }
    for (size_t i = 0; i < FIND_THREADS; i++)
        if (f->threads[i] != NULL) {
            free(f->threads[i]->parts);
            free(f->threads[i]);
        }
    free(f->gpu.busy);
    report_series_free(&f->series);
    for (size_t i = 0; i < f->nfound; i++)
        for (size_t k = 0; k < f->found[i].nwhere; k++)
            free(f->found[i].where[k]);
    free(f->found);
    free(f->threads);
    free(f->lines);
    free(f->steps);
    free(f);
}

void report_findings_use_host(report_sink_t *findings, int64_t cpus, int64_t torch_threads)
{
    findings_t *f = (findings_t *)findings;
    f->cpus = cpus;
    f->torch_threads = torch_threads;
    for (size_t k = 0; k < f->nswitch_rules; k++) /* more threads than CPUs from the start */
        if (f->switch_rules[k]->switch_kind == SWITCH_MORE_THREADS && cpus > 0 && torch_threads > cpus) {
            f->switches[k].on = 1;
            f->switches[k].calls_on = 1;
            snprintf(f->switches[k].where, sizeof f->switches[k].where,
                     "(start: %" PRId64 " torch threads on %" PRId64 " CPUs; OMP_NUM_THREADS?)", torch_threads, cpus);
        }
}

void report_findings_use_detail(report_sink_t *findings, int64_t first, int64_t every)
{
    findings_t *f = (findings_t *)findings;
    f->series.detail_first = first;
    f->series.detail_every = every;
}

void report_findings_use_ranks(report_sink_t *findings, report_sink_t *ranks)
{
    ((findings_t *)findings)->ranks = ranks;
}

static int findings_print(report_sink_t *sink, const report_pass_t *pass, FILE *out, FILE *err)
{
    findings_t *f = (findings_t *)sink;
    findings_add_stragglers(f);
    (void)err;
    if (!f->o->findings) /* (for --html alone, the page shows them) */
        return 0;
    report_findings_print(f->o, f->found, f->nfound, &f->anatomy, f->run_ms, f->nsteps, out);
    char own[1024];
    report_own_text(&pass->in->info.own, own, sizeof own);
    if (f->o->format != OUT_JSON && own[0] != '\0') /* what the run's profiling cost, and its detail's steps */
        fprintf(out, "%s%s\n", f->o->format == OUT_MARKDOWN ? "\n" : "", own);
    report_removed_text(&pass->in->info, own, sizeof own);
    if (f->o->format != OUT_JSON && own[0] != '\0')
        fprintf(out, "%s\n", own);
    return 0;
}

const finding_t *report_findings_result(const report_sink_t *sink, size_t *count)
{
    findings_t *f = (findings_t *)sink;
    findings_add_stragglers(f);
    *count = f->nfound;
    return f->found;
}

const step_anatomy_t *report_findings_anatomy(const report_sink_t *sink)
{
    return &((const findings_t *)sink)->anatomy;
}

void report_findings_print_rules(FILE *out)
{
    size_t n;
    const rule_t *rules = findings_rules(&n);
    for (size_t i = 0; i < n; i++) {
        const rule_t *r = &rules[i];
        fprintf(out, "%-28s", r->kind);
        if (r->medium >= FINDINGS_NEVER)
            fputs(" low always      ", out);
        else if (r->high >= FINDINGS_NEVER)
            fprintf(out, " medium >= %3.0f%%  ", 100 * r->medium);
        else
            fprintf(out, " %3.0f%% / %3.0f%%    ", 100 * r->medium, 100 * r->high);
        fprintf(out, "%s\n", r->source);
    }
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
    if (f == NULL || (f->threads = calloc(FIND_THREADS, sizeof *f->threads)) == NULL ||
        (f->lines = calloc(SITE_CACHE, sizeof *f->lines)) == NULL) {
        if (f != NULL)
            free(f->threads);
        free(f);
        return TW_ENOMEM;
    }
    f->sink = (report_sink_t){&findings_ops, SINK_ROWS_KEPT};
    f->o = o;
    f->sites = sites;
    f->have_gpu = have_gpu_files;
    f->compiles.first_step_too = 1;
    f->conv_bn.first_step_too = 1;
    size_t nrules;
    const rule_t *rules = findings_rules(&nrules);
    for (size_t i = 0; i < nrules && f->nswitch_rules < SWITCHES_MAX; i++) {
        if (rules[i].switch_kind == SWITCH_NONE)
            continue;
        f->switch_rules[f->nswitch_rules++] = &rules[i];
        const char *lists[] = {rules[i].apis, rules[i].apis_off};
        for (size_t l = 0; l < 2; l++)
            for (const char *p = lists[l]; p != NULL && *p != '\0';) {
                size_t n = strcspn(p, "|");
                if (n < sizeof f->switch_lengths && f->nswitch_names < sizeof f->switch_names / sizeof *f->switch_names) {
                    f->switch_lengths[n] = 1;
                    f->switch_names[f->nswitch_names++] =
                        (struct switch_name){p, n, (uint8_t)(f->nswitch_rules - 1), (uint8_t)l};
                }
                p += n + (p[n] == '|');
            }
    }
    *sink = &f->sink;
    return 0;
}
