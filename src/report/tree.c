/* SPDX-License-Identifier: MIT */
/*
 * tw-report, --tree: the calls of one step of one thread, kept while the rows stream by, then printed
 * as a tree. A sink (sink.h) that prints instead of the table.
 */
#include "config.h"
#include "tree.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "util.h"

typedef struct tree_call {
    uint64_t call_id, start_ns, cost_ns, self_ns, depth, site, parent_id, fwd_call_id;
    char *api, *module;
    /* while printing: the tree as shown (nodes charged to their forward call, or where they ran) */
    size_t first_child, last_child, next_sibling; /* indexes + 1; 0: none */
    uint64_t parent_site; /* the site of the call it is shown under (0 for a top call) */
} tree_call_t;

typedef struct tree_calls {
    tree_call_t *items;
    size_t count, capacity;
} tree_calls_t;

typedef struct tree {
    report_sink_t sink;
    const options_t *o;
    const report_sites_t *sites; /* to name the calls' sites */
    int have_tid;
    uint64_t tid;
    int64_t pid;
    int64_t boundaries; /* outermost boundary calls seen: the step the next outermost call is in */
    int64_t column_steps; /* by the step column: 1 + the largest step of an outermost call; 0: none */
    tree_calls_t pending;  /* calls inside the outermost call not yet returned (rows come children first) */
    tree_calls_t selected; /* the step's calls */
} tree_t;

static void tree_calls_clear(tree_calls_t *c)
{
    for (size_t i = 0; i < c->count; i++) {
        free(c->items[i].api);
        free(c->items[i].module);
    }
    c->count = 0;
}

static char *copy_str(tw_str_t s)
{
    char *copy = malloc(s.len + 1);
    if (copy != NULL) {
        memcpy(copy, s.ptr, s.len);
        copy[s.len] = '\0';
    }
    return copy;
}

static int tree_calls_add(tree_calls_t *c, const tw_row_t *row)
{
    if (c->count == c->capacity) {
        size_t capacity = c->capacity ? c->capacity * 2 : 256;
        tree_call_t *items = realloc(c->items, capacity * sizeof *items);
        if (items == NULL)
            return TW_ENOMEM;
        c->items = items;
        c->capacity = capacity;
    }
    tree_call_t *t = &c->items[c->count];
    *t = (tree_call_t){row->call_id, row->start_ns, row->cost_ns, row->self_ns, row->depth, row->site,
                       row->parent_id, row->fwd_call_id, copy_str(row->api), copy_str(row->module), 0, 0, 0, 0};
    if (t->api == NULL || t->module == NULL) {
        free(t->api);
        free(t->module);
        return TW_ENOMEM;
    }
    c->count++;
    return 0;
}

