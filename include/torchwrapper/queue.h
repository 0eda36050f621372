/* SPDX-License-Identifier: MIT */
/*
 * The chunk queue: where finished record chunks wait between the threads that fill them (the
 * recorder's) and the thread that writes them (the writer's). It owns the chunk pool, the FIFO, the
 * memory budget every byte waiting for the consumer is charged to (below), the flush epoch (how a
 * consumer asks the recording threads for their partial chunks), the count of records lost on the
 * way, and its own fork handling. The recorder only pushes to it; the writer only drains it. A queue nobody drains
 * holds the records in memory (tw_queue_foreach), unbounded.
 *
 * Lock order, across the library: recorder registry -> queue -> its consumer (the writer) -> chunk
 * pool. A queue never calls its producers; it calls its consumer only through tw_queue_consumer_t,
 * with its lock held. The queue rings its consumer's doorbell; it has none of its own.
 */
#ifndef TORCHWRAPPER_QUEUE_H
#define TORCHWRAPPER_QUEUE_H

#include <pthread.h>

#include "torchwrapper/common.h"
#include "torchwrapper/recorder.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tw_queue tw_queue_t;

/* ---- the chunk pool (process-wide) -------------------------------------------------------------- */

/* Bytes one chunk takes in memory: its header, its records and their argument text. */
#define TW_CHUNK_BYTES (sizeof(tw_chunk_t) + TW_CHUNK_RECORDS * sizeof(tw_record_t) + TW_CHUNK_TEXT)

/* Gives chunk back to the pool (or to malloc when the pool is full), and its bytes back to the
 * budget it was charged to. NULL is ignored. */
TW_API void tw_chunk_release(tw_chunk_t *chunk);

/* ---- the queue ------------------------------------------------------------------------------------ */

/* Creates an empty, unbounded queue with no consumer. Returns 0 or TW_ENOMEM. */
TW_API int tw_queue_create(tw_queue_t **out);

/* Frees the queue and the chunks it still holds. Its consumer must have detached, and every chunk
 * charged to its budget must have been released. */
TW_API void tw_queue_destroy(tw_queue_t *q);

/* Producers: hands chunk over (the queue owns it afterwards) and rings the consumer's doorbell. */
TW_API void tw_queue_push(tw_queue_t *q, tw_chunk_t *chunk);

/*
 * Producers: a chunk to fill for thread tid, once there is room for it in the memory budget (see
 * below), charged to it until it is released; NULL when there is no room (or no memory). A queue
 * nobody drains is unbounded; with block_when_full and a running consumer it waits for room.
 */
TW_API tw_chunk_t *tw_queue_chunk(tw_queue_t *q, uint64_t tid);

/* The same, adding to *consumer_ticks the clock ticks (tw_clock_ticks) this thread spent writing for
 * the consumer (its help) or waiting for room: the profiler's time, not its calls'. */
TW_API tw_chunk_t *tw_queue_chunk_timed(tw_queue_t *q, uint64_t tid, uint64_t *consumer_ticks);

/* Counts records lost before they reached the queue (no memory, no room, too deep). */
TW_API void tw_queue_add_dropped(tw_queue_t *q, uint64_t records);

/* Records counted by tw_queue_add_dropped, and chunks lost because no consumer could take them. */
TW_API uint64_t tw_queue_dropped(tw_queue_t *q);

/* Chunks and records pushed so far (a forked child of a drained queue starts from 0). */
TW_API void tw_queue_counts(tw_queue_t *q, uint64_t *chunks, uint64_t *records);

/* Calls fn on each chunk held, oldest first, under the queue's lock, until fn returns non-zero;
 * returns that value, or 0. */
TW_API int tw_queue_foreach(tw_queue_t *q, int (*fn)(const tw_chunk_t *chunk, void *arg), void *arg);

/* The flush epoch: producers watch it, and hand their partial chunk over when it moves. */
TW_API const uint32_t *tw_queue_flush_epoch(tw_queue_t *q);

/* ---- the memory budget ---------------------------------------------------------------------------- */

/*
 * While a consumer is attached, every byte that waits for it is charged to one budget: each chunk
 * from tw_queue_chunk() until it is released (being filled, queued, or being written), and whatever
 * the consumer charges for buffers of its own (tw_queue_charge: the writer's row streams). The
 * bytes charged never exceed the limit set at attach: what does not fit is refused (and counted by
 * whoever refused it). The peak is the largest sum of bytes charged at once: what was measured, not
 * what a formula says.
 */

