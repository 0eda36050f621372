/* SPDX-License-Identifier: MIT */
/*
 * The pass's index of calls (index.h): the last REPORT_INDEX_RECENT calls read, and the entries
 * waiting for a row that has not come. Both are open-addressing tables with linear probing, at
 * most half full, whose removals shift the entries after them back (no tombstones: a lookup never
 * slows down with the run's length), keyed by report_pid_id_hash.
 */
#include "config.h"
#include "index.h"

#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "groups.h"

#define RECENT_SLOTS (2 * (size_t)REPORT_INDEX_RECENT)

/* ---- recent calls ------------------------------------------------------------------------------ */

/* The slot of (pid, call_id): its own, or the empty one where it would go. */
static size_t recent_slot(const report_index_t *x, int64_t pid, uint64_t call_id)
{
    size_t j = report_pid_id_hash(pid, call_id) & (RECENT_SLOTS - 1);
    while (x->recent[j].call_id != 0 && !(x->recent[j].call_id == call_id && x->recent[j].pid == pid))
        j = (j + 1) & (RECENT_SLOTS - 1);
    return j;
}

report_call_t *report_index_call(report_index_t *x, int64_t pid, uint64_t call_id)
{
    if (x->recent == NULL || call_id == 0)
        return NULL;
    if (x->last != NULL && x->last->call_id == call_id && x->last->pid == pid)
        return x->last;
    report_call_t *c = &x->recent[recent_slot(x, pid, call_id)];
    return c->call_id != 0 ? c : NULL;
}

/* Removes the call in slot i, shifting back the ones after it that would be found through it. */
static void recent_remove(report_index_t *x, size_t i)
{
    x->recent[i].call_id = 0;
    x->last = NULL; /* entries move */
    for (size_t j = (i + 1) & (RECENT_SLOTS - 1); x->recent[j].call_id != 0; j = (j + 1) & (RECENT_SLOTS - 1)) {
        report_call_t moved = x->recent[j];
        x->recent[j].call_id = 0;
        x->recent[recent_slot(x, moved.pid, moved.call_id)] = moved;
    }
}

void report_index_note(report_index_t *x, const tw_row_t *row)
{
    if (row->call_id == 0 || x->recent_failed)
        return;
    if (x->recent == NULL) {
        x->recent = calloc(RECENT_SLOTS, sizeof *x->recent);
        x->order = calloc(REPORT_INDEX_RECENT, sizeof *x->order);
        if (x->recent == NULL || x->order == NULL) {
            free(x->recent);
            free(x->order);
            x->recent = NULL;
            x->order = NULL;
            x->recent_failed = 1; /* nothing is found: nodes stay where they ran, no arrows */
            return;
        }
    }
    report_call_t c = {row->pid, row->call_id, row->parent_id, row->tid, row->site, 0, {0}};
    size_t at = recent_slot(x, row->pid, row->call_id);
    if (x->recent[at].call_id != 0) { /* read again (files given twice): it keeps its place in the ring */
        x->recent[at] = c;
        x->last = &x->recent[at];
        return;
    }
    struct report_call_key *oldest = &x->order[x->next];
    if (oldest->call_id != 0) { /* full: the oldest leaves */
        recent_remove(x, recent_slot(x, oldest->pid, oldest->call_id));
        at = recent_slot(x, row->pid, row->call_id);
    }
    x->recent[at] = c;
    x->last = &x->recent[at];
    *oldest = (struct report_call_key){row->pid, row->call_id};
    x->next = (x->next + 1) % REPORT_INDEX_RECENT;
}

/* ---- waiting entries --------------------------------------------------------------------------- */

static size_t wait_home(const report_index_t *x, int64_t pid, uint64_t id, uint32_t tag)
{
    return (report_pid_id_hash(pid, id) ^ (uint64_t)tag * 0xFF51AFD7ED558CCDull) & (x->waiting_capacity - 1);
}

static int same_key(const report_wait_t *w, int64_t pid, uint64_t id, uint32_t tag)
{
    return w->tag == tag && w->id == id && w->pid == pid;
}

report_wait_t *report_index_waiting(report_index_t *x, int64_t pid, uint64_t id, uint32_t tag)
{
    if (x->nwaiting == 0)
        return NULL;
    size_t mask = x->waiting_capacity - 1;
    for (size_t j = wait_home(x, pid, id, tag); x->waiting[j].tag != REPORT_WAIT_NONE; j = (j + 1) & mask)
        if (same_key(&x->waiting[j], pid, id, tag))
            return &x->waiting[j];
    return NULL;
}

/* The first empty slot from w's home on: entries of one key stay in the order they came. */
static size_t wait_place(const report_index_t *x, const report_wait_t *w)
{
    size_t mask = x->waiting_capacity - 1, j = wait_home(x, w->pid, w->id, w->tag);
    while (x->waiting[j].tag != REPORT_WAIT_NONE)
        j = (j + 1) & mask;
    return j;
}

static int wait_grow(report_index_t *x)
{
    size_t capacity = x->waiting_capacity ? x->waiting_capacity * 2 : 1024;
    report_wait_t *old = x->waiting;
    size_t old_capacity = x->waiting_capacity;
    if ((x->waiting = calloc(capacity, sizeof *x->waiting)) == NULL) {
        x->waiting = old;
        return TW_ENOMEM;
    }
    x->waiting_capacity = capacity;
    /* in the old probe order from a slot that begins no chain: the order within each key stays */
    size_t start = 0;
    while (start < old_capacity && old[start].tag != REPORT_WAIT_NONE)
        start++;
    for (size_t k = 0; k < old_capacity; k++) {
        const report_wait_t *w = &old[(start + k) & (old_capacity - 1)];
        if (w->tag != REPORT_WAIT_NONE)
            x->waiting[wait_place(x, w)] = *w;
    }
    free(old);
    return 0;
}

report_wait_t *report_index_wait(report_index_t *x, int64_t pid, uint64_t id, uint32_t tag)
{
    if (x->nwaiting >= REPORT_INDEX_WAITING)
        return NULL; /* the bound: treated as never taken */
    if ((x->nwaiting + 1) * 2 > x->waiting_capacity && wait_grow(x) != 0)
        return NULL;
    report_wait_t w = {.pid = pid, .id = id, .tag = tag};
    report_wait_t *at = &x->waiting[wait_place(x, &w)];
    *at = w;
    x->nwaiting++;
    return at;
}

void report_index_remove(report_index_t *x, report_wait_t *w)
{
    size_t mask = x->waiting_capacity - 1, i = (size_t)(w - x->waiting);
    x->waiting[i] = (report_wait_t){0};
    x->nwaiting--;
    for (size_t j = (i + 1) & mask; x->waiting[j].tag != REPORT_WAIT_NONE; j = (j + 1) & mask) {
        report_wait_t moved = x->waiting[j];
        x->waiting[j] = (report_wait_t){0};
        x->waiting[wait_place(x, &moved)] = moved;
    }
}

report_wait_t *report_index_next(report_index_t *x, uint32_t tag, size_t *at)
{
    for (; *at < x->waiting_capacity; ++*at)
        if (x->waiting[*at].tag == tag)
            return &x->waiting[*at];
    return NULL;
}

void report_index_free(report_index_t *x)
{
    free(x->recent);
    free(x->order);
    free(x->waiting);
    memset(x, 0, sizeof *x);
}
