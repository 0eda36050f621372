/* SPDX-License-Identifier: MIT */
/*
 * The writer: its thread, the producers' help, create and close, fork. The thread drains sources
 * (writer_state.h): the call records (writer_calls.c) and the row streams (writer_streams.c), into
 * out_dir's files (writer_outdir.c) and the captures' (writer_captures.c). See writer.h.
 */
#include "config.h"
#include "torchwrapper/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "torchwrapper/api.h"
#include "torchwrapper/config_keys.h"
#include "format.h"
#include "writer_calls.h"
#include "writer_captures.h"
#include "writer_outdir.h"
#include "writer_state.h"
#include "config/config_keys_internal.h"
#include "config/config_typed.h"
#include "record/queue_internal.h"
#include "clock_internal.h"

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int tw_writer_set_manifest_key(tw_writer_t *w, const char *key, const char *json_value)
{
    cJSON *value = cJSON_Parse(json_value);
    if (value == NULL)
        return TW_EINVAL;
    pthread_mutex_lock(&w->lock);
    cJSON *root = w->manifest_extra != NULL ? cJSON_Parse(w->manifest_extra) : cJSON_CreateObject();
    char *text = NULL;
    if (cJSON_IsObject(root)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, key);
        if (cJSON_AddItemToObject(root, key, value)) {
            value = NULL; /* root owns it */
            text = cJSON_PrintUnformatted(root);
        }
    }
    if (text != NULL) {
        free(w->manifest_extra);
        w->manifest_extra = text;
        w->manifest_due = 1;
    }
    pthread_mutex_unlock(&w->lock);
    cJSON_Delete(root);
    cJSON_Delete(value);
    return text != NULL ? 0 : TW_ENOMEM;
}

/* ---- the thread and its doorbell ---------------------------------------------------------------- */

/* The queue rings it at each chunk pushed, with the queue's lock held (queue -> writer). */
static void ring_from_queue(void *arg)
{
    tw_writer_ring(arg);
}

/* Waits until the doorbell rings, the writer is stopping, or CLOCK_MONOTONIC passes deadline_ns.
 * Returns with the writer's lock held; the caller reads what it needs and unlocks. */
static void wait_for_work(tw_writer_t *w, uint64_t deadline_ns)
{
    pthread_mutex_lock(&w->lock);
    while (!atomic_load(&w->rung) && !w->stopping) {
        uint64_t now = monotonic_ns();
        if (now >= deadline_ns)
            break;
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        uint64_t wait = deadline_ns - now;
        deadline.tv_sec += (time_t)(wait / 1000000000u);
        deadline.tv_nsec += (long)(wait % 1000000000u);
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&w->bell, &w->lock, &deadline);
        w->wakeups++;
    }
    atomic_store(&w->rung, 0);
}

/* What every flush interval brings: the files' buffers written, captures moved on, the sites and the
 * summary as they stand (a long job can be watched), and the recording threads asked for their
 * partial chunks, so that nothing older than about one interval waits in memory. The pen held. */
static void flush_interval(tw_writer_t *w, int stopping)
{
    for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next)
        tw_fileset_flush(&w->env, &s->files);
    tw_captures_advance(w, stopping);
    if (w->sites != NULL && !stopping)
        tw_writer_write_sites(w);
    if (w->summary_changes > 0 && !stopping) {
        tw_summary_write(&w->env, w->summary_path, &w->stats);
        w->summary_changes = 0;
    }
    tw_queue_request_flush(w->queue);
}

/*
 * The writer thread takes only CPU time that no other thread of the machine wants (SCHED_IDLE, on
 * Linux; elsewhere, or where refused, it stays as it was made). At normal priority it was woken on
 * a core where one of torch's intra-op workers ran and took it: the whole parallel region waited
 * for that worker (transformers' BERT under `run`: 1.10x the loop time where the writer's
 * instructions were 3% more). A starved writer thread is no risk to the records: past the budget's
 * high-water mark the producers write for it (writer_help), and the closing thread writes what is
 * left (tw_writer_close). Named, for top -H and the tests.
 */