/* Charges bytes to the budget: 1 when they fit, 0 when not (nothing charged). Lock-free. An
 * unbounded queue (no consumer) charges nothing and returns 1. */
TW_API int tw_queue_charge(tw_queue_t *q, uint64_t bytes);

/* The budget: bytes charged now, the peak since attach, and the limit (0: unbounded). */
TW_API void tw_queue_memory(tw_queue_t *q, uint64_t *used, uint64_t *peak, uint64_t *limit);

/* ---- the consumer's side ------------------------------------------------------------------------ */

/*
 * What a queue asks of its consumer, each called with the queue's lock held: ring its doorbell (a
 * chunk was pushed: the consumer then takes the queued chunks with tw_queue_pop() or
 * tw_queue_take()), start its thread (at the first push after a fork; 0 or an errno value), and the
 * consumer's part of fork handling (take its locks before fork, release them in the parent, start
 * afresh in the child).
 *
 * And help, the one called without the queue's lock, by a producer on its own thread: a consumer
 * whose thread gets too little CPU (it runs at the lowest priority, so as never to take a core from
 * the program) would otherwise let the budget fill up and the producers drop records. When a
 * producer's chunk takes the budget past half (TW_QUEUE_HIGH_WATER), help(arg, TW_QUEUE_HELP_HIGH)
 * asks the consumer to do a bounded share of its work on the producer's thread now if it can without
 * waiting; when there is no room at all, help(arg, TW_QUEUE_HELP_MUST) waits for its turn and does
 * it. Below the mark each new chunk asks help(arg, TW_QUEUE_HELP_IF_LATE): the consumer does its
 * work there only if it is late by its own measure (the writer: its files not flushed for several
 * flush intervals, a machine whose every core other programs keep busy), so that what reaches the
 * files never lags without bound. The queue counts the helpers in, and tw_queue_detach() waits for
 * them to leave.
 *
 * Any may be NULL.
 */
typedef struct tw_queue_consumer {
    void (*ring)(void *arg);
    int (*start)(void *arg);
    void (*fork_prepare)(void *arg);
    void (*fork_parent)(void *arg);
    void (*fork_child)(void *arg);
    void (*help)(void *arg, int urgency);
} tw_queue_consumer_t;

/* help's urgency (above) */
#define TW_QUEUE_HELP_IF_LATE 0 /* below the high-water mark: only if the consumer is late */
#define TW_QUEUE_HELP_HIGH 1    /* past it: if the consumer's work is free to take now */
#define TW_QUEUE_HELP_MUST 2    /* no room: wait for the turn */

/* The part of the budget past which producers help the consumer (TW_QUEUE_HELP_HIGH): a half. */
#define TW_QUEUE_HIGH_WATER(limit) ((limit) / 2)

/* The least budget a consumer may set: two chunks (one being filled, one being written). */
#define TW_QUEUE_MIN_BUDGET (2 * TW_CHUNK_BYTES)

/* Attaches the consumer (one at a time): from now on the queue's memory budget is budget_bytes (at
 * least TW_QUEUE_MIN_BUDGET), and running says whether its thread is already started. Returns 0 or
 * TW_EBUSY. */
TW_API int tw_queue_attach(tw_queue_t *q, uint64_t budget_bytes, int block_when_full, const tw_queue_consumer_t *ops,
                           void *arg, int running);

/* Detaches it: the queue holds what is pushed from now on, unbounded, and rings nobody. */
TW_API void tw_queue_detach(tw_queue_t *q);

/* Whether a consumer is attached. */
TW_API int tw_queue_attached(tw_queue_t *q);

/* The consumer: takes the chunks queued (a list linked by next, oldest first; the consumer owns
 * them, and releases each once written), or NULL. Never waits. */
TW_API tw_chunk_t *tw_queue_take(tw_queue_t *q);

/* The consumer: takes the oldest chunk queued (the consumer owns it, and releases it once written),
 * or NULL. Never waits. */
TW_API tw_chunk_t *tw_queue_pop(tw_queue_t *q);

/* Asks the producers for their partial chunks (their next call hands the chunk over). */
TW_API void tw_queue_request_flush(tw_queue_t *q);

/* Producers waiting for room stop waiting (the consumer is closing: what they make now is dropped
 * or kept, as without a consumer). */
TW_API void tw_queue_stop(tw_queue_t *q);

#ifdef __cplusplus
}
#endif
#endif
