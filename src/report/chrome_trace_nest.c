/* SPDX-License-Identifier: MIT */
/*
 * tw-report --trace: each thread's events held until the outermost call around them has come (a
 * call's row comes after the rows of the calls inside it), then written parent first, each clipped
 * to its parent and to the sibling before it: complete events of one thread nest strictly, as
 * Perfetto needs to draw them right (it mis-draws overlapping slices). With one clock the records
 * nest already and nothing moves; clipping is for what does not (the CUDA calls of CUPTI's clock,
 * records of a process whose clock was moved...). See chrome_trace_types.h.
 *
 * Memory: the events inside one outermost call of a thread. Past TRACE_HOLD_MAX of them (a call
 * around a whole epoch), what the thread holds is written as it is, each held subtree nested in
 * itself; the call that comes later is not clipped around them.
 */
#include "config.h"
#include "chrome_trace_nest.h"

#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "chrome_trace_events.h"
#include "chrome_trace_tracks.h"

#define TRACE_HOLD_MAX (1u << 17)

static uint32_t node_new(trace_thread_t *th)
{
    if (th->nnodes == th->node_capacity) {
        uint32_t capacity = th->node_capacity ? th->node_capacity * 2 : 256;
        void *bigger = realloc(th->nodes, capacity * sizeof *th->nodes);
        if (bigger == NULL)
            return TRACE_NONE;
        th->nodes = bigger;
        th->node_capacity = capacity;
    }
    trace_node_t *n = &th->nodes[th->nnodes];
    memset(n, 0, sizeof *n);
    n->first_child = n->last_child = n->next = n->launch = TRACE_NONE;
    n->step = -1;
    return th->nnodes++;
}

static int root_push(trace_thread_t *th, uint32_t i)
{
    if (th->nroots == th->root_capacity) {
        uint32_t capacity = th->root_capacity ? th->root_capacity * 2 : 64;
        void *bigger = realloc(th->roots, capacity * sizeof *th->roots);
        if (bigger == NULL)
            return TW_ENOMEM;
        th->roots = bigger;
        th->root_capacity = capacity;
    }
    th->roots[th->nroots++] = i;
    return 0;
}

/* Inserts child c among the children of parent p, in start order (children mostly come in it). */
static void child_insert(trace_thread_t *th, uint32_t p, uint32_t c)
{
    trace_node_t *parent = &th->nodes[p], *child = &th->nodes[c];
    if (parent->first_child == TRACE_NONE) {
        parent->first_child = parent->last_child = c;
        return;
    }
    if (th->nodes[parent->last_child].ts <= child->ts) {
        th->nodes[parent->last_child].next = c;
        parent->last_child = c;
        return;
    }
    uint32_t *link = &parent->first_child;
    while (*link != TRACE_NONE && th->nodes[*link].ts <= child->ts)
        link = &th->nodes[*link].next;
    child->next = *link;
    *link = c;
}

static void clip_children(trace_thread_t *th, uint32_t i);

/* Clips node i into [lo, hi], and when that moved it, its children into it. */
static void clip(trace_thread_t *th, uint32_t i, int64_t lo, int64_t hi)
{
    trace_node_t *n = &th->nodes[i];
    if (n->ts >= lo && n->end <= hi && n->ts <= n->end)
        return; /* its children were clipped into it when it came */
    if (n->ts < lo)
        n->ts = lo;
    if (n->ts > hi)
        n->ts = hi;
    if (n->end > hi)
        n->end = hi;
    if (n->end < n->ts)
        n->end = n->ts;
    clip_children(th, i);
}

/* Each child into node i, after the end of the child before it. */
static void clip_children(trace_thread_t *th, uint32_t i)
{
    int64_t lo = th->nodes[i].ts, hi = th->nodes[i].end;
    for (uint32_t c = th->nodes[i].first_child; c != TRACE_NONE; c = th->nodes[c].next) {
        clip(th, c, lo, hi);
        lo = th->nodes[c].end;
    }
}