static void writer_thread_lowest(void)
{
#if defined(__linux__) && defined(SCHED_IDLE)
    struct sched_param param = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
#endif
}

/*
 * Raises the writer thread to normal priority (SCHED_OTHER), where the process may: a producer waits
 * for the pen the thread holds, or the program closes. The kernel counts SCHED_IDLE as nice 20: an
 * unprivileged thread leaves it only for a nice its RLIMIT_NICE allows (20 - the limit; with the
 * usual limit, 0, none), so that is the nice it gets. The thread goes back to the lowest priority
 * when it next wakes, unless the writer is stopping. Refused: nothing changes (the producer's wait is
 * one chunk of the thread's writing). force: even if a raise is recorded (boosted), for the closing
 * thread, which must not depend on that flag's timing against the thread's own lowering.
 */
static void writer_thread_raise(tw_writer_t *w, int force)
{
#if defined(__linux__) && defined(SCHED_IDLE)
    pid_t tid = atomic_load(&w->tid);
    if (tid <= 0 || (atomic_exchange(&w->boosted, 1) && !force))
        return;
    struct sched_param param = {0};
    int rc = sched_setscheduler(tid, SCHED_OTHER, &param);
    struct rlimit limit;
    if (rc != 0 && errno == EPERM && getrlimit(RLIMIT_NICE, &limit) == 0 && limit.rlim_cur >= 1 &&
        limit.rlim_cur <= 40) {
        int allowed = 20 - (int)limit.rlim_cur;
        errno = 0;
        int nice = getpriority(PRIO_PROCESS, (id_t)tid);
        if (errno == 0 && nice < allowed && setpriority(PRIO_PROCESS, (id_t)tid, allowed) == 0)
            rc = sched_setscheduler(tid, SCHED_OTHER, &param);
    }
    if (rc != 0)
        atomic_store(&w->boosted, 0);
#else
    (void)w;
    (void)force;
#endif
}

/* The calling thread's CPU time (ns), 0 where it cannot be read. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *writer_main(void *arg)
{
    tw_writer_t *w = arg;
#if defined(__linux__)
    atomic_store(&w->tid, (pid_t)syscall(SYS_gettid));
#endif
    /* Lowered only under the lock, and never once stopping is set (under the same lock): the closing
     * thread raises it after that to see it leave. A lowering that came after a raise (the thread
     * had taken the flag of an earlier one, then a producer raised it) left it at the lowest
     * priority with the raise recorded, so that close's raise was skipped and close waited for a
     * thread that got no CPU while every core was busy. */
    pthread_mutex_lock(&w->lock);
    if (!w->stopping)
        writer_thread_lowest();
    pthread_mutex_unlock(&w->lock);
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "tw-writer"); /* once at its priority: the tests look for it */
#endif
    uint64_t next_flush = monotonic_ns() + w->flush_interval_ns;
    for (;;) {
        wait_for_work(w, next_flush); /* returns with the lock held */
        int stopping = w->stopping;
        int manifest_due = w->manifest_due;
        w->manifest_due = 0;
        if (!stopping && atomic_exchange(&w->boosted, 0)) /* raised for a while: back to the lowest */
            writer_thread_lowest();
        pthread_mutex_unlock(&w->lock);
        if (stopping) /* the closing thread writes what is left */
            break;
        if (manifest_due) { /* written with the pen only: two writers would share its temporary file */
            pthread_mutex_lock(&w->pen);
            if (!w->pen_closed)
                tw_writer_write_manifest(w);
            pthread_mutex_unlock(&w->pen);
        }
        /* Each drain takes a new view of the captures after taking its rows (the calls' runs first,
         * so that the view is fresh for tw_captures_advance below too). */
        uint64_t drained_from = monotonic_ns(); /* what was queued by then is in the flush below */
        for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next)
            s->ops->drain(w, s);
        tw_queue_room(w->queue); /* what was written gave its memory back */
        uint64_t now = monotonic_ns();
        if (now >= next_flush) {
            pthread_mutex_lock(&w->pen);
            if (!w->pen_closed)
                flush_interval(w, 0);
            pthread_mutex_unlock(&w->pen);
            atomic_store_explicit(&w->flushed_ns, drained_from, memory_order_release);
            next_flush = now + w->flush_interval_ns;
        }
        /* a clock read a round (a round is a flush interval or a chunk's worth): what the manifest's
         * "writer" says this thread cost, read by whoever writes it */
        atomic_store_explicit(&w->thread_cpu_ns, thread_cpu_ns(), memory_order_relaxed);
    }
    atomic_store_explicit(&w->thread_cpu_ns, thread_cpu_ns(), memory_order_relaxed);
    return NULL;
}

