/* SPDX-License-Identifier: MIT */
/* The chunk queue's consumer side and its pool (queue.h; not public API: the library's writer and
 * CUPTI's buffer pool call them, nothing outside the library does). */
#ifndef TW_QUEUE_INTERNAL_H
#define TW_QUEUE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "torchwrapper/queue.h"

/* Whoever charges the budget for buffers of the consumer's own and finds no room (the writer's row
 * streams): does a share of the consumer's work first, as a producer of chunks does (help(arg, 1)
 * of tw_queue_consumer_t). Returns 1 when the consumer was asked, 0 when it has no help or is
 * stopping. No lock of the consumer's may be held. */
int tw_queue_help(tw_queue_t *q);

/* Gives back bytes charged by tw_queue_charge(). */
void tw_queue_refund(tw_queue_t *q, uint64_t bytes);

/* Wakes producers waiting for room (block_when_full), after the consumer freed some. */
void tw_queue_room(tw_queue_t *q);

/* Whether the consumer's thread runs (0 once joined). */
void tw_queue_set_running(tw_queue_t *q, int running);

#endif
