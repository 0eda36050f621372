/* SPDX-License-Identifier: MIT */
/*
 * tw-report --findings: the rules over the pass's rows (see findings.h for the subtree counters).
 * Each rule adds to tallies keyed by the program's line (a site's text); settle turns the tallies
 * into findings with a share of the run's time, and findings_output.c prints them.
 *
 * The run's time: the span of the outermost calls of the busiest thread (the one that ran the
 * steps), first start to last end; its steps: the distinct steps of its rows.
 */
#include "config.h"
#include "findings.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "findings_internal.h"
#include "ranks.h"

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

/* The tally's groups less the first step's, when settle leaves the first step out. */
void findings_tally_settle(findings_t *f, tally_t *t)
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
    if (f->last_thread != NULL && f->last_thread->pid == pid && f->last_thread->tid == tid)
        return f->last_thread;
    size_t h = (size_t)(report_pid_id_hash(pid, tid) % FIND_THREADS);
    for (size_t i = 0; i < FIND_THREADS; i++) {
        thread_state_t *t = &f->threads[(h + i) % FIND_THREADS];
        if (!t->used) {
            memset(t, 0, sizeof *t);
            t->used = 1, t->pid = pid, t->tid = tid;
            return f->last_thread = t;
        }
        if (t->pid == pid && t->tid == tid)
            return f->last_thread = t;
    }
    return NULL;
}

/* The host waits for the device at these calls (on a GPU); on a CPU they are counted all the same.
 * Which one: 1 + its place in the list; 0: none. */