/* Flush intervals after which a writer thread that has not flushed is late: a producer then writes
 * and flushes for it. The thread at the lowest priority gets no CPU while other programs keep every
 * core busy (DataLoader workers, a second job): without this, records below the high-water mark
 * stayed in memory, not in the files, for as long as that lasted (a test killed its child with
 * SIGKILL to find them; an on-demand capture waited as long). */
#define WRITER_LATE_INTERVALS 4

/* Whether, at now, the files were last flushed WRITER_LATE_INTERVALS or more intervals ago (a flush
 * after now, by another thread, is not late). */
static int writer_late(tw_writer_t *w, uint64_t now)
{
    uint64_t flushed = atomic_load_explicit(&w->flushed_ns, memory_order_acquire);
    return now >= flushed && now - flushed >= WRITER_LATE_INTERVALS * w->flush_interval_ns;
}

/* A producer writes for the writer thread (the queue's help, tw_queue_consumer_t): the call records
 * until the budget is down to a quarter (all of them when late), and the rows of each stream.
 * urgency: TW_QUEUE_HELP_MUST (no room left) waits for the pen (the thread, raised if it may be,
 * leaves the rest to this one after its chunk); TW_QUEUE_HELP_HIGH writes only when nobody holds
 * it; TW_QUEUE_HELP_IF_LATE only when the thread is late (WRITER_LATE_INTERVALS), and then waits for
 * the pen as MUST does and does the thread's flush too (files, manifest, sites, summary): a clock
 * read a chunk when it is not late. */
static void writer_help(void *arg, int urgency)
{
    tw_writer_t *w = arg;
    uint64_t now = 0;
    if (urgency == TW_QUEUE_HELP_IF_LATE) {
        now = monotonic_ns();
        if (!writer_late(w, now))
            return;
    }
    uint64_t began = now != 0 ? now : monotonic_ns(); /* the program's time from here: help_ns */
    if (pthread_mutex_trylock(&w->pen) != 0) {
        /* late: whoever holds the pen leaves the rest to this one after its chunk, then the flush
         * comes here, so that a late thread's records reach the files now, whoever writes them */
        if (urgency == TW_QUEUE_HELP_HIGH)
            return;
        atomic_fetch_add(&w->pen_waiting, 1);
        writer_thread_raise(w, 0);
        pthread_mutex_lock(&w->pen);
        atomic_fetch_sub(&w->pen_waiting, 1);
        /* another late producer, or the thread, flushed meanwhile: nothing is late any more */
        if (urgency == TW_QUEUE_HELP_IF_LATE && !writer_late(w, now)) {
            pthread_mutex_unlock(&w->pen);
            atomic_fetch_add_explicit(&w->help_ns, monotonic_ns() - began, memory_order_relaxed);
            return;
        }
    }
    if (!w->pen_closed) {
        atomic_fetch_add(&w->helped, 1);
        /* late: everything queued, so that the files catch up; else a bounded share */
        for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next)
            s->ops->write(w, s, urgency == TW_QUEUE_HELP_IF_LATE);
        if (urgency == TW_QUEUE_HELP_IF_LATE) {
            pthread_mutex_lock(&w->lock); /* after the pen, as final_writing takes them */
            int manifest_due = w->manifest_due;
            w->manifest_due = 0;
            pthread_mutex_unlock(&w->lock);
            if (manifest_due)
                tw_writer_write_manifest(w);
            flush_interval(w, 0);
            atomic_store_explicit(&w->flushed_ns, now, memory_order_release);
        }
    }
    pthread_mutex_unlock(&w->pen);
    tw_queue_room(w->queue); /* producers waiting for room (on_full "wait") */
    atomic_fetch_add_explicit(&w->help_ns, monotonic_ns() - began, memory_order_relaxed);
}

