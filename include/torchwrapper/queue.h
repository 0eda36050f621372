/* SPDX-License-Identifier: MIT */
/*
 * The chunk queue: where finished record chunks wait between the threads that fill them (the
 * recorder's) and the thread that writes them (the writer's). It owns the chunk pool, the bounded
 * FIFO with its admission rule and condition variables, the flush epoch (how a consumer asks the
 * recording threads for their partial chunks), the count of records lost on the way, and its own
 * fork handling. The recorder only pushes to it; the writer only drains it. A queue nobody drains
 * holds the records in memory (tw_queue_foreach), unbounded.
 *
 * Lock order, across the library: recorder registry -> queue -> its consumer (the writer) -> chunk
 * pool. A queue never calls its producers; it calls its consumer only through tw_queue_consumer_t,
 * with its lock held.
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

/* An empty chunk for thread tid, recycled when one is free; NULL when out of memory. */
TW_API tw_chunk_t *tw_chunk_alloc(uint64_t tid);

/* Gives chunk back to the pool (or to malloc when the pool is full). NULL is ignored. */
TW_API void tw_chunk_release(tw_chunk_t *chunk);

/* ---- the queue ------------------------------------------------------------------------------------ */

/* Creates an empty, unbounded queue with no consumer. Returns 0 or TW_ENOMEM. */
TW_API int tw_queue_create(tw_queue_t **out);

/* Frees the queue and the chunks it still holds. Its consumer must have detached. */
TW_API void tw_queue_destroy(tw_queue_t *q);

/* Producers: hands chunk over (the queue owns it afterwards) and wakes the consumer. */
TW_API void tw_queue_push(tw_queue_t *q, tw_chunk_t *chunk);

/* Producers, before filling another chunk: 1 when there is room for it, 0 when not. Only a queue
 * with a consumer is bounded; with block_when_full and a running consumer it waits for room. */
TW_API int tw_queue_admit(tw_queue_t *q);

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

/* ---- the consumer's side ------------------------------------------------------------------------ */

/*
 * What a queue asks of its consumer, each called with the queue's lock held: start its thread (at
 * the first push after a fork; 0 or an errno value), and the consumer's part of fork handling (take
 * its locks before fork, release them in the parent, start afresh in the child). Any may be NULL.
 */
typedef struct tw_queue_consumer {
    int (*start)(void *arg);
    void (*fork_prepare)(void *arg);
    void (*fork_parent)(void *arg);
    void (*fork_child)(void *arg);
} tw_queue_consumer_t;

/* Attaches the consumer (one at a time): the queue is bounded to max_chunks (at least 1) from now
 * on, and running says whether its thread is already started. Returns 0 or TW_EBUSY. */
TW_API int tw_queue_attach(tw_queue_t *q, uint64_t max_chunks, int block_when_full, const tw_queue_consumer_t *ops,
                           void *arg, int running);

/* Detaches it: the queue holds what is pushed from now on, unbounded, and wakes nobody. */
TW_API void tw_queue_detach(tw_queue_t *q);

/* Whether a consumer is attached. */
TW_API int tw_queue_attached(tw_queue_t *q);

/*
 * The consumer's wait: returns the chunks queued (a list linked by next, oldest first; the consumer
 * owns them) once there are some, or the queue is kicked or stopped, or CLOCK_MONOTONIC passes
 * deadline_ns. *stop is set when the queue is stopped and was empty.
 */
TW_API tw_chunk_t *tw_queue_wait(tw_queue_t *q, uint64_t deadline_ns, int *stop);

/* Wakes the consumer's wait (work other than chunks is waiting: a stream filling up). */
TW_API void tw_queue_kick(tw_queue_t *q);

/* Asks the producers for their partial chunks (their next call hands the chunk over). */
TW_API void tw_queue_request_flush(tw_queue_t *q);

/* Tells the consumer's wait to return for good and producers waiting for room to stop waiting;
 * running: whether the consumer's thread runs (0 once joined). */
TW_API void tw_queue_stop(tw_queue_t *q);
TW_API void tw_queue_set_running(tw_queue_t *q, int running);

/* Timed waits of the consumer that returned (about one per flush interval when idle). */
TW_API uint64_t tw_queue_wakeups(tw_queue_t *q);

/* pthread_cond_init for waits with CLOCK_MONOTONIC deadlines (the default, CLOCK_REALTIME, makes
 * every such wait return at once: the waiting thread spins). */
TW_API void tw_cond_init_monotonic(pthread_cond_t *cond);

#ifdef __cplusplus
}
#endif
#endif
