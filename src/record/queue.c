/* SPDX-License-Identifier: MIT */
/*
 * The chunk queue between the recorder and the writer: chunk pool, FIFO, the memory budget (lock-free
 * charges and refunds; producers past its high-water mark help the consumer, and with no room left
 * wait for room on a condition variable), flush epoch, drop counter, fork handling. See queue.h.
 */
#include "config.h"
#include "torchwrapper/queue.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "atfork.h"
#include "torchwrapper/clock.h"
#include "queue_internal.h"

struct tw_queue {
    pthread_mutex_t lock;
    pthread_cond_t room;   /* producers wait on it for room (block_when_full), detach for the helpers */
    tw_chunk_t *head;      /* the FIFO, guarded by lock */
    tw_chunk_t *tail;
    uint64_t chunks;       /* pushed so far */
    uint64_t records;
    /* the memory budget (queue.h): bytes charged now and at most, and the bound (0: unbounded, no
     * consumer); lock-free */
    _Atomic uint64_t used;
    _Atomic uint64_t peak;
    _Atomic uint64_t limit;
    _Atomic uint32_t epoch; /* moves at each attach and detach: chunks charged before owe nothing */
    int block_when_full;
    int running;           /* the consumer's thread runs: producers may wait for room */
    int stopping;
    unsigned helpers;      /* producers inside the consumer's help() */
    const tw_queue_consumer_t *ops; /* NULL: no consumer */
    void *ops_arg;
    uint32_t flush_epoch;  /* bumped (atomically) to ask producers for their partial chunks */
    _Atomic uint64_t dropped;
    struct tw_queue *next_queue; /* all queues, guarded by queues_lock (fork handling) */
};

/* ---- the chunk pool ------------------------------------------------------------------------------ */

/*
 * Chunks are recycled through a process-wide pool rather than returned to malloc: a fresh 64 KiB
 * chunk costs 16 page faults on first touch, which measured ~60 ns per record here (more than the
 * rest of the hot path), while a recycled chunk is already resident. The pool keeps at most
 * TW_CHUNK_POOL_MAX chunks (32 MiB with their text); it only holds memory a session already used.
 */
#define TW_CHUNK_POOL_MAX 256
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static tw_chunk_t *pool_head;
static unsigned pool_count;

/* An empty chunk for thread tid, recycled when one is free; NULL when out of memory. Not charged to
 * any queue's memory budget (tw_queue_chunk is). */
static tw_chunk_t *chunk_alloc(uint64_t tid)
{
    pthread_mutex_lock(&pool_lock);
    tw_chunk_t *chunk = pool_head;
    if (chunk != NULL) {
        pool_head = chunk->next;
        pool_count--;
    }
    pthread_mutex_unlock(&pool_lock);
    if (chunk == NULL &&
        (chunk = malloc(sizeof *chunk + TW_CHUNK_RECORDS * sizeof(tw_record_t) + TW_CHUNK_TEXT)) == NULL)
        return NULL;
    chunk->next = NULL;
    chunk->charged = NULL;
    chunk->tid = tid;
    chunk->count = 0;
    chunk->capacity = TW_CHUNK_RECORDS;
    chunk->text = (char *)(chunk->records + TW_CHUNK_RECORDS);
    chunk->text_used = 0;
    chunk->text_capacity = TW_CHUNK_TEXT;
    return chunk;
}

void tw_chunk_release(tw_chunk_t *chunk)
{
    if (chunk == NULL)
        return;
    if (chunk->charged != NULL) {
        if (chunk->charge_epoch == atomic_load(&chunk->charged->epoch))
            tw_queue_refund(chunk->charged, TW_CHUNK_BYTES);
        chunk->charged = NULL;
    }
    pthread_mutex_lock(&pool_lock);
    if (pool_count < TW_CHUNK_POOL_MAX) {
        chunk->next = pool_head;
        pool_head = chunk;
        pool_count++;
        chunk = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    free(chunk);
}

static void release_list(tw_chunk_t *c)
{
    for (tw_chunk_t *next; c != NULL; c = next) {
        next = c->next;
        tw_chunk_release(c);
    }
}

/* ---- fork ---------------------------------------------------------------------------------------- */

static pthread_mutex_t queues_lock = PTHREAD_MUTEX_INITIALIZER;
static tw_queue_t *all_queues; /* guarded by queues_lock */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The lock and the condition variable. */
static void init_sync(tw_queue_t *q)
{
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->room, NULL);
}