/* The last writing, on the closing thread, so that it never waits for CPU time the writer thread may
 * not get: what is queued, the files' buffers, the captures finished, the files closed. Writers that
 * come later write nothing. */
static void final_writing(tw_writer_t *w)
{
    atomic_fetch_add(&w->pen_waiting, 1); /* the writer thread stops after its chunk */
    if (pthread_mutex_trylock(&w->pen) != 0) {
        writer_thread_raise(w, 1);
        pthread_mutex_lock(&w->pen);
    }
    atomic_fetch_sub(&w->pen_waiting, 1);
    if (!w->pen_closed) {
        pthread_mutex_lock(&w->lock);
        w->manifest_due = 0;
        pthread_mutex_unlock(&w->lock);
        for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next)
            s->ops->write(w, s, 1);
        flush_interval(w, 1);
        w->pen_closed = 1;
        for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next)
            tw_fileset_close(&w->env, &s->files);
    }
    pthread_mutex_unlock(&w->pen);
}

/* Starts the thread, unless it runs, with every signal blocked, so that SIGINT and SIGTERM reach the
 * program's own threads. Returns 0 or an errno value. (The queue calls it at the first chunk after a
 * fork, with its lock held.) */
static int ensure_thread(void *arg)
{
    tw_writer_t *w = arg;
    int err = 0;
    pthread_mutex_lock(&w->lock);
    if (!w->thread_running) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        atomic_store(&w->flushed_ns, monotonic_ns()); /* late counts from here */
        err = pthread_create(&w->thread, NULL, writer_main, w);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (err == 0)
            w->thread_running = 1;
    }
    pthread_mutex_unlock(&w->lock);
    return err;
}

/* ---- fork (driven by the queue's atfork handlers, with the queue's lock held) ------------------- */

/* Lock order: the writer's lock, then each source's own, then the step timeline's. */
static void fork_prepare(void *arg)
{
    tw_writer_t *w = arg;
    pthread_mutex_lock(&w->lock);
    for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next)
        if (s->ops->fork_prepare != NULL)
            s->ops->fork_prepare(s);
    pthread_mutex_lock(&w->timeline_lock);
}

static void fork_parent(void *arg)
{
    tw_writer_t *w = arg;
    pthread_mutex_unlock(&w->timeline_lock);
    for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next)
        if (s->ops->fork_parent != NULL)
            s->ops->fork_parent(s);
    pthread_mutex_unlock(&w->lock);
}

/*
 * In the child of a fork: the writer thread does not exist there, the queued chunks (the queue drops
 * them) and rows and the buffered output are the parent's (the parent writes them), and so are the
 * open files. The child starts afresh, with its own files and manifest, and a thread started at its
 * first chunk.
 */