/* Writes node i, then what is inside it. */
static void write_tree(trace_t *t, trace_thread_t *th, uint32_t i)
{
    trace_write_node(t, th, &th->nodes[i]);
    for (uint32_t c = th->nodes[i].first_child; c != TRACE_NONE; c = th->nodes[c].next)
        write_tree(t, th, c);
}

/* Writes the outermost node i after the one written before it on the thread. */
static void write_root(trace_t *t, trace_thread_t *th, uint32_t i)
{
    clip(th, i, th->last_end, INT64_MAX);
    write_tree(t, th, i);
    th->last_end = th->nodes[i].end;
}

static void forget_all(trace_thread_t *th)
{
    th->nroots = 0;
    th->nnodes = 0;
    th->text_used = 0;
}

void trace_nest_flush(trace_t *t, trace_thread_t *th)
{
    for (uint32_t r = 0; r < th->nroots; r++)
        write_root(t, th, th->roots[r]);
    forget_all(th);
}

int trace_nest_call(trace_t *t, trace_thread_t *th, const tw_row_t *row, int64_t ts)
{
    uint32_t i = node_new(th);
    if (i == TRACE_NONE)
        return TW_ENOMEM;
    size_t text;
    uint32_t text_len;
    if (trace_format_call(t, th, row, &text, &text_len) != 0) {
        th->nnodes--;
        return TW_ENOMEM;
    }
    trace_node_t *n = &th->nodes[i];
    n->ts = ts;
    n->end = ts + (int64_t)row->cost_ns;
    n->step = row->step;
    n->call_id = row->call_id;
    n->parent_id = row->parent_id;
    n->depth = row->depth;
    n->fwd_call_id = row->fwd_call_id;
    n->text = text;
    n->text_len = text_len;
    /* Its children: the nodes held that name it their parent, or are deeper and began after it (a
     * call whose parent's record was lost). They came in the order they ended. */
    while (th->nroots > 0) {
        const trace_node_t *c = &th->nodes[th->roots[th->nroots - 1]];
        if (c->parent_id != row->call_id && !(c->depth > row->depth && c->ts >= ts))
            break;
        child_insert(th, i, th->roots[--th->nroots]);
    }
    /* The CUDA calls it made, among them. */
    int arrow = 0;
    for (uint32_t l = trace_launches_of(t, row->pid, row->call_id, &arrow); l != TRACE_NONE; l = t->launches[l].next) {
        uint32_t r = node_new(th);
        if (r == TRACE_NONE)
            break; /* that launch is not drawn */
        n = &th->nodes[i];
        trace_node_t *launch = &th->nodes[r];
        launch->kind = NODE_RUNTIME;
        launch->ts = t->launches[l].start;
        launch->end = t->launches[l].end > launch->ts ? t->launches[l].end : launch->ts;
        launch->call_id = row->call_id;
        launch->launch = l;
        child_insert(th, i, r);
    }
    n = &th->nodes[i];
    n->multi = 0;
    for (uint32_t c = n->first_child; c != TRACE_NONE; c = th->nodes[c].next) {
        const trace_node_t *child = &th->nodes[c];
        if (child->kind == NODE_CALL && (child->multi || (child->step >= 0 && child->step != n->step)))
            n->multi = 1;
    }
    n->kind = NODE_CALL;
    n->arrow = (uint8_t)arrow;
    clip_children(th, i);
    if (row->depth == 0 || row->parent_id == 0) {
        /* Outermost: nothing will take it, nor what is held before it (calls whose parent was lost). */
        for (uint32_t r = 0; r < th->nroots; r++)
            write_root(t, th, th->roots[r]);
        write_root(t, th, i);
        forget_all(th);
        return 0;
    }
    if (root_push(th, i) != 0) {
        trace_nest_flush(t, th);
        write_root(t, th, i);
        forget_all(th);
        return 0;
    }
    if (th->nnodes > TRACE_HOLD_MAX)
        trace_nest_flush(t, th);
    return 0;
}

void trace_nest_free(trace_thread_t *th)
{
    free(th->nodes);
    free(th->text);
    free(th->roots);
}