/* Every lock is taken before fork(), so that none is held in the child by a thread that does not
 * exist there: the queues' (and their consumers'), then the pool's. atfork.h runs these after the
 * recorders' prepare handler and before their parent and child handlers: registry -> queue ->
 * consumer -> pool. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&queues_lock);
    for (tw_queue_t *q = all_queues; q != NULL; q = q->next_queue) {
        pthread_mutex_lock(&q->lock);
        if (q->ops != NULL && q->ops->fork_prepare != NULL)
            q->ops->fork_prepare(q->ops_arg);
    }
    pthread_mutex_lock(&pool_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&pool_lock);
    for (tw_queue_t *q = all_queues; q != NULL; q = q->next_queue) {
        if (q->ops != NULL && q->ops->fork_parent != NULL)
            q->ops->fork_parent(q->ops_arg);
        pthread_mutex_unlock(&q->lock);
    }
    pthread_mutex_unlock(&queues_lock);
}

/*
 * In the child, only the forking thread exists. Chunks waiting in a drained queue are the parent's
 * (which writes them): the child drops its copies, and its consumer starts afresh (its thread at the
 * first push). A queue nobody drains keeps its records in memory, in the child too.
 */
static void fork_child(void)
{
    pthread_mutex_unlock(&pool_lock);
    for (tw_queue_t *q = all_queues; q != NULL; q = q->next_queue) {
        if (q->ops == NULL) {
            pthread_mutex_unlock(&q->lock);
            continue;
        }
        if (q->ops->fork_child != NULL)
            q->ops->fork_child(q->ops_arg);
        pthread_mutex_unlock(&q->lock);
        init_sync(q);
        release_list(q->head); /* their bytes go back to the budget */
        q->head = q->tail = NULL;
        q->chunks = q->records = 0;
        q->running = 0;
        q->stopping = 0;
        q->helpers = 0;
        atomic_store(&q->peak, atomic_load(&q->used));
        atomic_store(&q->dropped, 0);
    }
    pthread_mutex_unlock(&queues_lock);
}

static void register_fork_handlers(void)
{
    tw_atfork_register(TW_ATFORK_QUEUES, fork_prepare, fork_parent, fork_child);
}

/* ---- the queue ------------------------------------------------------------------------------------ */

int tw_queue_create(tw_queue_t **out)
{
    tw_queue_t *q = calloc(1, sizeof *q);
    if (q == NULL)
        return TW_ENOMEM;
    init_sync(q);
    atomic_init(&q->dropped, 0);
    pthread_once(&fork_once, register_fork_handlers);
    pthread_mutex_lock(&queues_lock);
    q->next_queue = all_queues;
    all_queues = q;
    pthread_mutex_unlock(&queues_lock);
    *out = q;
    return 0;
}

void tw_queue_destroy(tw_queue_t *q)
{
    if (q == NULL)
        return;
    pthread_mutex_lock(&queues_lock);
    for (tw_queue_t **p = &all_queues; *p != NULL; p = &(*p)->next_queue) {
        if (*p == q) {
            *p = q->next_queue;
            break;
        }
    }
    pthread_mutex_unlock(&queues_lock);
    release_list(q->head);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->room);
    free(q);
}

void tw_queue_push(tw_queue_t *q, tw_chunk_t *chunk)
{
    pthread_mutex_lock(&q->lock);
    if (q->ops != NULL && !q->running && !q->stopping && q->ops->start != NULL) {
        /* After a fork: the consumer's thread starts at the first chunk. */
        if (q->ops->start(q->ops_arg) != 0) {
            atomic_fetch_add(&q->dropped, chunk->count);
            pthread_mutex_unlock(&q->lock);
            tw_chunk_release(chunk);
            return;
        }
        q->running = 1;
    }
    chunk->next = NULL;
    if (q->tail != NULL)
        q->tail->next = chunk;
    else
        q->head = chunk;
    q->tail = chunk;
    q->chunks++;
    q->records += chunk->count;
    if (q->ops != NULL && q->ops->ring != NULL)
        q->ops->ring(q->ops_arg);
    pthread_mutex_unlock(&q->lock);
}

/* Charges bytes: 1 charged, 0 no room, -1 unbounded (nothing charged); *epoch: the budget's epoch;
 * *high: 1 when the bytes charged now are past the high-water mark. */