static int compare_tree_calls(const void *a, const void *b)
{
    const tree_call_t *x = a, *y = b;
    /* Start order is the tree's pre-order on one thread; a child starting in the same nanosecond as
     * its parent comes after it. */
    if (x->start_ns != y->start_ns)
        return x->start_ns < y->start_ns ? -1 : 1;
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

static int compare_ids(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The index of call id in ids (pairs: id, index; sorted), or SIZE_MAX. */
static size_t index_of(const uint64_t *ids, size_t count, uint64_t id)
{
    uint64_t key[2] = {id, 0};
    const uint64_t *hit = bsearch(key, ids, count, 2 * sizeof *ids, compare_ids);
    return hit != NULL ? (size_t)hit[1] : SIZE_MAX;
}

/*
 * Links the step's calls (in start order) into the tree as shown: a call below its parent, and in
 * the charged view (timeline 0) an autograd node below the forward call that created it when that is
 * in the step (after the forward call's own children: it ran later). A call with no parent shown is
 * a root: its depth is set to UINT64_MAX. Returns a stack of count entries for the printer's walk,
 * or NULL without memory.
 */
static size_t *link_tree(tree_calls_t *c, int timeline)
{
    uint64_t *ids = malloc(2 * c->count * sizeof *ids + 1);
    size_t *stack = malloc(c->count * sizeof *stack + 1);
    if (ids == NULL || stack == NULL) {
        free(ids);
        free(stack);
        return NULL;
    }
    for (size_t i = 0; i < c->count; i++) {
        ids[2 * i] = c->items[i].call_id;
        ids[2 * i + 1] = i;
    }
    qsort(ids, c->count, 2 * sizeof *ids, compare_ids);
    for (size_t i = 0; i < c->count; i++) {
        tree_call_t *call = &c->items[i];
        size_t parent = SIZE_MAX;
        if (!timeline && call->fwd_call_id != 0)
            parent = index_of(ids, c->count, call->fwd_call_id);
        if (parent == SIZE_MAX && call->parent_id != 0)
            parent = index_of(ids, c->count, call->parent_id);
        if (parent == SIZE_MAX) {
            call->depth = UINT64_MAX;
            continue;
        }
        tree_call_t *p = &c->items[parent];
        if (p->last_child != 0)
            c->items[p->last_child - 1].next_sibling = i + 1;
        else
            p->first_child = i + 1;
        p->last_child = i + 1;
    }
    free(ids);
    return stack;
}

/* Where the program made the call (config sites), or NULL: a call torch's code made carries the
 * site of the call around it, shown there already. */
static const char *shown_site(const tree_t *t, const tree_call_t *call)
{
    const char *site = t->sites != NULL ? report_site_text(t->sites, t->pid, call->site) : NULL;
    return site != NULL && call->site != call->parent_site ? site : NULL;
}

/* The calls in the order shown (order: n indexes of the step's calls), indented by level. */
static void tree_print_text(const tree_t *t, const size_t *order, size_t n, size_t shown, uint64_t total, FILE *out)
{
    const options_t *o = t->o;
    if (o->tree_step == REPORT_TREE_ALL)
        fprintf(out, "all calls (pid %" PRId64 ", thread %" PRIu64 "): %zu calls shown, %.3f ms\n", t->pid, t->tid,
                shown, (double)total / 1e6);
    else
        fprintf(out, "step %" PRId64 " (pid %" PRId64 ", thread %" PRIu64 "): %zu calls shown, %.3f ms\n",
                o->tree_step, t->pid, t->tid, shown, (double)total / 1e6);
    for (size_t i = 0; i < n; i++) {
        const tree_call_t *call = &t->selected.items[order[i]];
        if (o->max_depth != 0 && call->depth >= o->max_depth)
            continue;
        fprintf(out, "%*s%s", (int)(2 * (call->depth + 1)), "", call->api);
        if (call->module[0] != '\0')
            fprintf(out, " [%s]", call->module);
        if (call->fwd_call_id != 0 && !o->backward_timeline)
            fprintf(out, "  (backward)");
        const char *site = shown_site(t, call);
        if (site != NULL)
            fprintf(out, "  @ %s", site);
        fprintf(out, "  %.3f ms  (self %.3f ms)\n", (double)call->cost_ns / 1e6, (double)call->self_ns / 1e6);
    }
}

/* The same as JSON, for programs (torchwrapper.call_tree formats its text from it): the calls in
 * the order shown, each with its level (0: a root) and the nanoseconds the text rounds. */
static void tree_print_json(const tree_t *t, const size_t *order, size_t n, size_t shown, uint64_t total, FILE *out)
{
    const options_t *o = t->o;
    if (o->tree_step == REPORT_TREE_ALL)
        fputs("{\"step\":null", out);
    else
        fprintf(out, "{\"step\":%" PRId64, o->tree_step);
    fprintf(out, ",\"pid\":%" PRId64 ",\"tid\":%" PRIu64 ",\"shown\":%zu,\"total_ns\":%" PRIu64 ",\"calls\":[", t->pid,
            t->tid, shown, total);
    size_t written = 0;
    for (size_t i = 0; i < n; i++) {
        const tree_call_t *call = &t->selected.items[order[i]];
        if (o->max_depth != 0 && call->depth >= o->max_depth)
            continue;
        fprintf(out, "%s{\"level\":%" PRIu64 ",\"call_id\":%" PRIu64 ",\"api\":", written++ ? ",\n" : "\n",
                call->depth, call->call_id);
        report_json_text(out, call->api);
        fputs(",\"module\":", out);
        if (call->module[0] != '\0')
            report_json_text(out, call->module);
        else
            fputs("null", out);
        fprintf(out, ",\"backward\":%s,\"site\":", call->fwd_call_id != 0 && !o->backward_timeline ? "true" : "false");
        const char *site = shown_site(t, call);
        if (site != NULL)
            report_json_text(out, site);
        else
            fputs("null", out);
        fprintf(out, ",\"cost_ns\":%" PRIu64 ",\"self_ns\":%" PRIu64 "}", call->cost_ns, call->self_ns);
    }
    fputs("\n]}\n", out);
}

/* The step's calls as a tree: 0, or after a message on err -ENOENT (the step is not in the records) or
 * TW_ENOMEM. */
static int tree_print(report_sink_t *sink, const report_pass_t *pass, FILE *out, FILE *err)
{
    tree_t *t = (tree_t *)sink;
    const options_t *o = t->o;
    tree_calls_t *c = &t->selected;
    if ((!t->have_tid || c->count == 0) && t->column_steps > 0) {
        fprintf(err, "tw-report: step %" PRId64 " is not in the records: steps 0 to %" PRId64 " of thread %" PRIu64
                     " of pid %" PRId64 " (the step column; --boundary counts boundary calls instead)%s\n",
                o->tree_step, t->column_steps - 1, t->tid, t->pid,
                o->npids || o->ntids ? "" : "; the tree is of the first thread read: give --pid N (a rank's) or --tid N "
                                            "for another");
        return -ENOENT;
    }
    if (c->count == 0 && o->tree_step == REPORT_TREE_ALL) {
        fprintf(err, "tw-report: no calls in the records%s\n",
                o->npids || o->ntids ? " of the --pid, --tid given" : "");
        return -ENOENT;
    }
    if (!t->have_tid || c->count == 0) {
        fprintf(err, "tw-report: step %" PRId64 " is not in the records: %" PRId64 " step(s) of thread %" PRIu64
                     " of pid %" PRId64 ", each ending with an outermost call of '%s' (--boundary)%s\n",
                o->tree_step, t->boundaries + (t->pending.count > 0), t->tid, t->pid, o->boundary,
                o->npids || o->ntids ? "" : "; the tree is of the first thread read: give --pid N (a rank's) or --tid N "
                                            "for another");
        return -ENOENT;
    }
    qsort(c->items, c->count, sizeof *c->items, compare_tree_calls);
    uint64_t total = 0;
    for (size_t i = 0; i < c->count; i++)
        total += c->items[i].depth == 0 ? c->items[i].cost_ns : 0;
    size_t *stack = link_tree(c, o->backward_timeline), *order = malloc(c->count * sizeof *order + 1);
    if (stack == NULL || order == NULL) {
        free(stack);
        free(order);
        fprintf(err, "tw-report: out of memory for the tree of %zu calls\n", c->count);
        return TW_ENOMEM;
    }
    /* depth-first from the roots (calls whose parent is not in the step, in start order): the order
     * shown, each call's depth its level in it */
    size_t top = 0, n_order = 0;
    for (size_t i = c->count; i-- > 0;)
        if (c->items[i].depth == UINT64_MAX) {
            c->items[i].depth = 0;
            stack[top++] = i;
        }
    while (top > 0) {
        size_t i = stack[--top];
        order[n_order++] = i;
        size_t n = 0; /* children pushed last-first, so that they come out in start order */
        for (size_t k = c->items[i].first_child; k != 0; k = c->items[k - 1].next_sibling)
            n++;
        size_t at = top + n;
        for (size_t k = c->items[i].first_child; k != 0; k = c->items[k - 1].next_sibling) {
            c->items[k - 1].depth = c->items[i].depth + 1;
            c->items[k - 1].parent_site = c->items[i].site;
            stack[--at] = k - 1;
        }
        top += n;
    }
    size_t shown = 0;
    for (size_t i = 0; i < n_order; i++)
        shown += o->max_depth == 0 || c->items[order[i]].depth < o->max_depth;
    if (o->format == OUT_JSON)
        tree_print_json(t, order, n_order, shown, total, out);
    else
        tree_print_text(t, order, n_order, shown, total, out);
    free(order);
    free(stack);
    return 0;
}

/* --tree: rows of the chosen thread wait until their outermost call returns, then belong to the
 * step that call is in: only that step's rows are kept. */
static int tree_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    tree_t *t = (tree_t *)sink;
    const options_t *o = t->o;
    int rc = 0;
    /* The step column, where rows have it, is the step as the session decided it (optimizer steps,
     * prof.step(), a schedule); files without it, or --boundary, count boundary calls. */
    int by_column = row->step >= 0 && !o->boundary_given;
    if (row->kind != TW_FILE_CALLS || (!by_column && t->boundaries > o->tree_step))
        return 0;
    if (!t->have_tid) {
        if (o->ntids && row->tid != o->tids[0])
            return 0;
        t->have_tid = 1; /* the first call's thread, or the first --tid, in the process it is seen in */
        t->tid = row->tid;
        t->pid = row->pid;
    }
    if (row->tid != t->tid || row->pid != t->pid)
        return 0;
    if (o->tree_step == REPORT_TREE_ALL) /* --tree all: every call of the thread */
        return tree_calls_add(&t->selected, row);
    if (tree_calls_add(&t->pending, row) != 0)
        return TW_ENOMEM;
    if (row->depth != 0)
        return 0;
    if (by_column && row->step >= t->column_steps)
        t->column_steps = row->step + 1;
    if (by_column ? row->step == o->tree_step : t->boundaries == o->tree_step) {
        for (size_t i = 0; i < t->pending.count; i++) {
            if (t->selected.count == t->selected.capacity) {
                size_t capacity = t->selected.capacity ? t->selected.capacity * 2 : 256;
                tree_call_t *items = realloc(t->selected.items, capacity * sizeof *items);
                if (items == NULL) {
                    rc = TW_ENOMEM;
                    break;
                }
                t->selected.items = items;
                t->selected.capacity = capacity;
            }
            t->selected.items[t->selected.count++] = t->pending.items[i]; /* ownership moves */
        }
        t->pending.count = 0;
    } else {
        tree_calls_clear(&t->pending);
    }
    if (by_column)
        return rc;
    char api[1024];
    size_t len = row->api.len < sizeof api - 1 ? row->api.len : sizeof api - 1;
    memcpy(api, row->api.ptr, len);
    api[len] = '\0';
    if (fnmatch(o->boundary, api, 0) == 0)
        t->boundaries++;
    return rc;
}

static void tree_free(report_sink_t *sink)
{
    tree_t *t = (tree_t *)sink;
    tree_calls_clear(&t->pending);
    tree_calls_clear(&t->selected);
    free(t->pending.items);
    free(t->selected.items);
    free(t);
}

static const report_sink_ops_t tree_ops = {
    .name = "tree",
    .row = tree_row,
    .print = tree_print,
    .free = tree_free,
};

int report_tree_new(const options_t *o, const report_sites_t *sites, report_sink_t **sink)
{
    tree_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return TW_ENOMEM;
    t->sink = (report_sink_t){&tree_ops, SINK_ROWS_KEPT};
    t->o = o;
    t->sites = sites;
    *sink = &t->sink;
    return 0;
}