static void fork_child(void *arg)
{
    tw_writer_t *w = arg;
    pthread_mutex_unlock(&w->timeline_lock);
    pthread_mutex_init(&w->timeline_lock, NULL);
    for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next) {
        s->ops->fork_child(s);
        atomic_store(&s->dropped_full, 0);
        atomic_store(&s->dropped_invalid, 0);
        atomic_store(&s->dropped_closed, 0);
        atomic_store(&s->dropped_upstream, 0);
        tw_fileset_fork_child(&s->files);
    }
    pthread_mutex_unlock(&w->lock);
    pthread_mutex_init(&w->lock, NULL);
    /* Held, maybe, by a thread that is not in the child (the writer thread, or a producer writing
     * for it): the child writes on its own from here on. */
    pthread_mutex_init(&w->pen, NULL);
    w->pen_closed = 0;
    atomic_store(&w->pen_waiting, 0);
    atomic_store(&w->helped, 0);
    atomic_store(&w->help_ns, 0);
    atomic_store(&w->thread_cpu_ns, 0); /* the parent's thread: the child's starts at its first chunk */
    atomic_store(&w->close_ns, 0);
    atomic_store(&w->boosted, 0);
    atomic_store(&w->tid, 0);
    tw_cond_init_monotonic(&w->bell);
    w->thread_running = 0;
    atomic_store(&w->rung, 0);
    /* The chunk the parent's writer was writing: the parent writes it; the child's copy would be
     * lost with the thread that held it. */
    while (w->batch != NULL) {
        tw_chunk_t *next = w->batch->next;
        tw_chunk_release(w->batch);
        w->batch = next;
    }
    /* The parent's captures are the parent's: its files, its steps. */
    tw_captures_free(w, 1);
    w->truncated = 0;
    w->env.write_errno = 0;
    tw_stats_free(&w->stats);
    tw_stats_init(&w->stats);
    w->env.pid = getpid();
    w->start_ns = tw_realtime_ns();
    snprintf(w->manifest_path, sizeof w->manifest_path, "%s/manifest-%lld.json", w->out_dir, (long long)w->env.pid);
    snprintf(w->summary_path, sizeof w->summary_path, "%s/summary-%lld.json", w->out_dir, (long long)w->env.pid);
    snprintf(w->sites_path, sizeof w->sites_path, "%s/sites-%lld.json", w->out_dir, (long long)w->env.pid);
    w->sites_written = 0;
    w->sites_file_written = 0;
}

static const tw_queue_consumer_t consumer_ops = {ring_from_queue, ensure_thread, fork_prepare, fork_parent,
                                                 fork_child, writer_help};

/* ---- public API ---------------------------------------------------------------------------------- */

void tw_config_writer(const tw_config_t *config, tw_writer_config_t *out)
{
    out->out_dir = config->out_dir;
    out->format = config->format;
    out->compress = config->compress;
    out->file_max_size = config->file_max_size;
    out->file_name_spec = config->file_name_spec;
    out->max_files = config->max_files;
    out->max_total_size = config->max_total_size;
    out->flush_interval_ns = config->flush_interval_ns;
    out->buffer_bytes = config->buffer_bytes;
    out->block_when_full = config->block_when_full;
    out->schedule = config->schedule;
    out->summary_only = config->summary_only;
}