static int charge(tw_queue_t *q, uint64_t bytes, uint32_t *epoch, int *high)
{
    *epoch = atomic_load_explicit(&q->epoch, memory_order_acquire);
    *high = 0;
    uint64_t limit = atomic_load_explicit(&q->limit, memory_order_acquire);
    if (limit == 0)
        return -1;
    uint64_t used = atomic_load_explicit(&q->used, memory_order_relaxed);
    do {
        if (bytes > limit || used > limit - bytes)
            return 0;
    } while (!atomic_compare_exchange_weak(&q->used, &used, used + bytes));
    uint64_t now = used + bytes, peak = atomic_load_explicit(&q->peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak(&q->peak, &peak, now))
        ;
    *high = now > TW_QUEUE_HIGH_WATER(limit);
    return 1;
}

/* A producer does a share of the consumer's work (tw_queue_consumer_t's help): 1 when the consumer
 * was asked (it has a help, its thread runs and it is not stopping), its time added to *ticks (a
 * help with nothing to do too: a clock read, a failed trylock). No lock held. */
static int help_consumer(tw_queue_t *q, int urgency, uint64_t *ticks)
{
    pthread_mutex_lock(&q->lock);
    const tw_queue_consumer_t *ops = q->ops;
    void *arg = q->ops_arg;
    int asked = ops != NULL && ops->help != NULL && q->running && !q->stopping;
    if (asked)
        q->helpers++; /* detach waits for it: ops and arg stay valid until it leaves */
    pthread_mutex_unlock(&q->lock);
    if (!asked)
        return 0;
    tw_clock_source_t source = tw_clock_source();
    uint64_t began = tw_clock_ticks(source);
    ops->help(arg, urgency);
    *ticks += tw_clock_ticks(source) - began;
    pthread_mutex_lock(&q->lock);
    if (--q->helpers == 0)
        pthread_cond_broadcast(&q->room);
    pthread_mutex_unlock(&q->lock);
    return 1;
}

tw_chunk_t *tw_queue_chunk(tw_queue_t *q, uint64_t tid)
{
    uint64_t ignored = 0;
    return tw_queue_chunk_timed(q, tid, &ignored);
}

tw_chunk_t *tw_queue_chunk_timed(tw_queue_t *q, uint64_t tid, uint64_t *consumer_ticks)
{
    uint32_t epoch;
    int high;
    int charged = charge(q, TW_CHUNK_BYTES, &epoch, &high);
    if (charged == 0 && help_consumer(q, TW_QUEUE_HELP_MUST, consumer_ticks))
        charged = charge(q, TW_CHUNK_BYTES, &epoch, &high); /* no room: written for it, try again */
    else if (charged > 0) /* past the high-water mark, if it is free now; below it, if it is late */
        help_consumer(q, high ? TW_QUEUE_HELP_HIGH : TW_QUEUE_HELP_IF_LATE, consumer_ticks);
    if (charged == 0) {
        /* Still no room: wait for it when asked to and the consumer runs, else refuse. */
        pthread_mutex_lock(&q->lock);
        if (q->block_when_full && q->running) {
            tw_clock_source_t source = tw_clock_source();
            uint64_t began = tw_clock_ticks(source);
            while ((charged = charge(q, TW_CHUNK_BYTES, &epoch, &high)) == 0 && !q->stopping && q->ops != NULL)
                pthread_cond_wait(&q->room, &q->lock);
            *consumer_ticks += tw_clock_ticks(source) - began;
        }
        pthread_mutex_unlock(&q->lock);
        if (charged == 0)
            return NULL;
    }
    tw_chunk_t *chunk = chunk_alloc(tid);
    if (chunk != NULL && charged > 0) {
        chunk->charged = q;
        chunk->charge_epoch = epoch;
    } else if (chunk == NULL && charged > 0 && epoch == atomic_load(&q->epoch)) {
        tw_queue_refund(q, TW_CHUNK_BYTES);
    }
    return chunk;
}

int tw_queue_charge(tw_queue_t *q, uint64_t bytes)
{
    uint32_t epoch;
    int high;
    return charge(q, bytes, &epoch, &high) != 0;
}

int tw_queue_help(tw_queue_t *q)
{
    uint64_t ticks = 0;
    return help_consumer(q, TW_QUEUE_HELP_MUST, &ticks);
}

