/* SPDX-License-Identifier: MIT */
/*
 * The recorder: per-thread record chunks filled without a lock, handed to the recorder a chunk at a
 * time.
 *
 * A caller (the Python extension's wrapper) brackets each profiled call with tw_call_begin() and
 * tw_call_end(). Both are inline and touch only the calling thread's tw_thread_t: no lock, no atomic
 * operation, no allocation except when a chunk fills up (once per TW_CHUNK_RECORDS calls) or a block
 * of call ids runs out (once per TW_CALL_ID_BLOCK calls).
 *
 * Threading contract: a tw_thread_t is used only by the thread it belongs to. tw_recorder_collect()
 * reads other threads' partial chunks, so the caller must make sure no tw_call_* runs at that moment
 * (the extension holds the GIL for both). Everything else is thread-safe.
 */
#ifndef TORCHWRAPPER_RECORDER_H
#define TORCHWRAPPER_RECORDER_H

#include <string.h>

#include "torchwrapper/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TW_CHUNK_RECORDS 1024  /* records per chunk: 64 KiB */
#define TW_CALL_ID_BLOCK 4096  /* call ids reserved per thread at a time */
#define TW_CHUNK_TEXT (64 * 1024) /* bytes of argument text per chunk */

enum {
    TW_RECORD_ERROR = 1u << 0,    /* the call raised */
    /* an autograd node (libtorch layer): its argument text is the link to the forward call that
     * created it, TW_BACKWARD_LINK_SIZE bytes (tw_backward_link_pack), not a summary */
    TW_RECORD_BACKWARD = 1u << 1,
    /* a tw_resources_t (TW_RESOURCES_SIZE bytes, unaligned: read it with memcpy) follows the record's
     * text (its argument summary or backward link), outside args_len */
    TW_RECORD_RESOURCES = 1u << 2,
};

/*
 * What a call used besides time: FLOPs (the caller states the call's own, tw_frame_t.flops) and the
 * memory the allocator reported on its thread while it ran (tw_thread_t.memory). Carried after the
 * record's text only by the records that have some, so that a record stays one cache line and the
 * calls without any pay nothing.
 */
typedef struct tw_resources {
    uint64_t flops;       /* the call's own floating-point operations */
    uint64_t flops_total; /* with those of the recorded calls inside it */
    uint64_t mem_alloc;   /* bytes allocated on this thread during the call, inside calls included */
    uint64_t mem_self;    /* of which outside the recorded calls inside it */
    uint64_t mem_freed;   /* bytes freed on this thread during the call, inside calls included */
    uint64_t mem_peak;    /* the highest allocated total the allocator reported during the call (0: none) */
} tw_resources_t;
#define TW_RESOURCES_SIZE ((uint32_t)sizeof(tw_resources_t))

/*
 * The allocator's reports on one OS thread, written only by that thread: a report of n bytes
 * allocated does allocated += n (freed: freed += n), total = the allocator's allocated total,
 * peak = max(peak, total). Calls read differences of allocated and freed; peak is reset to total at
 * each call's beginning and put back at its end (the outer call's peak is the max of its own and its
 * inner calls'), so that it is the highest total seen during the innermost call in progress.
 */
typedef struct tw_memory_counters {
    uint64_t allocated; /* bytes allocated on this thread, ever (only grows) */
    uint64_t freed;     /* bytes freed on this thread, ever */
    uint64_t total;     /* the allocator's allocated total at its last report on this thread */
    uint64_t peak;      /* the highest total since the innermost call in progress began */
} tw_memory_counters_t;

/* A backward node's link: the forward call's id (0: none found) and API id, little-endian. */
#define TW_BACKWARD_LINK_SIZE 12
static inline void tw_backward_link_pack(char *out, uint64_t call_id, uint32_t api_id)
{
    memcpy(out, &call_id, 8);
    memcpy(out + 8, &api_id, 4);
}
static inline void tw_backward_link_unpack(const char *in, uint64_t *call_id, uint32_t *api_id)
{
    memcpy(call_id, in, 8);
    memcpy(api_id, in + 8, 4);
}

/*
 * The nn.Module instance a call ran on (module forwards): its path (the Python model watch's: the model's
 * class, then named_modules()'s name, GPT2LMHeadModel.transformer.h.0). TW_MODULE_NONE for other
 * calls, TW_MODULE_ROOT for the path "" (a model of a caller that names none; the Python model watch
 * names every model by its class and no longer uses it), else 1 + the id of the path in the name
 * table (api.h), where paths are interned like API names.
 */
#define TW_MODULE_NONE 0u
#define TW_MODULE_ROOT UINT32_MAX

