/* SPDX-License-Identifier: MIT */
/*
 * Recorder bookkeeping: thread attachment, chunk hand-off, collection. The per-call work is inline in
 * recorder.h; everything here runs once per thread, per chunk or per session.
 *
 * Lifetime of a tw_thread_t: it is referenced by its recorder and by its OS thread (through a
 * pthread key, whose destructor hands the partial chunk over when the thread exits). It is freed when
 * both references are gone, so a thread may outlive its recorder and a recorder its threads. Both
 * references are counted under registry_lock.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "torchwrapper/api.h"
#include "torchwrapper/recorder.h"
#include "writer_internal.h"

struct tw_recorder {
    pthread_mutex_t lock; /* guards the list of finished chunks */
    tw_chunk_t *head;
    tw_chunk_t *tail;
    uint64_t chunks;
    uint64_t records;
    _Atomic uint64_t next_id_block;
    tw_thread_t *threads; /* guarded by registry_lock */
    uint64_t thread_count;
    tw_writer_t *writer;  /* where finished chunks go; NULL: kept in the list above */
    uint32_t flush_epoch; /* bumped (atomically) to ask threads for their partial chunks */
    struct tw_recorder *next_recorder; /* all recorders, guarded by registry_lock (fork handling) */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

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
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t thread_key;
static int thread_key_ok;

static void push_chunk(tw_recorder_t *rec, tw_chunk_t *chunk)
{
    pthread_mutex_lock(&rec->lock);
    if (rec->writer != NULL) {
        rec->chunks++;
        rec->records += chunk->count;
        tw_writer_enqueue(rec->writer, chunk);
        pthread_mutex_unlock(&rec->lock);
        return;
    }
    tw_chunk_append(&rec->head, &rec->tail, chunk);
    rec->chunks++;
    rec->records += chunk->count;
    pthread_mutex_unlock(&rec->lock);
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
    if (t->recorder != NULL && t->chunk != NULL) {
        if (t->chunk->count > 0)
            push_chunk(t->recorder, t->chunk);
        else
            tw_chunk_release(t->chunk);
        t->chunk = NULL;
    }
    thread_release(t);
    pthread_mutex_unlock(&registry_lock);
}

static tw_recorder_t *all_recorders; /* guarded by registry_lock */

/*
 * fork(): every lock is taken before, so that none is held by a thread that does not exist in the
 * child, in the order of the rest of the library (registry, recorder, writer, pool).
 */
static void fork_prepare(void)
{
    pthread_mutex_lock(&registry_lock);
    for (tw_recorder_t *rec = all_recorders; rec != NULL; rec = rec->next_recorder) {
        pthread_mutex_lock(&rec->lock);
        if (rec->writer != NULL)
            tw_writer_fork_prepare(rec->writer);
    }
    pthread_mutex_lock(&pool_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&pool_lock);
    for (tw_recorder_t *rec = all_recorders; rec != NULL; rec = rec->next_recorder) {
        if (rec->writer != NULL)
            tw_writer_fork_parent(rec->writer);
        pthread_mutex_unlock(&rec->lock);
    }
    pthread_mutex_unlock(&registry_lock);
}

/*
 * In the child, only the forking thread exists. Records that were waiting in memory are the
 * parent's (which writes them); a recorder with a writer drops its copies, and its writer starts
 * afresh with the child's own files.
 */
static void fork_child(void)
{
    pthread_mutex_unlock(&pool_lock);
    for (tw_recorder_t *rec = all_recorders; rec != NULL; rec = rec->next_recorder) {
        if (rec->writer == NULL) {
            pthread_mutex_unlock(&rec->lock);
            continue;
        }
        tw_writer_fork_child(rec->writer);
        pthread_mutex_unlock(&rec->lock);
        for (tw_thread_t *t = rec->threads; t != NULL; t = t->next_in_recorder) {
            tw_chunk_release(t->chunk);
            t->chunk = NULL;
            t->dropped = 0;
        }
        rec->records = rec->chunks = 0;
    }
    pthread_mutex_unlock(&registry_lock);
}

static void make_key(void)
{
    thread_key_ok = pthread_key_create(&thread_key, on_thread_exit) == 0;
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int tw_recorder_create(tw_recorder_t **out)
{
    tw_recorder_t *rec = calloc(1, sizeof *rec);
    if (rec == NULL)
        return TW_ENOMEM;
    if (pthread_mutex_init(&rec->lock, NULL) != 0) {
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
    for (tw_chunk_t *c = rec->head, *next; c != NULL; c = next) {
        next = c->next;
        tw_chunk_release(c);
    }
    pthread_mutex_destroy(&rec->lock);
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
    t->flush_epoch = &rec->flush_epoch;
    t->seen_epoch = __atomic_load_n(&rec->flush_epoch, __ATOMIC_RELAXED);
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
        push_chunk(t->recorder, t->chunk);
        t->chunk = NULL;
    }
    /* Bounded memory: the writer says whether there is room (or waits for it, if asked to). */
    tw_writer_t *writer = __atomic_load_n(&t->recorder->writer, __ATOMIC_ACQUIRE);
    if (writer != NULL && !tw_writer_admit(writer))
        return NULL;
    tw_chunk_t *chunk = chunk_alloc(t->tid);
    if (chunk == NULL)
        return NULL;
    t->chunk = chunk;
    return chunk;
}

void tw_thread_flush(tw_thread_t *t)
{
    t->seen_epoch = __atomic_load_n(t->flush_epoch, __ATOMIC_RELAXED);
    if (t->chunk != NULL && t->chunk->count > 0) {
        push_chunk(t->recorder, t->chunk);
        t->chunk = NULL;
    }
}

void tw_recorder_set_writer(tw_recorder_t *rec, tw_writer_t *writer)
{
    pthread_mutex_lock(&rec->lock);
    __atomic_store_n(&rec->writer, writer, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&rec->lock);
}

void tw_recorder_request_flush(tw_recorder_t *rec)
{
    __atomic_add_fetch(&rec->flush_epoch, 1, __ATOMIC_RELAXED);
}

void tw_recorder_collect(tw_recorder_t *rec)
{
    pthread_mutex_lock(&registry_lock);
    for (tw_thread_t *t = rec->threads; t != NULL; t = t->next_in_recorder) {
        if (t->chunk != NULL && t->chunk->count > 0) {
            push_chunk(rec, t->chunk);
            t->chunk = NULL;
        }
    }
    pthread_mutex_unlock(&registry_lock);
}

int tw_recorder_foreach_chunk(tw_recorder_t *rec, int (*fn)(const tw_chunk_t *chunk, void *arg), void *arg)
{
    int result = 0;
    pthread_mutex_lock(&rec->lock);
    for (const tw_chunk_t *c = rec->head; c != NULL && result == 0; c = c->next)
        result = fn(c, arg);
    pthread_mutex_unlock(&rec->lock);
    return result;
}

void tw_recorder_stats(tw_recorder_t *rec, tw_recorder_stats_t *stats)
{
    pthread_mutex_lock(&registry_lock);
    stats->dropped = 0;
    for (const tw_thread_t *t = rec->threads; t != NULL; t = t->next_in_recorder)
        stats->dropped += t->dropped;
    stats->threads = rec->thread_count;
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_lock(&rec->lock);
    stats->records = rec->records;
    stats->chunks = rec->chunks;
    pthread_mutex_unlock(&rec->lock);
}

const char *tw_module_path(uint32_t module_id)
{
    if (module_id == TW_MODULE_NONE)
        return NULL;
    if (module_id == TW_MODULE_ROOT)
        return "";
    return tw_api_name(module_id - 1);
}
