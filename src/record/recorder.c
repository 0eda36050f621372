/* SPDX-License-Identifier: MIT */
/*
 * Recorder bookkeeping: thread attachment, chunk hand-off to the queue, collection. The per-call work
 * is inline in recorder.h; everything here runs once per thread, per chunk or per session. Finished
 * chunks go to the recorder's queue (queue.h), and nowhere else: whoever drains the queue (a writer)
 * is no business of the recorder's.
 *
 * Lifetime of a tw_thread_t: it is referenced by its recorder and by its OS thread (through a
 * pthread key, whose destructor hands the partial chunk over when the thread exits). It is freed when
 * both references are gone, so a thread may outlive its recorder and a recorder its threads. Both
 * references are counted under registry_lock.
 */
#include "config.h"
#include "torchwrapper/recorder.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "api_text.h"
#include "atfork.h"
#include "torchwrapper/api.h"
#include "torchwrapper/queue.h"

struct tw_recorder {
    tw_queue_t *queue;    /* where finished chunks go; in memory while nobody drains it */
    _Atomic uint64_t next_id_block;
    tw_thread_t *threads; /* guarded by registry_lock */
    uint64_t thread_count;
    uint32_t step;        /* see tw_recorder_set_step(); read by the hot path through tw_thread_t.step */
    struct tw_recorder *next_recorder; /* all recorders, guarded by registry_lock (fork handling) */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t thread_key;
static int thread_key_ok;

/* Counts t's records lost since the last report in the queue's drop counter. The hot path counts
 * them in t->dropped, on the thread and without a lock; they are reported here, off it. */
static void report_dropped(tw_thread_t *t, tw_queue_t *q)
{
    uint64_t dropped = t->dropped;
    tw_queue_add_dropped(q, dropped - t->dropped_reported);
    t->dropped_reported = dropped;
}

static void push_chunk(tw_thread_t *t, tw_chunk_t *chunk)
{
    report_dropped(t, t->recorder->queue);
    tw_queue_push(t->recorder->queue, chunk);
}

/* Drops one reference to t; registry_lock held. */
static void thread_release(tw_thread_t *t)
{
    if (--t->refs == 0) {
        tw_chunk_release(t->chunk);
        free(t);
    }
}

static void on_thread_exit(void *arg)
{
    tw_thread_t *t = arg;
    pthread_mutex_lock(&registry_lock);
    if (t->recorder != NULL) {
        if (t->chunk != NULL && t->chunk->count > 0)
            push_chunk(t, t->chunk);
        else
            tw_chunk_release(t->chunk);
        t->chunk = NULL;
        report_dropped(t, t->recorder->queue);
    }
    thread_release(t);
    pthread_mutex_unlock(&registry_lock);
}

static tw_recorder_t *all_recorders; /* guarded by registry_lock */

/*
 * fork(): the registry's lock is taken before (the queues take theirs and their writers' in their
 * own handlers, which run after this one: registry -> queue -> writer -> pool).
 */
static void fork_prepare(void)
{
    pthread_mutex_lock(&registry_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&registry_lock);
}

/*
 * In the child, only the forking thread exists. Records that were waiting in memory are the
 * parent's (which writes them): a recorder whose queue is drained drops the threads' partial chunks
 * (the queue has dropped its own, in its handler, which ran before this one).
 */
static void fork_child(void)
{
    for (tw_recorder_t *rec = all_recorders; rec != NULL; rec = rec->next_recorder) {
        if (!tw_queue_attached(rec->queue))
            continue;
        for (tw_thread_t *t = rec->threads; t != NULL; t = t->next_in_recorder) {
            tw_chunk_release(t->chunk);
            t->chunk = NULL;
            t->dropped = 0;
            t->dropped_reported = 0;
        }
    }
    pthread_mutex_unlock(&registry_lock);
}

static void make_key(void)
{
    thread_key_ok = pthread_key_create(&thread_key, on_thread_exit) == 0;
    tw_atfork_register(TW_ATFORK_RECORDERS, fork_prepare, fork_parent, fork_child);
}

int tw_recorder_create(tw_recorder_t **out)
{
    tw_recorder_t *rec = calloc(1, sizeof *rec);
    if (rec == NULL)
        return TW_ENOMEM;
    /* The queue first: its fork handlers must be registered before the recorder's (see fork_prepare). */
    if (tw_queue_create(&rec->queue) != 0) {
        free(rec);
        return TW_ENOMEM;
    }
    atomic_init(&rec->next_id_block, 1);
    pthread_once(&key_once, make_key);
    pthread_mutex_lock(&registry_lock);
    rec->next_recorder = all_recorders;
    all_recorders = rec;
    pthread_mutex_unlock(&registry_lock);
    *out = rec;
    return 0;
}

void tw_recorder_destroy(tw_recorder_t *rec)
{
    if (rec == NULL)
        return;
    pthread_mutex_lock(&registry_lock);
    for (tw_recorder_t **p = &all_recorders; *p != NULL; p = &(*p)->next_recorder) {
        if (*p == rec) {
            *p = rec->next_recorder;
            break;
        }
    }
    for (tw_thread_t *t = rec->threads, *next; t != NULL; t = next) {
        next = t->next_in_recorder;
        t->recorder = NULL;
        tw_chunk_release(t->chunk);
        t->chunk = NULL;
        thread_release(t);
    }
    pthread_mutex_unlock(&registry_lock);
    tw_queue_destroy(rec->queue);
    free(rec);
}

tw_thread_t *tw_recorder_attach(tw_recorder_t *rec)
{
    pthread_once(&key_once, make_key);
    if (!thread_key_ok)
        return NULL;
    pthread_mutex_lock(&registry_lock);
    tw_thread_t *old = pthread_getspecific(thread_key);
    if (old != NULL && old->recorder == rec) {
        pthread_mutex_unlock(&registry_lock);
        return old;
    }
    tw_thread_t *t = calloc(1, sizeof *t);
    if (t == NULL || pthread_setspecific(thread_key, t) != 0) {
        if (old != NULL)
            pthread_setspecific(thread_key, old);
        free(t);
        pthread_mutex_unlock(&registry_lock);
        return NULL;
    }
    t->recorder = rec;
    t->flush_epoch = tw_queue_flush_epoch(rec->queue);
    t->seen_epoch = __atomic_load_n(t->flush_epoch, __ATOMIC_RELAXED);
    t->step = &rec->step;
    t->tid = (uint64_t)syscall(SYS_gettid);
    t->refs = 2;
    t->next_in_recorder = rec->threads;
    rec->threads = t;
    rec->thread_count++;
    if (old != NULL)
        thread_release(old); /* this OS thread now records for rec */
    pthread_mutex_unlock(&registry_lock);
    return t;
}

void tw_thread_refill_ids(tw_thread_t *t)
{
    t->next_id = atomic_fetch_add_explicit(&t->recorder->next_id_block, TW_CALL_ID_BLOCK,
                                           memory_order_relaxed);
    t->id_end = t->next_id + TW_CALL_ID_BLOCK;
}

tw_chunk_t *tw_thread_next_chunk(tw_thread_t *t)
{
    if (t->chunk != NULL) {
        push_chunk(t, t->chunk);
        t->chunk = NULL;
    } else {
        report_dropped(t, t->recorder->queue);
    }
    /* Bounded memory: the queue's budget says whether there is room (or waits for it, if its
     * writer asks). Where the writer thread is late or behind, this thread writes for it here
     * (tw_queue_consumer_t's help): at torch's default threads the writer, at the lowest priority,
     * gets no CPU for seconds, and a help then writes seconds of records (BERT through `run`: 17 ms,
     * five times in 900 steps). That is the profiler's time, not the calls' in progress around it:
     * excluded from their costs, as the statistics hooks' time is (tw_thread_exclude), and so is a
     * wait for room (on_full "wait"). */
    uint64_t consumer_ticks = 0;
    tw_chunk_t *chunk = tw_queue_chunk_timed(t->recorder->queue, t->tid, &consumer_ticks);
    tw_thread_exclude(t, consumer_ticks);
    if (chunk == NULL)
        return NULL;
    t->chunk = chunk;
    return chunk;
}

void tw_thread_flush(tw_thread_t *t)
{
    t->seen_epoch = __atomic_load_n(t->flush_epoch, __ATOMIC_RELAXED);
    if (t->chunk != NULL && t->chunk->count > 0) {
        push_chunk(t, t->chunk);
        t->chunk = NULL;
    }
}

void tw_recorder_set_step(tw_recorder_t *rec, uint32_t step)
{
    __atomic_store_n(&rec->step, step, __ATOMIC_RELAXED);
}

uint32_t tw_recorder_step(tw_recorder_t *rec)
{
    return __atomic_load_n(&rec->step, __ATOMIC_RELAXED);
}

tw_queue_t *tw_recorder_queue(tw_recorder_t *rec)
{
    return rec->queue;
}

void tw_recorder_collect(tw_recorder_t *rec)
{
    pthread_mutex_lock(&registry_lock);
    for (tw_thread_t *t = rec->threads; t != NULL; t = t->next_in_recorder) {
        if (t->chunk != NULL && t->chunk->count > 0) {
            push_chunk(t, t->chunk);
            t->chunk = NULL;
        } else {
            report_dropped(t, rec->queue);
        }
    }
    pthread_mutex_unlock(&registry_lock);
}

int tw_recorder_foreach_chunk(tw_recorder_t *rec, int (*fn)(const tw_chunk_t *chunk, void *arg), void *arg)
{
    return tw_queue_foreach(rec->queue, fn, arg);
}

void tw_recorder_stats(tw_recorder_t *rec, tw_recorder_stats_t *stats)
{
    pthread_mutex_lock(&registry_lock);
    stats->dropped = 0;
    for (const tw_thread_t *t = rec->threads; t != NULL; t = t->next_in_recorder)
        stats->dropped += t->dropped;
    stats->threads = rec->thread_count;
    pthread_mutex_unlock(&registry_lock);
    tw_queue_counts(rec->queue, &stats->chunks, &stats->records);
}

const tw_api_text_t *tw_module_text(uint32_t module_id)
{
    static const char quotes[2 + TW_API_TEXT_PAD] = "\"\""; /* padded: api_text.h */
    static const tw_api_text_t root = {"", 0, quotes, 2, quotes, 2}; /* CSV: "" tells it from no module */
    if (module_id == TW_MODULE_NONE)
        return NULL;
    if (module_id == TW_MODULE_ROOT)
        return &root;
    return tw_api_text(module_id - 1);
}

const char *tw_module_path(uint32_t module_id)
{
    const tw_api_text_t *text = tw_module_text(module_id);
    return text != NULL ? text->name : NULL;
}