/* The path a module_id stands for: NULL for TW_MODULE_NONE (and unknown ids), "" for the root. */
TW_API const char *tw_module_path(uint32_t module_id);

/* One finished call. Times are raw clock ticks (see clock.h); ids start at 1, 0 means none. */
typedef struct tw_record {
    uint64_t call_id;
    uint64_t parent_id; /* the enclosing recorded call on the same thread, or 0 */
    uint64_t start;     /* ticks at entry */
    uint64_t cost;      /* ticks from entry to exit */
    uint64_t self;      /* cost minus the cost of the recorded calls directly inside it */
    uint32_t step;      /* the step the call began in (tw_recorder_set_step), counted from 0 */
    uint32_t site;      /* where the program made the call (sites.h), TW_SITE_NONE (0) for none. GPU time
                         * is not kept in a record: it is joined from the GPU records (gpu.h). */
    uint32_t api_id;    /* see api.h */
    uint16_t depth;     /* 0 for an outermost call (< TW_MAX_DEPTH) */
    uint16_t flags;     /* TW_RECORD_* */
    uint32_t module_id; /* TW_MODULE_*, see above */
    uint16_t args_offset; /* argument summary: text[args_offset .. + args_len) of the chunk (0 when empty) */
    uint16_t args_len;
} tw_record_t;

/* 16-bit offsets and lengths cover a chunk's text; a record stays 64 bytes (a cache line). */
_Static_assert(TW_CHUNK_TEXT <= 65536 && TW_ARGS_MAX <= 65535, "argument text offsets are 16-bit");
_Static_assert(sizeof(tw_record_t) == 64, "a record is 64 bytes");

/* A block of records of one thread, with the text of their argument summaries. */
typedef struct tw_chunk {
    struct tw_chunk *next;
    uint64_t tid; /* kernel thread id of the thread that filled it */
    uint32_t count;
    uint32_t capacity;
    uint32_t text_used;
    uint32_t text_capacity;
    char *text;   /* TW_CHUNK_TEXT bytes, after the records */
    struct tw_queue *charged; /* the queue whose memory budget it counts in until released, or NULL */
    uint32_t charge_epoch;    /* that budget's epoch then: a budget set anew (a new consumer) owes it nothing */
    tw_record_t records[];
} tw_chunk_t;

typedef struct tw_frame {
    uint64_t call_id;
    uint64_t child_ticks; /* cost of the recorded calls directly inside this one */
    uint64_t excluded_at_begin; /* the thread's excluded_ticks when the call began */
    uint32_t module_id;   /* TW_MODULE_*: set by the caller between begin and end */
    uint32_t step;        /* the recorder's step when the call began */
    uint32_t site;        /* sites.h: set by the caller between begin and end (0: none) */
    uint32_t api_id;      /* set by the caller between begin and end: what backward nodes link to */
    uint64_t seq_begin;   /* the autograd sequence number when the call began (backward nodes' links) */
    uint64_t flops;       /* the call's own FLOPs: 0 at begin, set by the caller between begin and end */
    uint64_t child_flops; /* flops_total of the recorded calls directly inside this one */
    uint64_t child_alloc; /* mem_alloc of the recorded calls directly inside this one */
    uint64_t allocated_at_begin; /* the thread's memory counters when the call began (memory set) */
    uint64_t freed_at_begin;
    uint64_t outer_peak;  /* the counters' peak when the call began, put back (max) at its end */
} tw_frame_t;

typedef struct tw_recorder tw_recorder_t;

/* Per-thread recording state. The layout is public only so that the hot path can be inlined. */
typedef struct tw_thread {
    tw_chunk_t *chunk;   /* being filled; NULL after a failed allocation */
    uint64_t next_id;    /* next call id to hand out */
    uint64_t id_end;     /* end of the reserved block */
    uint32_t depth;      /* calls in progress on this thread */
    uint32_t paused;     /* > 0 while the profiler runs its own code here: calls are not recorded */
    uint64_t dropped;    /* records lost on this thread (no memory, no room, too deep) */
    uint64_t dropped_reported; /* of which counted in the queue's drop counter (off the hot path) */
    /* Ticks the profiler spent on its own work on this thread (statistics, path lookups) while
     * calls were in progress: not counted in the cost of the calls around that work. */
    uint64_t excluded_ticks;
    uint64_t tid;
    tw_recorder_t *recorder; /* NULL once the recorder is destroyed */
    const uint32_t *flush_epoch; /* the recorder's; when it moves, the partial chunk is handed over */
    uint32_t seen_epoch;
    const uint32_t *step; /* the recorder's current step (tw_recorder_set_step) */
    /* This OS thread's allocator reports, set by whoever measures memory; NULL (the default): memory
     * is not measured on this thread. */
    tw_memory_counters_t *memory;
    struct tw_thread *next_in_recorder;
    unsigned refs;       /* the recorder's and the OS thread's; guarded by the library's registry lock */
    tw_frame_t stack[TW_MAX_DEPTH];
} tw_thread_t;