static int is_sync(tw_str_t api)
{
#define SYNC(name) {name, sizeof name - 1}
    static const struct {
        const char *name;
        size_t len;
    } names[] = {SYNC("torch.Tensor.item"),      SYNC("torch.Tensor.tolist"),    SYNC("torch.Tensor.cpu"),
                 SYNC("torch.Tensor.numpy"),     SYNC("torch.Tensor.__bool__"),  SYNC("torch.Tensor.__float__"),
                 SYNC("torch.Tensor.__int__"),   SYNC("torch.Tensor.__index__"), SYNC("torch.Tensor.nonzero"),
                 SYNC("torch.nonzero"),          SYNC("torch.cuda.synchronize"), SYNC("torch.Tensor.any"),
                 SYNC("torch.Tensor.all"),       SYNC("torch.masked_select"),    SYNC("torch.unique")};
#undef SYNC
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (api.len == names[i].len && memcmp(api.ptr, names[i].name, api.len) == 0)
            return (int)i + 1;
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

/* a += times * b */
static inline void add_subtree(subtree_t *a, const subtree_t *b, uint32_t times)
{
    a->rows += times * b->rows;
    a->foreach_calls += times * b->foreach_calls;
    a->fused_calls += times * b->fused_calls;
    a->inplace_calls += times * b->inplace_calls;
    a->fills += times * b->fills;
    a->fill_ns += times * b->fill_ns;
    a->conv_bias += times * b->conv_bias;
}

/*
 * Counts the row into its thread's subtree counters; returns the counters of the calls inside it.
 * The rows at depth >= k since the last row at a depth < k are level[k] + level[k + 1] + ...: a row
 * at depth d takes the levels above d (its subtree, every row of it read since the last row at
 * depth <= d) and adds them, with its own counts, into level[d]. The levels above d are those of
 * its children alone, but for a row whose parent is not read: one level a row, whatever the depth.
 */
static subtree_t close_subtree(thread_state_t *t, const tw_row_t *row, size_t d)
{
    subtree_t inside = {0};
    for (size_t k = d + 1; k <= t->top; k++) {
        add_subtree(&inside, &t->level[k], 1);
        memset(&t->level[k], 0, sizeof t->level[k]);
    }
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
    add_subtree(&t->level[d], &own, 1);
    add_subtree(&t->level[d], &inside, 1);
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

static int findings_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    findings_t *f = (findings_t *)sink;
    (void)kept;
    if (row->kind != TW_FILE_CALLS)
        return 0;
    site_line_t *line = line_of(f, row);
    char key[WHERE_TEXT_MAX];
    /* the program's own syncs: outermost calls (an Adam step's .item() on its step counts is torch's) */
    int sync = row->fwd_call_id == 0 && row->depth == 0 ? is_sync(row->api) : 0;
    if (sync != 0) { /* keyed "LINE\tAPI" (the API cut at 60 bytes) */
        if (line->sync != sync) {
            line->sync = sync;
            line->sync_g[0] = line->sync_g[1] = NULL;
        }
        size_t len = join_key(key, line, row->api.ptr, row->api.len < 60 ? row->api.len : 60);
        tally(f, &f->syncs, row, line->sync_g, key, len, 1, row->cost_ns, 0);
    }
    if (is(row->api, "torch.utils.data.dataloader._BaseDataLoaderIter.__next__")) {
        tally_line(f, &f->loader_wait, row, line, LINE_LOADER, 1, row->cost_ns, 0);
        if (f->steps != NULL && row->step >= 0 && (uint64_t)row->step <= f->max_step)
            f->steps[row->step].loader_ns += row->cost_ns;
    }
    if (is(row->api, "torch._dynamo (compilation)")) /* a range of _compile_watch.py's */
        tally_line(f, &f->compiles, row, line, LINE_COMPILES, 1, row->cost_ns, 0);
    if (line->dataset)
        tally_line(f, &f->dataset_lines, row, line, LINE_DATASET, 1, row->self_ns, 0);

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
            tally_line(f, &f->small_ops, row, line, LINE_SMALL_OPS, 1, row->cost_ns, 0);
        }
    }
    if (has_prefix(row->api, "torch.optim.") && has_suffix(row->api, ".step") && inside.foreach_calls == 0 &&
        inside.fused_calls == 0 && inside.inplace_calls >= 4) {
        size_t len = join_key(key, line, row->api.ptr, row->api.len < 70 ? row->api.len : 70);
        tally(f, &f->single_tensor_opt, row, NULL, key, len, 1, row->cost_ns, inside.inplace_calls);
    }
    /* set_to_none=True touches no gradient; False detaches and zeroes each (one by one, or with
     * torch._foreach_zero_, which is private and not recorded: its detach_/requires_grad_ are) */
    if (has_prefix(row->api, "torch.optim.") && has_suffix(row->api, ".zero_grad") &&
        (inside.fills > 0 || inside.inplace_calls > 0))
        tally_line(f, &f->fills, row, line, LINE_FILLS, 1, row->cost_ns,
                   inside.inplace_calls > inside.fills ? inside.inplace_calls : inside.fills);
    /* a convolution with a bias, then a batch norm of the same parent: the norm cancels the bias */
    sibling_t *before = &t->last[d];
    /* (BatchNorm2d's forward is _BatchNorm's, a private class's: its F.batch_norm is the sibling seen) */
    int norm = is_module_forward(row->api, "torch.nn.BatchNorm") || is(row->api, "torch.nn.functional.batch_norm");
    if (norm && before->conv && before->parent_id == row->parent_id) {
        const char *module = before->module[0] ? before->module : "(the model)";
        size_t len = join_key(key, line, module, strlen(module));
        tally(f, &f->conv_bn, row, NULL, key, len, 1, 0, 0);
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
    tally_t *tallies[] = {&f->loader_wait, &f->dataset_lines, &f->syncs, &f->gaps, &f->small_ops,
                          &f->single_tensor_opt, &f->fills, &f->conv_bn, &f->compiles, &f->kept_bytes};
    for (size_t i = 0; i < sizeof tallies / sizeof *tallies; i++) {
        report_group_table_free(&tallies[i]->all);
        report_group_table_free(&tallies[i]->first);
    }
    for (size_t i = 0; i < f->nfound; i++)
        for (size_t k = 0; k < f->found[i].nwhere; k++)
            free(f->found[i].where[k]);
    free(f->found);
    free(f->threads);
    free(f->lines);
    free(f->steps);
    free(f);
}

void report_findings_use_ranks(report_sink_t *findings, report_sink_t *ranks)
{
    ((findings_t *)findings)->ranks = ranks;
}

static int findings_print(report_sink_t *sink, const report_pass_t *pass, FILE *out, FILE *err)
{
    findings_t *f = (findings_t *)sink;
    findings_add_stragglers(f);
    (void)pass;
    (void)err;
    if (f->o->findings) /* (for --html alone, the page shows them) */
        report_findings_print(f->o, f->found, f->nfound, f->run_ms, f->nsteps, out);
    return 0;
}

const finding_t *report_findings_result(const report_sink_t *sink, size_t *count)
{
    findings_t *f = (findings_t *)sink;
    findings_add_stragglers(f);
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
    *sink = &f->sink;
    return 0;
}