void tw_queue_refund(tw_queue_t *q, uint64_t bytes)
{
    if (bytes != 0)
        atomic_fetch_sub(&q->used, bytes);
}

void tw_queue_room(tw_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    pthread_cond_broadcast(&q->room);
    pthread_mutex_unlock(&q->lock);
}

void tw_queue_memory(tw_queue_t *q, uint64_t *used, uint64_t *peak, uint64_t *limit)
{
    *used = atomic_load(&q->used);
    *peak = atomic_load(&q->peak);
    *limit = atomic_load(&q->limit);
}

void tw_queue_add_dropped(tw_queue_t *q, uint64_t records)
{
    if (records != 0)
        atomic_fetch_add(&q->dropped, records);
}

uint64_t tw_queue_dropped(tw_queue_t *q)
{
    return atomic_load(&q->dropped);
}

void tw_queue_counts(tw_queue_t *q, uint64_t *chunks, uint64_t *records)
{
    pthread_mutex_lock(&q->lock);
    *chunks = q->chunks;
    *records = q->records;
    pthread_mutex_unlock(&q->lock);
}

int tw_queue_foreach(tw_queue_t *q, int (*fn)(const tw_chunk_t *chunk, void *arg), void *arg)
{
    int result = 0;
    pthread_mutex_lock(&q->lock);
    for (const tw_chunk_t *c = q->head; c != NULL && result == 0; c = c->next)
        result = fn(c, arg);
    pthread_mutex_unlock(&q->lock);
    return result;
}

const uint32_t *tw_queue_flush_epoch(tw_queue_t *q)
{
    return &q->flush_epoch;
}

void tw_queue_request_flush(tw_queue_t *q)
{
    __atomic_add_fetch(&q->flush_epoch, 1, __ATOMIC_RELAXED);
}

/* ---- the consumer's side ------------------------------------------------------------------------ */

int tw_queue_attach(tw_queue_t *q, uint64_t budget_bytes, int block_when_full, const tw_queue_consumer_t *ops,
                    void *arg, int running)
{
    pthread_mutex_lock(&q->lock);
    if (q->ops != NULL) {
        pthread_mutex_unlock(&q->lock);
        return TW_EBUSY;
    }
    q->ops = ops;
    q->ops_arg = arg;
    q->block_when_full = block_when_full;
    q->running = running;
    q->stopping = 0;
    /* Chunks already queued (a queue nobody drained) were never charged: they are the consumer's
     * first batch, outside the budget, as before it attached. */
    atomic_fetch_add(&q->epoch, 1);
    atomic_store(&q->used, 0);
    atomic_store(&q->peak, 0);
    atomic_store_explicit(&q->limit, budget_bytes > TW_QUEUE_MIN_BUDGET ? budget_bytes : TW_QUEUE_MIN_BUDGET,
                          memory_order_release);
    pthread_mutex_unlock(&q->lock);
    return 0;
}

void tw_queue_detach(tw_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    q->stopping = 1; /* no new helper */
    while (q->helpers > 0)
        pthread_cond_wait(&q->room, &q->lock);
    q->ops = NULL;
    q->ops_arg = NULL;
    q->running = 0;
    q->stopping = 0;
    /* Unbounded from now on: chunks charged before owe nothing (the epoch moves). */
    atomic_store_explicit(&q->limit, 0, memory_order_release);
    atomic_fetch_add(&q->epoch, 1);
    pthread_cond_broadcast(&q->room);
    pthread_mutex_unlock(&q->lock);
}

int tw_queue_attached(tw_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    int attached = q->ops != NULL;
    pthread_mutex_unlock(&q->lock);
    return attached;
}

tw_chunk_t *tw_queue_take(tw_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    tw_chunk_t *list = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->lock);
    return list;
}

tw_chunk_t *tw_queue_pop(tw_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    tw_chunk_t *chunk = q->head;
    if (chunk != NULL) {
        q->head = chunk->next;
        if (q->head == NULL)
            q->tail = NULL;
        chunk->next = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    return chunk;
}

void tw_queue_stop(tw_queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    q->stopping = 1;
    pthread_cond_broadcast(&q->room);
    pthread_mutex_unlock(&q->lock);
}

void tw_queue_set_running(tw_queue_t *q, int running)
{
    pthread_mutex_lock(&q->lock);
    q->running = running;
    pthread_mutex_unlock(&q->lock);
}