typedef struct tw_recorder_stats {
    uint64_t records;   /* records held (collected chunks) */
    uint64_t dropped;   /* records lost: out of memory, nesting deeper than TW_MAX_DEPTH */
    uint64_t chunks;    /* chunks held */
    uint64_t threads;   /* threads that recorded */
} tw_recorder_stats_t;

/* Creates an empty recorder in *out. Returns 0 or TW_ENOMEM. */
TW_API int tw_recorder_create(tw_recorder_t **out);

/* Frees the recorder and its chunks. Threads attached to it stop using it (see the contract above). */
TW_API void tw_recorder_destroy(tw_recorder_t *rec);

/*
 * The calling thread's state for rec, created on first use (this is the slow path, taken once per
 * thread and recorder). Returns NULL when out of memory. The state stays valid until rec is
 * destroyed; when the thread exits first, its partial chunk is handed to rec.
 */
TW_API tw_thread_t *tw_recorder_attach(tw_recorder_t *rec);

/* Moves every attached thread's partial chunk to rec's list of finished chunks. See the contract. */
TW_API void tw_recorder_collect(tw_recorder_t *rec);

/*
 * Calls fn on each finished chunk, oldest first, while holding rec's lock; stops early and returns
 * fn's value when it is nonzero. Chunks stay owned by rec.
 */
TW_API int tw_recorder_foreach_chunk(tw_recorder_t *rec, int (*fn)(const tw_chunk_t *chunk, void *arg),
                                     void *arg);

TW_API void tw_recorder_stats(tw_recorder_t *rec, tw_recorder_stats_t *stats);

/* The queue (queue.h) rec's finished chunks go to: held in memory, or drained by a writer attached
 * to it. Owned by rec. */
TW_API struct tw_queue *tw_recorder_queue(tw_recorder_t *rec);

/*
 * The step calls that begin from now on are counted in (their records' step field), on every
 * thread. Steps count from 0; the caller (the extension, at each step boundary) moves it forward.
 * Thread-safe; the hot path reads it with one relaxed load.
 */
TW_API void tw_recorder_set_step(tw_recorder_t *rec, uint32_t step);
TW_API uint32_t tw_recorder_step(tw_recorder_t *rec);

/* Slow paths of the inline functions below; not for other callers. */
TW_API void tw_thread_refill_ids(tw_thread_t *t);
TW_API tw_chunk_t *tw_thread_next_chunk(tw_thread_t *t);
TW_API void tw_thread_flush(tw_thread_t *t);

/*
 * Enters a profiled call: pushes a frame with a fresh call id. Returns NULL (and the call is not
 * recorded, but counted as dropped) past TW_MAX_DEPTH. Pass the result to tw_call_end().
 */
static inline tw_frame_t *tw_call_begin(tw_thread_t *t)
{
    uint32_t depth = t->depth++;
    if (TW_UNLIKELY(depth >= TW_MAX_DEPTH))
        return NULL;
    if (TW_UNLIKELY(t->next_id == t->id_end))
        tw_thread_refill_ids(t);
    tw_frame_t *frame = &t->stack[depth];
    frame->call_id = t->next_id++;
    frame->child_ticks = 0;
    frame->excluded_at_begin = t->excluded_ticks;
    frame->module_id = TW_MODULE_NONE;
    frame->site = 0;
    frame->step = __atomic_load_n(t->step, __ATOMIC_RELAXED);
    frame->flops = 0;
    frame->child_flops = 0;
    frame->child_alloc = 0;
    tw_memory_counters_t *m = t->memory;
    if (m != NULL) {
        frame->allocated_at_begin = m->allocated;
        frame->freed_at_begin = m->freed;
        frame->outer_peak = m->peak;
        m->peak = m->total;
    }
    return frame;
}

/*
 * Leaves the call entered by tw_call_begin() and appends its record, with args_len bytes of
 * argument text (cut to TW_ARGS_MAX; args may be NULL when args_len is 0). The cost is end - start
 * less the ticks excluded on this thread meanwhile (see tw_thread_exclude()).
 */
