/* SPDX-License-Identifier: MIT */
/*
 * The profiler's own cost on the threads that call torch: what every run says it cost (the
 * manifest's "own_cost", stats()["own_cost"]), measured, not assumed.
 *
 * One recorded call in TW_OWN_PERIOD on each thread takes a measured path (wrapper.c): two more
 * clock reads, at the wrapper's entry and exit; its own time is that span less the call's recorded
 * cost and less the model watch's hooks (counted apart, every one). Sampling a fixed period is
 * unbiased for a mix of calls that repeats step after step, and costs the common path one
 * decrement and one predictable branch. The autograd node hooks measure themselves the same way
 * (backward.h); writing's part is the writer's (writer.h). Guarded by the GIL.
 */
#ifndef TW_PY_OWN_COST_H
#define TW_PY_OWN_COST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "torchwrapper/torchwrapper.h"

#define TW_OWN_PERIOD 64 /* one recorded call in this many on a thread is measured */

/* A measured span above this is not the profiler's work but the thread's time off the CPU (a busy
 * machine preempts one sample in some thousands, for milliseconds: a few of them made the mean per
 * call 6 us instead of 0.5) or writing for a late writer thread (counted apart: the writer's
 * help_ns): left out of the mean, counted as an outlier. The costliest own work of a call (an
 * argument summary of many tensors, a new call site's walk) takes a few microseconds. */
#define TW_OWN_SAMPLE_MAX_NS 50000

/* Steps with detail (argument summaries, autograd nodes, FLOPs: the costly part) and steps without
 * cost differently a call: counted apart. */
enum { TW_OWN_PLAIN, TW_OWN_DETAIL, TW_OWN_KINDS };

typedef struct {
    uint64_t periods[TW_OWN_KINDS]; /* measured calls attempted: TW_OWN_PERIOD recorded calls each */
    uint64_t samples[TW_OWN_KINDS]; /* of which measured (the call's record found) */
    uint64_t ticks[TW_OWN_KINDS];   /* the wrappers' own ticks in those */
    uint64_t outliers;              /* measured calls left out: a span past max_ticks */
    uint64_t max_ticks;             /* TW_OWN_SAMPLE_MAX_NS in the session's clock's ticks */
    uint64_t hook_ticks;            /* the model watch's hooks, every one */
} tw_own_calls_t;

extern tw_own_calls_t tw_own_calls;

/* A session starts recording (its clock): counts from zero. */
void tw_own_begin(const tw_clock_t *clock);

/*
 * A measured call (wrapper.c's measured path) on t: entry and exit read around all of its wrapper,
 * id the call id it was to take (0: unknown), excluded_before t's excluded ticks at entry. Its own
 * time is counted when its record is the last of t's chunk; else only the attempt.
 */
static inline void tw_own_sample(const tw_thread_t *t, int kind, uint64_t id, uint64_t entry, uint64_t exit,
                                 uint64_t excluded_before)
{
    tw_own_calls.periods[kind]++;
    const tw_chunk_t *chunk = t->chunk;
    if (id == 0 || chunk == NULL || chunk->count == 0 || chunk->records[chunk->count - 1].call_id != id)
        return; /* a new id block, a chunk handed over, a call past the depth: not this one's record */
    uint64_t span = exit - entry;
    uint64_t inside = chunk->records[chunk->count - 1].cost + (t->excluded_ticks - excluded_before);
    uint64_t own = span > inside ? span - inside : 0;
    if (own > tw_own_calls.max_ticks) {
        tw_own_calls.outliers++;
        return;
    }
    tw_own_calls.samples[kind]++;
    tw_own_calls.ticks[kind] += own;
}

/* The figures a run reports, in ns (the clock's ticks converted). */
typedef struct {
    uint64_t calls;                 /* recorded calls the samples stand for */
    uint64_t samples;               /* measured calls */
    uint64_t outliers;              /* measured calls and nodes left out (TW_OWN_SAMPLE_MAX_NS) */
    double call_ns[TW_OWN_KINDS];   /* own time per recorded call (0: none measured) */
    uint64_t calls_ns;              /* the wrappers' own time, all calls */
    uint64_t hooks_ns;              /* the model watch's hooks */
    uint64_t nodes;                 /* autograd nodes recorded */
    double node_ns;                 /* the node hooks' own time per node (0: none measured) */
    uint64_t nodes_ns;
    uint64_t total_ns;              /* calls_ns + hooks_ns + nodes_ns */
    uint64_t run_ns;                /* the session's recording time, start to stop */
} tw_own_figures_t;

/* The session gen's figures now; the node hooks' only when with_nodes (read after they stopped,
 * tw_backward_stop: while they run, their counters are their threads'). */
void tw_own_figures(const tw_clock_t *clock, uint64_t gen, int with_nodes, uint64_t run_ticks,
                    tw_own_figures_t *out);

/* f as the manifest's "own_cost" (JSON text into out, size bytes); the length, or -1 when cut. */
int tw_own_json(const tw_own_figures_t *f, char *out, size_t size);

/* f as a dict (stats()["own_cost"]); a new reference, or NULL with an exception. */
PyObject *tw_own_dict(const tw_own_figures_t *f);

#endif
