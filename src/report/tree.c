/* SPDX-License-Identifier: MIT */
/*
 * tw-report, --tree: the calls of one step of one thread, kept while the rows stream by, then printed
 * as a tree.
 */
#include "config.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

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
                       copy_str(row->api), copy_str(row->module)};
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

void report_print_tree(FILE *out, FILE *err, const options_t *o, tree_t *t)
{
    tree_calls_t *c = &t->selected;
    if ((!t->have_tid || c->count == 0) && t->column_steps > 0) {
        fprintf(err, "tw-report: step %" PRId64 " is not in the records: steps 0 to %" PRId64 " of thread %" PRIu64
                     " of pid %" PRId64 " (the step column; --boundary counts boundary calls instead)%s\n",
                o->tree_step, t->column_steps - 1, t->tid, t->pid,
                o->npids || o->ntids ? "" : "; the tree is of the first thread read: give --pid N (a rank's) or --tid N "
                                            "for another");
        return;
    }
    if (!t->have_tid || c->count == 0) {
        fprintf(err, "tw-report: step %" PRId64 " is not in the records: %" PRId64 " step(s) of thread %" PRIu64
                     " of pid %" PRId64 ", each ending with an outermost call of '%s' (--boundary)%s\n",
                o->tree_step, t->boundaries + (t->pending.count > 0), t->tid, t->pid, o->boundary,
                o->npids || o->ntids ? "" : "; the tree is of the first thread read: give --pid N (a rank's) or --tid N "
                                            "for another");
        return;
    }
    qsort(c->items, c->count, sizeof *c->items, compare_tree_calls);
    uint64_t total = 0;
    size_t shown = 0;
    for (size_t i = 0; i < c->count; i++) {
        total += c->items[i].depth == 0 ? c->items[i].cost_ns : 0;
        shown += o->max_depth == 0 || c->items[i].depth < o->max_depth;
    }
    fprintf(out, "step %" PRId64 " (pid %" PRId64 ", thread %" PRIu64 "): %zu calls shown, %.3f ms\n", o->tree_step,
            t->pid, t->tid, shown, (double)total / 1e6);
    for (size_t i = 0; i < c->count; i++) {
        const tree_call_t *call = &c->items[i];
        if (o->max_depth != 0 && call->depth >= o->max_depth)
            continue;
        fprintf(out, "%*s%s", (int)(2 * (call->depth + 1)), "", call->api);
        if (call->module[0] != '\0')
            fprintf(out, " [%s]", call->module);
        const char *site = t->sites != NULL ? report_site_text(t->sites, t->pid, call->site) : NULL;
        if (site != NULL) /* where the program made the call (config sites) */
            fprintf(out, "  @ %s", site);
        fprintf(out, "  %.3f ms  (self %.3f ms)\n", (double)call->cost_ns / 1e6, (double)call->self_ns / 1e6);
    }
}

/* --tree: rows of the chosen thread wait until their outermost call returns, then belong to the
 * step that call is in: only that step's rows are kept. */
void report_tree_row(report_t *r, const tw_row_t *row)
{
    tree_t *t = &r->tree;
    /* The step column, where rows have it, is the step as the session decided it (optimizer steps,
     * prof.step(), a schedule); files without it, or --boundary, count boundary calls. */
    int by_column = row->step >= 0 && !r->o->boundary_given;
    if (row->kind != TW_FILE_CALLS || (!by_column && t->boundaries > r->o->tree_step))
        return;
    if (!t->have_tid) {
        if (r->o->ntids && row->tid != r->o->tids[0])
            return;
        t->have_tid = 1; /* the first call's thread, or the first --tid, in the process it is seen in */
        t->tid = row->tid;
        t->pid = row->pid;
    }
    if (row->tid != t->tid || row->pid != t->pid)
        return;
    if (tree_calls_add(&t->pending, row) != 0) {
        r->oom = 1;
        return;
    }
    if (row->depth != 0)
        return;
    if (by_column && row->step >= t->column_steps)
        t->column_steps = row->step + 1;
    if (by_column ? row->step == r->o->tree_step : t->boundaries == r->o->tree_step) {
        for (size_t i = 0; i < t->pending.count; i++) {
            if (t->selected.count == t->selected.capacity) {
                size_t capacity = t->selected.capacity ? t->selected.capacity * 2 : 256;
                tree_call_t *items = realloc(t->selected.items, capacity * sizeof *items);
                if (items == NULL) {
                    r->oom = 1;
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
        return;
    char api[1024];
    size_t len = row->api.len < sizeof api - 1 ? row->api.len : sizeof api - 1;
    memcpy(api, row->api.ptr, len);
    api[len] = '\0';
    if (fnmatch(r->o->boundary, api, 0) == 0)
        t->boundaries++;
}

void report_tree_free(tree_t *t)
{
    tree_calls_clear(&t->pending);
    tree_calls_clear(&t->selected);
    free(t->pending.items);
    free(t->selected.items);
}