static inline void tw_call_end_args(tw_thread_t *t, tw_frame_t *frame, uint32_t api_id, uint64_t start,
                                    uint64_t end, uint32_t flags, const char *args, uint32_t args_len)
{
    uint32_t depth = --t->depth;
    if (TW_UNLIKELY(frame == NULL)) {
        t->dropped++;
        return;
    }
    uint64_t excluded = t->excluded_ticks - frame->excluded_at_begin;
    uint64_t cost = end - start;
    cost = cost > excluded ? cost - excluded : 0;
    uint64_t parent_id = 0;
    /* Resources: FLOPs when the call or a call inside it stated some, memory when it is measured. */
    tw_resources_t res;
    uint32_t res_size = 0;
    tw_memory_counters_t *m = t->memory;
    if (TW_UNLIKELY((frame->flops | frame->child_flops) != 0 || m != NULL)) {
        res.flops = frame->flops;
        res.flops_total = frame->flops + frame->child_flops;
        res.mem_alloc = res.mem_self = res.mem_freed = res.mem_peak = 0;
        if (m != NULL) {
            res.mem_alloc = m->allocated - frame->allocated_at_begin;
            res.mem_self = res.mem_alloc > frame->child_alloc ? res.mem_alloc - frame->child_alloc : 0;
            res.mem_freed = m->freed - frame->freed_at_begin;
            res.mem_peak = m->peak;
            if (frame->outer_peak > m->peak)
                m->peak = frame->outer_peak;
        }
        if ((res.flops_total | res.mem_alloc | res.mem_freed) != 0) {
            res_size = TW_RESOURCES_SIZE;
            flags |= TW_RECORD_RESOURCES;
        }
    }
    if (depth > 0) {
        frame[-1].child_ticks += cost;
        parent_id = frame[-1].call_id;
        if (res_size != 0) {
            frame[-1].child_flops += res.flops_total;
            frame[-1].child_alloc += res.mem_alloc;
        }
    }
    if (args_len > TW_ARGS_MAX)
        args_len = TW_ARGS_MAX;
    tw_chunk_t *chunk = t->chunk;
    if (TW_UNLIKELY(chunk == NULL || chunk->count == chunk->capacity ||
                    chunk->text_capacity - chunk->text_used < args_len + res_size)) {
        chunk = tw_thread_next_chunk(t);
        if (chunk == NULL) {
            t->dropped++;
            return;
        }
    }
    tw_record_t *r = &chunk->records[chunk->count++];
    r->call_id = frame->call_id;
    r->parent_id = parent_id;
    r->start = start;
    r->cost = cost;
    /* Clock reads inside children can make child time exceed cost by a tick or two: clamp. */
    r->self = cost > frame->child_ticks ? cost - frame->child_ticks : 0;
    r->step = frame->step;
    r->site = frame->site;
    r->api_id = api_id;
    r->depth = (uint16_t)depth;
    r->flags = (uint16_t)flags;
    r->module_id = frame->module_id;
    r->args_offset = 0;
    r->args_len = (uint16_t)args_len;
    if (args_len + res_size > 0) {
        r->args_offset = (uint16_t)chunk->text_used; /* < TW_CHUNK_TEXT: the bytes follow */
        if (args_len > 0)
            memcpy(chunk->text + chunk->text_used, args, args_len);
        if (res_size != 0)
            memcpy(chunk->text + chunk->text_used + args_len, &res, TW_RESOURCES_SIZE);
        chunk->text_used += args_len + res_size;
    }
    /* The writer asks for partial chunks once per flush interval, so records reach the disk soon. */
    if (TW_UNLIKELY(__atomic_load_n(t->flush_epoch, __ATOMIC_RELAXED) != t->seen_epoch))
        tw_thread_flush(t);
}

/* The resources a record carries (tw_resources_t), or zeros: 1 when it carries some. */
static inline int tw_record_resources(const tw_chunk_t *chunk, const tw_record_t *r, tw_resources_t *out)
{
    if (!(r->flags & TW_RECORD_RESOURCES)) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    memcpy(out, chunk->text + r->args_offset + r->args_len, TW_RESOURCES_SIZE);
    return 1;
}

/*
 * Counts ticks of the profiler's own work done on this thread (a statistics hook, a path lookup) as
 * not belonging to the calls in progress: their costs leave it out.
 */
static inline void tw_thread_exclude(tw_thread_t *t, uint64_t ticks)
{
    t->excluded_ticks += ticks;
}

/* tw_call_end_args() without argument text. */
static inline void tw_call_end(tw_thread_t *t, tw_frame_t *frame, uint32_t api_id, uint64_t start, uint64_t end,
                               uint32_t flags)
{
    tw_call_end_args(t, frame, api_id, start, end, flags, NULL, 0);
}

#ifdef __cplusplus
}
#endif
#endif