int tw_writer_create(const tw_writer_config_t *config, tw_queue_t *queue, const tw_clock_t *clock,
                     tw_writer_t **out, char *err, size_t err_size)
{
    if (config == NULL || queue == NULL || clock == NULL || out == NULL || config->out_dir == NULL ||
        config->out_dir[0] == '\0') {
        snprintf(err, err_size, "out_dir is missing");
        return TW_EINVAL;
    }
    if (config->format != TW_FORMAT_CSV && config->format != TW_FORMAT_JSON) {
        snprintf(err, err_size, "format %d is not csv or json", (int)config->format);
        return TW_EINVAL;
    }
    if (config->compress != TW_COMPRESS_NONE && config->compress != TW_COMPRESS_GZIP) {
        snprintf(err, err_size, "compress %d is not none or gzip", (int)config->compress);
        return TW_EINVAL;
    }
    char given[32];
    snprintf(given, sizeof given, "%llu", (unsigned long long)config->file_max_size);
    if (tw_config_check_file_max_size(config->file_max_size, given, err, err_size) != 0)
        return TW_EINVAL;
    /* Zero fields take the config's defaults (config_keys.c, the one table of them). */
    const tw_config_t *defaults = tw_config_defaults(TW_CONFIG_DEFAULTS_TORCHWRAPPER);
    if (defaults == NULL) {
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    const char *spec = config->file_name_spec ? config->file_name_spec : defaults->file_name_spec;
    if (tw_name_spec_check(spec, err, err_size) != 0)
        return TW_EINVAL;
    int made = tw_make_dirs(config->out_dir);   /* with its missing parents, as mkdir -p */
    struct stat st;
    if (made != 0 && stat(config->out_dir, &st) != 0) {   /* one that exists is checked below */
        snprintf(err, err_size, "out_dir '%s' cannot be created: %s", config->out_dir, tw_strerror(made));
        return TW_EIO;
    }
    if (stat(config->out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_size, "out_dir '%s' is not a directory", config->out_dir);
        return TW_EIO;
    }
    if (access(config->out_dir, W_OK | X_OK) != 0) {
        snprintf(err, err_size, "out_dir '%s' is not writable: %s", config->out_dir, strerror(errno));
        return TW_EIO;
    }
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
        fprintf(stderr, "torchwrapper: warning: out_dir '%s' is writable by every user and has no sticky bit: "
                        "others can delete or replace the record files (chmod o-w or +t)\n", config->out_dir);
    tw_writer_t *w = calloc(1, sizeof *w);
    if (w == NULL || (w->calls.files.buf = malloc(TW_BUFFER_FLUSH + TW_LINE_MAX)) == NULL) {
        free(w);
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    w->out_dir = strdup(config->out_dir);
    w->spec = strdup(spec);
    w->manifest_extra = config->manifest_json ? strdup(config->manifest_json) : NULL;
    if (w->out_dir == NULL || w->spec == NULL || (config->manifest_json && w->manifest_extra == NULL)) {
        free(w->out_dir);
        free(w->spec);
        free(w->manifest_extra);
        free(w->calls.files.buf);
        free(w);
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    w->env.out_dir = w->out_dir;
    w->env.spec = w->spec;
    w->env.format = config->format;
    w->env.compress = config->compress;
    w->env.max_size = tw_fileset_file_cap(config->file_max_size, config->max_total_size);
    w->env.max_files = config->max_files;
    w->env.max_total_size = config->max_total_size;
    w->env.lock = &w->lock;
    w->flush_interval_ns = config->flush_interval_ns ? config->flush_interval_ns : defaults->flush_interval_ns;
    uint64_t buffer_bytes = config->buffer_bytes ? config->buffer_bytes : defaults->buffer_bytes;
    /* One budget for every byte waiting for the writer (queue.h): chunks with their text, and rows. */
    w->buffer_bytes = buffer_bytes > TW_QUEUE_MIN_BUDGET ? buffer_bytes : TW_QUEUE_MIN_BUDGET;
    w->env.rank = config->rank;
    w->schedule = config->schedule;
    w->summary_only = config->summary_only;
    w->sites = config->sites;
    w->clock = *clock;
    w->queue = queue;
    tw_writer_calls_init(w);
    w->env.pid = getpid();
    w->start_ns = tw_realtime_ns();
    if (gethostname(w->env.host, sizeof w->env.host - 1) != 0)
        strcpy(w->env.host, "localhost");
    tw_stats_init(&w->stats);
    pthread_mutex_init(&w->pen, NULL);
    pthread_mutex_init(&w->lock, NULL);
    tw_cond_init_monotonic(&w->bell);
    pthread_mutex_init(&w->timeline_lock, NULL);
    w->timeline[0].step = 0; /* step 0 began now */
    w->timeline[0].begin_ns = tw_clock_epoch_ns(&w->clock, tw_clock_ticks(w->clock.source));
    w->timeline_next = w->timeline_count = 1;
    char suffix[32] = "";
    if (config->per_process_names)
        snprintf(suffix, sizeof suffix, "-%lld", (long long)w->env.pid);
    if (snprintf(w->manifest_path, sizeof w->manifest_path, "%s/manifest%s.json", w->out_dir, suffix) >=
            (int)sizeof w->manifest_path ||
        snprintf(w->summary_path, sizeof w->summary_path, "%s/summary%s.json", w->out_dir, suffix) >=
            (int)sizeof w->summary_path ||
        snprintf(w->sites_path, sizeof w->sites_path, "%s/sites%s.json", w->out_dir, suffix) >=
            (int)sizeof w->sites_path) {
        snprintf(err, err_size, "out_dir '%s' is too long", config->out_dir);
        tw_writer_destroy(w);
        return TW_EINVAL;
    }
    if (tw_queue_attach(w->queue, w->buffer_bytes, config->block_when_full, &consumer_ops, w, 0) != 0) {
        snprintf(err, err_size, "the queue has a consumer already");
        tw_writer_destroy(w);
        return TW_EBUSY;
    }
    w->attached = 1;
    int thread_err = ensure_thread(w);
    if (thread_err != 0) {
        snprintf(err, err_size, "cannot start the writer thread: %s", strerror(thread_err));
        tw_writer_destroy(w);
        return TW_EIO;
    }
    tw_queue_set_running(w->queue, 1);
    *out = w;
    return 0;
}

void tw_writer_enqueue(tw_writer_t *w, tw_chunk_t *chunk)
{
    tw_queue_push(w->queue, chunk);
}

int tw_writer_close(tw_writer_t *w)
{
    /* Rows written to a stream from now on are refused and counted: the last drain is below. */
    for (writer_source_t *s = tw_writer_sources(w); s != NULL; s = s->next)
        if (s->ops->close != NULL)
            s->ops->close(s);
    pthread_mutex_lock(&w->lock);
    int closed = w->closed;
    pthread_mutex_unlock(&w->lock);
    if (closed)
        return w->env.write_errno ? TW_EIO : 0;
    tw_queue_stop(w->queue); /* producers waiting for room stop waiting, no new helper comes */
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_signal(&w->bell);
    int running = w->thread_running;
    pthread_mutex_unlock(&w->lock);
    uint64_t closing = monotonic_ns();
    final_writing(w);
    if (running) {
        /* It has only to see stopping and leave, but at the lowest priority on busy cores (torch's
         * threads spinning, another process) that could wait a long time: raised where we may. */
        writer_thread_raise(w, 1); /* stopping is set: the thread no longer lowers itself */
        pthread_join(w->thread, NULL);
        pthread_mutex_lock(&w->lock);
        w->thread_running = 0;
        pthread_mutex_unlock(&w->lock);
    }
    atomic_store(&w->close_ns, monotonic_ns() - closing); /* the stop's wait for the files, in the manifest */
    pthread_mutex_lock(&w->lock);
    w->closed = 1;
    pthread_mutex_unlock(&w->lock);
    w->end_ns = tw_realtime_ns();
    tw_summary_write(&w->env, w->summary_path, &w->stats);
    tw_writer_write_manifest(w); /* before detaching: it reads the budget's peak */
    /* Chunks pushed from now on stay in the queue, in memory, as when no writer was attached. */
    tw_queue_detach(w->queue);
    return w->env.write_errno ? TW_EIO : 0;
}

void tw_writer_destroy(tw_writer_t *w)
{
    if (w == NULL)
        return;
    if (w->thread_running)
        tw_writer_close(w);
    else if (w->attached && !w->closed)
        tw_queue_detach(w->queue); /* never closed (a forked child that wrote nothing) */
    for (writer_source_t *s = w->calls.next, *next; s != NULL; s = next) {
        next = s->next;
        s->ops->free(s);
    }
    tw_captures_free(w, 0);
    tw_fileset_free(&w->calls.files);
    tw_stats_free(&w->stats);
    pthread_mutex_destroy(&w->pen);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->bell);
    pthread_mutex_destroy(&w->timeline_lock);
    free(w->out_dir);
    free(w->spec);
    free(w->manifest_extra);
    free(w);
}

void tw_writer_stats(tw_writer_t *w, tw_writer_stats_t *stats)
{
    pthread_mutex_lock(&w->lock);
    stats->records_written = w->calls.files.written;
    stats->records_dropped = w->calls.files.dropped;
    stats->records_truncated = w->truncated;
    stats->bytes_written = w->calls.files.bytes_total;
    stats->write_errno = w->env.write_errno;
    stats->file_names_skipped = w->env.names_skipped;
    stats->symlinks_refused = w->env.links_refused;
    stats->wakeups = w->wakeups;
    pthread_mutex_unlock(&w->lock);
    stats->helped = atomic_load(&w->helped);
    stats->help_ns = atomic_load(&w->help_ns);
    stats->thread_cpu_ns = atomic_load(&w->thread_cpu_ns);
    stats->close_ns = atomic_load(&w->close_ns);
    uint64_t used;
    tw_queue_memory(w->queue, &used, &stats->memory_peak, &stats->memory_budget);
    if (stats->memory_budget == 0) /* detached: the budget as it was applied */
        stats->memory_budget = w->buffer_bytes;
}

const char *tw_writer_manifest_path(tw_writer_t *w)
{
    return w->manifest_path;
}

/* ---- steps ---------------------------------------------------------------------------------------- */

void tw_writer_set_step(tw_writer_t *w, uint64_t step)
{
    atomic_store_explicit(&w->step, step, memory_order_relaxed);
    int64_t now = tw_clock_epoch_ns(&w->clock, tw_clock_ticks(w->clock.source));
    pthread_mutex_lock(&w->timeline_lock);
    w->timeline[w->timeline_next].step = step;
    w->timeline[w->timeline_next].begin_ns = now;
    w->timeline_next = (w->timeline_next + 1) % WRITER_TIMELINE;
    if (w->timeline_count < WRITER_TIMELINE)
        w->timeline_count++;
    pthread_mutex_unlock(&w->timeline_lock);
}

uint64_t tw_writer_step(tw_writer_t *w)
{
    return atomic_load_explicit(&w->step, memory_order_relaxed);
}

uint64_t tw_writer_step_at(tw_writer_t *w, int64_t epoch_ns)
{
    pthread_mutex_lock(&w->timeline_lock);
    /* Newest first: the moments asked about are recent (a GPU row comes within a flush interval). */
    unsigned n = w->timeline_count, at = w->timeline_next;
    uint64_t step = w->timeline[(at + WRITER_TIMELINE - n) % WRITER_TIMELINE].step; /* older: the oldest known */
    for (unsigned i = 1; i <= n; i++) {
        unsigned k = (at + WRITER_TIMELINE - i) % WRITER_TIMELINE;
        if (w->timeline[k].begin_ns <= epoch_ns) {
            step = w->timeline[k].step;
            break;
        }
    }
    pthread_mutex_unlock(&w->timeline_lock);
    return step;
}

/* ---- the rows of a GPU session (gpu.h) ------------------------------------------------------------- */

_Static_assert(TW_GPU_STEP_NOW == TW_STEP_NOW, "a GPU row of the step in progress is the stream's");

static int gpu_open(void *context, const char *csv_header)
{
    tw_writer_t *w = context;
    return tw_writer_add_stream(w, "gpu", csv_header, &w->gpu);
}

static int gpu_put(void *context, const char *row, size_t len, uint64_t step, uint32_t api_id, uint64_t gpu_ns)
{
    tw_stream_row_t r = {row, len, step, api_id, gpu_ns};
    return tw_writer_stream_put(((tw_writer_t *)context)->gpu, &r);
}

static void gpu_lost(void *context, uint64_t rows)
{
    tw_writer_stream_add_dropped(((tw_writer_t *)context)->gpu, rows);
}

static uint64_t gpu_step_at(void *context, int64_t epoch_ns)
{
    return tw_writer_step_at(context, epoch_ns);
}

void tw_writer_gpu_rows(tw_writer_t *w, tw_gpu_rows_t *out)
{
    *out = (tw_gpu_rows_t){w, w->env.format, gpu_open, gpu_put, gpu_lost, gpu_step_at};
}
