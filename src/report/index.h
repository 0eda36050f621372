/* SPDX-License-Identifier: MIT */
/*
 * The pass's one index of calls, for the joins every sink needs: a call's row is written when it
 * returns, after the rows of the calls inside it, and a backward node's row after its forward
 * call's (or, from another thread, before it). So a later row asks what an earlier one was (a
 * backward node its forward call's thread and stack), and an earlier row waits for a later one (a
 * child for its parent, a node for a forward call not read yet). One policy, one bound, tested once
 * (tests/c/test_report_index.c); the pass (pass.h) owns it and hands it to the sinks it opens.
 *
 *   recent calls  the last REPORT_INDEX_RECENT call rows read, by (pid, call id): parent, thread,
 *                 site, and a value of each sink's own (REPORT_USE_*). Exactly the last ones: the
 *                 oldest leaves when a new one comes (a FIFO), whatever the ids; a call read again
 *                 (files given twice) keeps its place. Memory: fixed, made on the first row.
 *   waiting       entries keyed by (pid, id, tag) waiting for a row that has not come: a sink's
 *                 children for their parent, its nodes for their forward call. Several may share a
 *                 key; they are found oldest first. At most REPORT_INDEX_WAITING at once (what the
 *                 calls still open have below them, never the run's length): past that an entry is
 *                 refused (NULL), and the sink treats it as one whose row never comes, and says it
 *                 counted out of memory (sink.h's TW_ENOMEM).
 *
 * Each pass reads on one thread and has its own index (jobs.c: a thread's pass, its own).
 */
#ifndef TW_REPORT_INDEX_H
#define TW_REPORT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/reader.h"

#define REPORT_INDEX_RECENT (1u << 16)
#define REPORT_INDEX_WAITING (1u << 18)

/* Whose value a recent call carries. */
enum { REPORT_USE_TRACE = 0, REPORT_USE_FLAME = 1, REPORT_USES = 2 };

typedef struct report_call {
    int64_t pid;
    uint64_t call_id; /* 0: an empty slot */
    uint64_t parent_id, tid;
    uint32_t site;
    uint8_t marks;    /* bit 1 << REPORT_USE_x: value[x] is set */
    uint64_t value[REPORT_USES];
} report_call_t;

/* What waits: the tags, one per sink and purpose. */
enum {
    REPORT_WAIT_NONE = 0,          /* an empty slot */
    REPORT_WAIT_PARENT_CHILDREN,   /* --by parent: a parent's children (aggregate.c) */
    REPORT_WAIT_FLAME_CHILDREN,    /* the flame graph: the node a parent's children wait in */
    REPORT_WAIT_FLAME_FORWARD,     /* the flame graph: nodes waiting for their forward call */
    REPORT_WAIT_TRACE_FORWARD,     /* --trace: a node written before its forward call */
    REPORT_WAIT_MODULE_GPU,        /* --by module: the GPU time of a call's calls inside (aggregate.c) */
};

typedef struct report_wait {
    int64_t pid;
    uint64_t id;
    uint32_t tag;   /* REPORT_WAIT_*; REPORT_WAIT_NONE: an empty slot */
    void *ptr;      /* the sink's, as are a and b */
    uint64_t a, b;
} report_wait_t;

typedef struct report_index {
    int recent_wanted;             /* some sink reads recent calls: the pass notes every call row */
    report_call_t *recent;         /* 2 * REPORT_INDEX_RECENT slots, open addressing */
    struct report_call_key { int64_t pid; uint64_t call_id; } *order; /* a ring, oldest at next */
    size_t next;
    report_call_t *last;           /* the call noted last: the sinks ask for it right after */
    int recent_failed;             /* no memory for recent: nothing is found */
    report_wait_t *waiting;        /* open addressing, at most half full */
    size_t waiting_capacity, nwaiting;
} report_index_t;

/* ---- recent calls ---- */

/* Notes a call row (the pass, before its sinks see it, when recent_wanted). */
void report_index_note(report_index_t *x, const tw_row_t *row);

/* The recent call (pid, call_id), or NULL: not read, or read before the last REPORT_INDEX_RECENT. The
 * pointer is the index's, good until the next note. */
report_call_t *report_index_call(report_index_t *x, int64_t pid, uint64_t call_id);

/* The same, when sink `use` set its value on it; else NULL. */
static inline report_call_t *report_index_call_of(report_index_t *x, int64_t pid, uint64_t call_id, unsigned use)
{
    report_call_t *c = report_index_call(x, pid, call_id);
    return c != NULL && (c->marks & (1u << use)) ? c : NULL;
}

static inline void report_index_set(report_call_t *c, unsigned use, uint64_t value)
{
    c->value[use] = value;
    c->marks |= (uint8_t)(1u << use);
}

/* ---- waiting entries ---- */

/* The oldest entry waiting under (pid, id, tag), or NULL. Good until the next add or remove. */
report_wait_t *report_index_waiting(report_index_t *x, int64_t pid, uint64_t id, uint32_t tag);

/* A new entry under (pid, id, tag), zeroed but for its key, after those already there; NULL at the
 * bound (REPORT_INDEX_WAITING) or out of memory. Good until the next add or remove. */
report_wait_t *report_index_wait(report_index_t *x, int64_t pid, uint64_t id, uint32_t tag);

/* Removes w (from report_index_waiting, or report_index_next). */
void report_index_remove(report_index_t *x, report_wait_t *w);

/* For what is left once the rows are all read: the first entry of tag in slot order from *at on (a
 * cursor, 0 to begin), or NULL. Removing the entry returned and calling again goes on right. */
report_wait_t *report_index_next(report_index_t *x, uint32_t tag, size_t *at);

void report_index_free(report_index_t *x);

#endif
