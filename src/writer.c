/* SPDX-License-Identifier: MIT */
/*
 * The writer: its thread (drains a chunk queue and the extra streams, formats the records,
 * appends them to the file sets, keeps the per-API totals), create and close, and fork. Formatting is
 * in format.c, the files in fileset.c, the manifest and summary in manifest.c, the queue in queue.c.
 * See writer.h. Lock order: recorder registry -> queue -> writer -> stream -> chunk pool; the writer
 * never calls the queue with its own lock held.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "torchwrapper/api.h"
#include "torchwrapper/config.h"
#include "torchwrapper/queue.h"
#include "torchwrapper/stats.h"
#include "torchwrapper/writer.h"
#include "fileset.h"
#include "format.h"
#include "manifest.h"

#define STREAM_MIN_QUEUE (1u << 20) /* bytes a stream may queue, at least */

/* A row queued by tw_writer_stream_write(): this header, then len bytes of text ending in '\n'. */
typedef struct {
    uint32_t len;
    uint32_t api_id;  /* TW_API_ID_NONE: no GPU time to add to the per-API totals */
    uint64_t gpu_ns;
} queued_row_t;

struct tw_writer_stream {
    tw_writer_t *w;
    struct tw_writer_stream *next;
    char kind[TW_STREAM_KIND_MAX + 1];
    tw_fileset_t files;    /* writer thread */
    size_t max_queued;     /* bytes */
    /* the queue, guarded by lock */
    pthread_mutex_t lock;
    char *queue;
    size_t queue_len;
    size_t queue_capacity;
    int closed;
    int kicked;            /* the writer was woken for this batch already */
    char *spare;           /* the writer thread's: the previous queue, emptied */
    size_t spare_capacity;
    _Atomic uint64_t dropped_full;     /* rows refused: queue full, too long, after close */
    _Atomic uint64_t dropped_upstream; /* lost before they reached us (tw_writer_stream_add_dropped) */
};

typedef enum { CAPTURE_RECORDING, CAPTURE_ENDING, CAPTURE_DONE } capture_state_t;

/* An on-demand capture (tw_writer_capture): its own files, manifest and summary in dir. */
typedef struct capture {
    uint32_t id;
    uint64_t from, to;       /* steps [from, to); to is cut to the steps recorded when the program ends first */
    uint64_t asked;          /* steps asked for */
    uint64_t last_step;      /* the largest step of its records so far (writer thread) */
    char *dir;
    char *manifest_extra;    /* the writer's, with "capture" */
    char manifest_path[PATH_MAX];
    char summary_path[PATH_MAX];
    tw_fileset_env_t env;    /* the writer's, in dir; its lock is the writer's */
    tw_fileset_t files;      /* writer thread */
    tw_stats_t stats;        /* writer thread */
    int64_t start_ns, end_ns;
    capture_state_t state;   /* under the writer's lock; only the writer thread moves it */
    _Atomic uint64_t late;   /* records of its steps that came after it was done */
} capture_t;

struct tw_writer {
    /* configuration (owned copies) */
    char *out_dir;
    char *spec;
    char *manifest_extra;
    uint64_t flush_interval_ns;
    uint64_t buffer_bytes;
    tw_schedule_t schedule; /* the steps whose records are written */
    int summary_only;       /* no record files */
    tw_clock_t clock;
    tw_queue_t *queue;     /* the chunk queue the thread drains (the recorder pushes to it) */
    int64_t start_ns;
    int64_t end_ns;
    char manifest_path[PATH_MAX];
    char summary_path[PATH_MAX];
    tw_sites_t *sites;      /* the caller's, or NULL */
    char sites_path[PATH_MAX];
    uint32_t sites_written; /* sites in the file written last */
    int sites_file_written; /* sites.json exists (even with no site in it) */

    /* guarded by lock */
    pthread_mutex_t lock;
    int thread_running;
    int attached;          /* to the queue, until closed */
    int closed;
    pthread_t thread;
    tw_writer_stream_t *streams; /* added under lock, freed by tw_writer_destroy */
    capture_t **captures;        /* appended under lock, oldest first; freed by tw_writer_destroy */
    tw_chunk_t *batch;           /* the chunks the thread took and has not released yet: a forked
                                  * child, where the thread is gone, gives them back to the pool */
    size_t capture_count, capture_capacity;
    int manifest_due;            /* a capture began: the writer thread rewrites the manifest */
    _Atomic uint64_t step;       /* the program's step (tw_writer_set_step) */
    /* counters, written by the writer thread under lock, read by anyone under lock */
    uint64_t truncated;
    /* the files: names, counters and first error (env.lock is &lock) */
    tw_fileset_env_t env;

    /* writer thread only */
    tw_fileset_t calls;
    tw_stats_t stats;
    uint64_t summary_changes; /* calls and GPU rows added to stats since summary.json was written */
    /* The captures as this thread sees them: a copy of the list, taken when it grew, so that a
     * record finds its capture (however many there are) without the lock. */
    capture_t **capture_view;
    size_t capture_view_count, capture_view_capacity;
    size_t first_open_capture; /* of the view: the captures before it are done */
};

static tw_writer_stream_t *streams_head(tw_writer_t *w);

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A string default of the config (config.c) without its JSON quotes, into buf. */
static const char *config_default_text(const char *key, char *buf, size_t size)
{
    const char *json = tw_config_default(key, TW_CONFIG_DEFAULTS_TORCHWRAPPER);
    size_t n = strlen(json);
    snprintf(buf, size, "%.*s", n >= 2 ? (int)(n - 2) : 0, json + 1);
    return buf;
}

/* ---- the records' way to the files ------------------------------------------------------------- */

/* sites.json, when sites were added since it was written (or at close, for the overflow count). */
static void write_sites(tw_writer_t *w)
{
    tw_sites_stats_t st;
    tw_sites_stats(w->sites, &st);
    if (w->sites_file_written && st.count == w->sites_written && w->end_ns == 0)
        return;
    int err = tw_sites_write_json(w->sites, w->sites_path, w->env.pid);
    if (err != 0) {
        tw_fileset_warn(&w->env, "writing", w->sites_path, err);
    } else {
        w->sites_written = st.count;
        w->sites_file_written = 1;
    }
}

static const char *const capture_state_names[] = {"recording", "ending", "done"};

/* A capture's "id", "steps" (first and last, both included, as tw-report --steps) and "steps_asked". */
static void add_capture_steps(cJSON *o, const capture_t *c)
{
    cJSON_AddItemToObject(o, "id", tw_json_uint(c->id));
    cJSON *steps = cJSON_AddArrayToObject(o, "steps");
    cJSON_AddItemToArray(steps, tw_json_uint(c->from));
    cJSON_AddItemToArray(steps, tw_json_uint(c->to - 1));
    cJSON_AddItemToObject(o, "steps_asked", tw_json_uint(c->asked));
}

/* "captures" of out_dir's manifest (a JSON array, malloc'd; NULL when none); the writer's lock held
 * (it guards the capture list, the states and the file lists). */
static char *captures_json(tw_writer_t *w)
{
    if (w->capture_count == 0)
        return NULL;
    cJSON *array = cJSON_CreateArray();
    for (size_t i = 0; array != NULL && i < w->capture_count; i++) {
        const capture_t *c = w->captures[i];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL)
            break;
        add_capture_steps(o, c);
        cJSON_AddStringToObject(o, "dir", c->dir);
        cJSON_AddStringToObject(o, "state", capture_state_names[c->state]);
        cJSON_AddItemToObject(o, "records_written", tw_json_uint(c->files.written));
        cJSON_AddItemToObject(o, "records_late", tw_json_uint(atomic_load(&c->late)));
        cJSON *files = cJSON_AddArrayToObject(o, "files");
        for (size_t f = 0; files != NULL && f < c->files.file_count; f++)
            cJSON_AddItemToArray(files, cJSON_CreateString(c->files.files[f].name));
        cJSON_AddItemToArray(array, o);
    }
    char *text = array != NULL ? cJSON_PrintUnformatted(array) : NULL;
    cJSON_Delete(array);
    return text;
}

/* The manifest as it stands: rewritten at every new file and at close. */
static void write_manifest(tw_writer_t *w)
{
    size_t count = 0;
    tw_writer_stream_t *head = streams_head(w); /* links never change once added */
    for (tw_writer_stream_t *s = head; s != NULL; s = s->next)
        count++;
    tw_manifest_stream_t *streams = count ? calloc(count, sizeof *streams) : NULL;
    if (count && streams == NULL)
        count = 0;
    size_t n = 0;
    for (tw_writer_stream_t *s = head; s != NULL && n < count; s = s->next, n++)
        streams[n] = (tw_manifest_stream_t){s->kind, &s->files, atomic_load(&s->dropped_full),
                                            atomic_load(&s->dropped_upstream)};
    pthread_mutex_lock(&w->lock);
    uint64_t truncated = w->truncated;
    char *captures = captures_json(w);
    pthread_mutex_unlock(&w->lock);
    tw_manifest_t m = {w->manifest_extra, w->clock.source, w->start_ns, w->end_ns, tw_queue_dropped(w->queue), truncated,
                       &w->calls, streams, count, captures, NULL, NULL};
    tw_sites_stats_t sites;
    if (w->sites != NULL) {
        write_sites(w);
        tw_sites_stats(w->sites, &sites);
        m.sites_file = strrchr(w->sites_path, '/') + 1;
        m.sites = &sites;
    }
    tw_manifest_write(&w->env, w->manifest_path, &m);
    free(captures);
    free(streams);
}

/* A capture's own manifest, in its dir: the run's keys, its "capture", its files. */
static void write_capture_manifest(tw_writer_t *w, capture_t *c)
{
    tw_manifest_t m = {c->manifest_extra, w->clock.source, c->start_ns, c->end_ns, 0, 0, &c->files, NULL, 0, NULL,
                       NULL, NULL};
    tw_sites_stats_t sites;
    char sites_path[PATH_MAX];
    if (w->sites != NULL && snprintf(sites_path, sizeof sites_path, "%s/sites%s", c->dir,
                                     strrchr(w->sites_path, '/') + 6) < (int)sizeof sites_path) {
        /* the capture's records name the session's sites: a copy of the table beside them */
        int err = tw_sites_write_json(w->sites, sites_path, w->env.pid);
        if (err != 0)
            tw_fileset_warn(&c->env, "writing", sites_path, err);
        tw_sites_stats(w->sites, &sites);
        m.sites_file = strrchr(sites_path, '/') + 1;
        m.sites = &sites;
    }
    tw_manifest_write(&c->env, c->manifest_path, &m);
}

/* Appends a line to capture c's files; a new file brings new manifests (c's, and out_dir's, which
 * lists c's files). */
static void append_capture_line(tw_writer_t *w, capture_t *c, const char *line, size_t len)
{
    if (tw_fileset_append(&c->env, &c->files, line, len)) {
        write_capture_manifest(w, c);
        write_manifest(w);
    }
}

/* Appends a line to fs; a new file brings a new manifest. */
static void append_line(tw_writer_t *w, tw_fileset_t *fs, const char *line, size_t len)
{
    if (tw_fileset_append(&w->env, fs, line, len))
        write_manifest(w);
}

/* The capture whose steps hold step, or NULL: captures never overlap and come in step order, so a
 * binary search of the view, the newest (the likeliest) tried first. Writer thread. */
static inline capture_t *capture_of(const tw_writer_t *w, uint64_t step)
{
    size_t n = w->capture_view_count;
    if (n == 0 || step >= w->capture_view[n - 1]->to)
        return NULL;
    if (step >= w->capture_view[n - 1]->from)
        return w->capture_view[n - 1];
    size_t lo = 0, hi = n - 1; /* the last capture with from <= step is below hi */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (w->capture_view[mid]->from <= step)
            lo = mid + 1;
        else
            hi = mid;
    }
    capture_t *c = lo > 0 ? w->capture_view[lo - 1] : NULL;
    return c != NULL && step < c->to ? c : NULL;
}

/* Takes a new copy of the capture list when it grew (writer thread; the writer's lock held). */
static void refresh_capture_view(tw_writer_t *w)
{
    if (w->capture_view_count == w->capture_count)
        return;
    if (w->capture_count > w->capture_view_capacity) {
        capture_t **view = realloc(w->capture_view, w->capture_capacity * sizeof *view);
        if (view == NULL)
            return; /* the old view until memory comes back: its captures still get their records */
        w->capture_view = view;
        w->capture_view_capacity = w->capture_capacity;
    }
    memcpy(w->capture_view, w->captures, w->capture_count * sizeof *w->captures);
    w->capture_view_count = w->capture_count;
}

static void write_chunk(tw_writer_t *w, tw_chunk_t *chunk)
{
    char line[TW_LINE_MAX];
    size_t room = w->env.max_size - w->calls.header_len;
    for (uint32_t i = 0; i < chunk->count; i++) {
        const tw_record_t *r = &chunk->records[i];
        unsigned keep = tw_schedule_keeps(&w->schedule, w->summary_only, r->step);
        capture_t *c = w->capture_view_count > 0 ? capture_of(w, r->step) : NULL;
        uint64_t cost_ns = 0, self_ns = 0;
        if ((keep & TW_KEEP_SUMMARY) || c != NULL) {
            cost_ns = tw_clock_duration_ns(&w->clock, r->cost);
            self_ns = tw_clock_duration_ns(&w->clock, r->self);
        }
        if (keep & TW_KEEP_SUMMARY) {
            tw_stats_add(&w->stats, r->api_id, cost_ns, self_ns, 0, (r->flags & TW_RECORD_ERROR) != 0);
            w->summary_changes++;
        }
        if (c != NULL && c->state == CAPTURE_DONE) { /* the state moves on this thread only */
            atomic_fetch_add(&c->late, 1);
            c = NULL;
        }
        if (!(keep & TW_KEEP_RECORD) && c == NULL)
            continue;
        size_t len = tw_format_record(line, w->env.format, &w->clock, w->env.pid, chunk, r, TW_ARGS_MAX);
        if (len > room) {
            /* Larger than a whole file: cut its argument text until it fits, and count it. */
            size_t args_max = r->args_len;
            while (len > room && args_max > 0) {
                args_max = args_max > 64 ? args_max - 64 : 0;
                len = tw_format_record(line, w->env.format, &w->clock, w->env.pid, chunk, r, args_max);
            }
            pthread_mutex_lock(&w->lock);
            w->truncated++;
            pthread_mutex_unlock(&w->lock);
        }
        if (keep & TW_KEEP_RECORD)
            append_line(w, &w->calls, line, len);
        if (c != NULL) {
            if (r->step > c->last_step)
                c->last_step = r->step;
            tw_stats_add(&c->stats, r->api_id, cost_ns, self_ns, 0, (r->flags & TW_RECORD_ERROR) != 0);
            append_capture_line(w, c, line, len);
        }
    }
}

static char *capture_manifest_extra(const tw_writer_t *w, const capture_t *c);

/* Closes capture c's files and writes its summary and final manifest (writer thread). A capture the
 * program's end cut short says the steps it holds. */
static void finish_capture(tw_writer_t *w, capture_t *c)
{
    tw_fileset_close(&c->env, &c->files);
    c->end_ns = tw_realtime_ns();
    tw_summary_write(&c->env, c->summary_path, &c->stats);
    pthread_mutex_lock(&w->lock);
    c->state = CAPTURE_DONE;
    if (atomic_load(&w->step) < c->to) {
        c->to = c->files.written > 0 ? c->last_step + 1 : c->from + 1;
        char *extra = capture_manifest_extra(w, c);
        if (extra != NULL) {
            free(c->manifest_extra);
            c->manifest_extra = extra;
        }
    }
    pthread_mutex_unlock(&w->lock);
    write_capture_manifest(w, c);
    write_manifest(w);
    /* What a finished capture keeps is what the manifests list: a job captured every few minutes
     * for a week must not hold a write buffer and per-API statistics for each capture. */
    free(c->files.buf);
    c->files.buf = NULL;
    tw_stats_free(&c->stats);
}

/*
 * At each flush interval (writer thread): a capture whose steps are over gets one more interval, in
 * which the recording threads hand over their partial chunks (the flush request that follows), then
 * it is finished. closing: the writer is closing, every capture is finished now.
 */
static void advance_captures(tw_writer_t *w, int closing)
{
    uint64_t step = atomic_load(&w->step);
    /* Captures end in order: those before the first open one are done for good. */
    while (w->first_open_capture < w->capture_view_count &&
           w->capture_view[w->first_open_capture]->state == CAPTURE_DONE)
        w->first_open_capture++;
    for (size_t i = w->first_open_capture; i < w->capture_view_count; i++) {
        capture_t *c = w->capture_view[i];
        if (c->state == CAPTURE_DONE)
            continue;
        if (closing || c->state == CAPTURE_ENDING) {
            finish_capture(w, c);
            continue;
        }
        tw_fileset_flush(&c->env, &c->files);
        if (step >= c->to) {
            pthread_mutex_lock(&w->lock);
            c->state = CAPTURE_ENDING;
            pthread_mutex_unlock(&w->lock);
        }
    }
}

/*
 * Takes the rows queued on s (swapping its queue with the spare one, so that writers wait only for
 * the swap) and writes them to s's files.
 */
static void write_stream(tw_writer_t *w, tw_writer_stream_t *s)
{
    pthread_mutex_lock(&s->lock);
    char *rows = s->queue;
    size_t len = s->queue_len, capacity = s->queue_capacity;
    s->queue = s->spare;
    s->queue_capacity = s->spare_capacity;
    s->queue_len = 0;
    s->kicked = 0;
    s->spare = rows;
    s->spare_capacity = capacity;
    pthread_mutex_unlock(&s->lock);
    for (size_t at = 0; at < len;) {
        queued_row_t h;
        memcpy(&h, rows + at, sizeof h);
        at += sizeof h;
        if (!w->summary_only) /* records "summary": no record file of any kind; GPU time still summed */
            append_line(w, &s->files, rows + at, h.len);
        if (h.api_id != TW_API_ID_NONE) {
            tw_stats_add_gpu(&w->stats, h.api_id, h.gpu_ns);
            w->summary_changes++;
        }
        at += (h.len + 7) & ~(size_t)7;
    }
}

/* ---- the thread -------------------------------------------------------------------------------- */

static void *writer_main(void *arg)
{
    tw_writer_t *w = arg;
    uint64_t next_flush = monotonic_ns() + w->flush_interval_ns;
    for (;;) {
        int stop;
        tw_chunk_t *list = tw_queue_wait(w->queue, next_flush, &stop);
        pthread_mutex_lock(&w->lock);
        w->batch = list;
        tw_writer_stream_t *streams = w->streams;
        refresh_capture_view(w);
        int manifest_due = w->manifest_due;
        w->manifest_due = 0;
        pthread_mutex_unlock(&w->lock);
        if (manifest_due) /* written by this thread only: two writers would share its temporary file */
            write_manifest(w);

        while (list != NULL) {
            tw_chunk_t *next = list->next;
            write_chunk(w, list);
            pthread_mutex_lock(&w->lock); /* one step for fork(): released, and no longer in batch */
            w->batch = next;
            tw_chunk_release(list);
            pthread_mutex_unlock(&w->lock);
            list = next;
        }
        for (tw_writer_stream_t *s = streams; s != NULL; s = s->next)
            write_stream(w, s);
        uint64_t now = monotonic_ns();
        if (now >= next_flush || stop) {
            tw_fileset_flush(&w->env, &w->calls);
            for (tw_writer_stream_t *s = streams; s != NULL; s = s->next)
                tw_fileset_flush(&w->env, &s->files);
            advance_captures(w, stop);
            /* sites.json as it stands: a job killed later still has the sites of its records */
            if (w->sites != NULL && !stop)
                write_sites(w);
            /* summary.json as it stands, so that a long job can be watched (the last one is
             * written at close) */
            if (w->summary_changes > 0 && !stop) {
                tw_summary_write(&w->env, w->summary_path, &w->stats);
                w->summary_changes = 0;
            }
            /* Ask recording threads for their partial chunks, so that nothing older than about
             * one interval waits in memory (their next call hands the chunk over). */
            tw_queue_request_flush(w->queue);
            next_flush = now + w->flush_interval_ns;
        }
        if (stop)
            break;
    }
    pthread_mutex_lock(&w->lock);
    tw_writer_stream_t *streams = w->streams;
    pthread_mutex_unlock(&w->lock);
    tw_fileset_close(&w->env, &w->calls);
    for (tw_writer_stream_t *s = streams; s != NULL; s = s->next)
        tw_fileset_close(&w->env, &s->files);
    return NULL;
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
        err = pthread_create(&w->thread, NULL, writer_main, w);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (err == 0)
            w->thread_running = 1;
    }
    pthread_mutex_unlock(&w->lock);
    return err;
}

static void free_captures(tw_writer_t *w)
{
    free(w->capture_view);
    w->capture_view = NULL;
    w->capture_view_count = w->capture_view_capacity = w->first_open_capture = 0;
    for (size_t i = 0; i < w->capture_count; i++) {
        capture_t *c = w->captures[i];
        tw_fileset_free(&c->files);
        tw_stats_free(&c->stats);
        free(c->dir);
        free(c->manifest_extra);
        free(c);
    }
    free(w->captures);
    w->captures = NULL;
    w->capture_count = w->capture_capacity = 0;
}

/* ---- fork (driven by the queue's atfork handlers, with the queue's lock held) ------------------- */

/* Lock order: the writer's lock, then each stream's (a stream's writer never holds its lock while
 * taking the writer's). */
static void fork_prepare(void *arg)
{
    tw_writer_t *w = arg;
    pthread_mutex_lock(&w->lock);
    for (tw_writer_stream_t *s = w->streams; s != NULL; s = s->next)
        pthread_mutex_lock(&s->lock);
}

static void fork_parent(void *arg)
{
    tw_writer_t *w = arg;
    for (tw_writer_stream_t *s = w->streams; s != NULL; s = s->next)
        pthread_mutex_unlock(&s->lock);
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
    for (tw_writer_stream_t *s = w->streams; s != NULL; s = s->next) {
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_init(&s->lock, NULL);
        s->queue_len = 0;
        s->kicked = 0;
        atomic_store(&s->dropped_full, 0);
        atomic_store(&s->dropped_upstream, 0);
        tw_fileset_fork_child(&s->files);
    }
    pthread_mutex_unlock(&w->lock);
    pthread_mutex_init(&w->lock, NULL);
    w->thread_running = 0;
    /* The batch the parent's thread was writing: the parent writes it; the child's copies of its
     * chunks would be lost with the thread that held them. */
    while (w->batch != NULL) {
        tw_chunk_t *next = w->batch->next;
        tw_chunk_release(w->batch);
        w->batch = next;
    }
    /* The parent's captures are the parent's: its files, its steps. */
    for (size_t i = 0; i < w->capture_count; i++)
        tw_fileset_fork_child(&w->captures[i]->files);
    free_captures(w);
    tw_fileset_fork_child(&w->calls);
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

static const tw_queue_consumer_t consumer_ops = {ensure_thread, fork_prepare, fork_parent, fork_child};

/* ---- public API ---------------------------------------------------------------------------------- */

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
    if (config->file_max_size < TW_MIN_FILE_SIZE) {
        snprintf(err, err_size, "file_max_size %llu bytes is too small: at least %d bytes are needed for a "
                                "header and any record", (unsigned long long)config->file_max_size, TW_MIN_FILE_SIZE);
        return TW_EINVAL;
    }
    char default_spec[64];
    const char *spec = config->file_name_spec ? config->file_name_spec : config_default_text("file_name_spec", default_spec, sizeof default_spec);
    if (tw_name_spec_check(spec, err, err_size) != 0)
        return TW_EINVAL;
    int made = tw_make_dirs(config->out_dir);   /* with its missing parents, as mkdir -p */
    struct stat st;
    if (made != 0 && stat(config->out_dir, &st) != 0) {   /* one that exists is checked below */
        snprintf(err, err_size, "out_dir '%s' cannot be created: %s", config->out_dir, strerror(made));
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
    if (w == NULL || (w->calls.buf = malloc(TW_BUFFER_FLUSH + TW_LINE_MAX)) == NULL) {
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
        free(w->calls.buf);
        free(w);
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    w->env.out_dir = w->out_dir;
    w->env.spec = w->spec;
    w->env.format = config->format;
    w->env.max_size = config->file_max_size;
    w->env.max_files = config->max_files;
    w->env.lock = &w->lock;
    /* Zero fields take the config's defaults (config.c, the one table of them). */
    w->flush_interval_ns = config->flush_interval_ns
                               ? config->flush_interval_ns
                               : (uint64_t)(strtod(tw_config_default("flush_interval", TW_CONFIG_DEFAULTS_TORCHWRAPPER),
                                                   NULL) * 1e9);
    uint64_t buffer_bytes = config->buffer_bytes
                                ? config->buffer_bytes
                                : strtoull(tw_config_default("buffer_size", TW_CONFIG_DEFAULTS_TORCHWRAPPER), NULL, 10);
    w->buffer_bytes = buffer_bytes;
    uint64_t max_chunks = buffer_bytes / (sizeof(tw_chunk_t) + TW_CHUNK_RECORDS * sizeof(tw_record_t));
    if (max_chunks < 2)
        max_chunks = 2;
    w->env.rank = config->rank;
    w->schedule = config->schedule;
    w->summary_only = config->summary_only;
    w->sites = config->sites;
    w->clock = *clock;
    w->queue = queue;
    w->calls.kind = "calls";
    w->calls.fd = -1;
    if (w->env.format == TW_FORMAT_CSV) {
        w->calls.header = TW_CALLS_CSV_HEADER;
        w->calls.header_len = sizeof TW_CALLS_CSV_HEADER - 1;
    }
    w->env.pid = getpid();
    w->start_ns = tw_realtime_ns();
    if (gethostname(w->env.host, sizeof w->env.host - 1) != 0)
        strcpy(w->env.host, "localhost");
    tw_stats_init(&w->stats);
    pthread_mutex_init(&w->lock, NULL);
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
    if (tw_queue_attach(w->queue, max_chunks, config->block_when_full, &consumer_ops, w, 0) != 0) {
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

int tw_writer_admit(tw_writer_t *w)
{
    return tw_queue_admit(w->queue);
}

int tw_writer_close(tw_writer_t *w)
{
    /* Rows written to a stream from now on are refused and counted: the last drain is below. */
    for (tw_writer_stream_t *s = streams_head(w); s != NULL; s = s->next) {
        pthread_mutex_lock(&s->lock);
        s->closed = 1;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_lock(&w->lock);
    int closed = w->closed;
    pthread_mutex_unlock(&w->lock);
    if (closed)
        return w->env.write_errno ? TW_EIO : 0;
    if (ensure_thread(w) != 0) {
        /* cannot happen in practice; write on this thread instead */
        tw_queue_stop(w->queue);
        writer_main(w);
    } else {
        tw_queue_stop(w->queue);
        pthread_join(w->thread, NULL);
        pthread_mutex_lock(&w->lock);
        w->thread_running = 0;
        pthread_mutex_unlock(&w->lock);
    }
    pthread_mutex_lock(&w->lock);
    w->closed = 1;
    pthread_mutex_unlock(&w->lock);
    /* Chunks pushed from now on stay in the queue, in memory, as when no writer was attached. */
    tw_queue_detach(w->queue);
    w->end_ns = tw_realtime_ns();
    tw_summary_write(&w->env, w->summary_path, &w->stats);
    write_manifest(w);
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
    for (tw_writer_stream_t *s = w->streams, *next; s != NULL; s = next) {
        next = s->next;
        tw_fileset_free(&s->files);
        free((char *)s->files.header);
        free(s->queue);
        free(s->spare);
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
    free_captures(w);
    tw_fileset_free(&w->calls);
    tw_stats_free(&w->stats);
    pthread_mutex_destroy(&w->lock);
    free(w->out_dir);
    free(w->spec);
    free(w->manifest_extra);
    free(w);
}

void tw_writer_stats(tw_writer_t *w, tw_writer_stats_t *stats)
{
    pthread_mutex_lock(&w->lock);
    stats->records_written = w->calls.written;
    stats->records_dropped = w->calls.dropped;
    stats->records_truncated = w->truncated;
    stats->bytes_written = w->calls.bytes_total;
    stats->write_errno = w->env.write_errno;
    stats->file_names_skipped = w->env.names_skipped;
    stats->symlinks_refused = w->env.links_refused;
    pthread_mutex_unlock(&w->lock);
    stats->wakeups = tw_queue_wakeups(w->queue);
}

const char *tw_writer_manifest_path(tw_writer_t *w)
{
    return w->manifest_path;
}

tw_format_t tw_writer_format(const tw_writer_t *w)
{
    return w->env.format;
}

/* ---- extra record streams ------------------------------------------------------------------------ */

static tw_writer_stream_t *streams_head(tw_writer_t *w)
{
    pthread_mutex_lock(&w->lock);
    tw_writer_stream_t *s = w->streams;
    pthread_mutex_unlock(&w->lock);
    return s;
}

static int kind_ok(const char *kind)
{
    size_t n = kind != NULL ? strlen(kind) : 0;
    if (n == 0 || n > TW_STREAM_KIND_MAX || strcmp(kind, "calls") == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((kind[i] >= 'a' && kind[i] <= 'z') || (kind[i] >= '0' && kind[i] <= '9') || kind[i] == '_'))
            return 0;
    return 1;
}

int tw_writer_add_stream(tw_writer_t *w, const char *kind, const char *csv_header, tw_writer_stream_t **out)
{
    if (w == NULL || out == NULL || !kind_ok(kind) || (w->env.format == TW_FORMAT_CSV && csv_header == NULL))
        return TW_EINVAL;
    size_t header_len = csv_header != NULL ? strlen(csv_header) : 0;
    if (w->env.format == TW_FORMAT_CSV && (header_len == 0 || header_len + 1 > TW_MIN_FILE_SIZE / 2 ||
                                        memchr(csv_header, '\n', header_len - 1) != NULL))
        return TW_EINVAL;
    tw_writer_stream_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return TW_ENOMEM;
    char *header = NULL;
    if (w->env.format == TW_FORMAT_CSV) {
        /* One line, ending in '\n' whether or not the caller gave one. */
        int has_newline = csv_header[header_len - 1] == '\n';
        header = malloc(header_len + 2);
        if (header != NULL) {
            memcpy(header, csv_header, header_len);
            if (!has_newline)
                header[header_len++] = '\n';
            header[header_len] = '\0';
        }
    }
    s->files.buf = malloc(TW_BUFFER_FLUSH + TW_STREAM_ROW_MAX);
    if (s->files.buf == NULL || (w->env.format == TW_FORMAT_CSV && header == NULL)) {
        free(s->files.buf);
        free(header);
        free(s);
        return TW_ENOMEM;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->w = w;
    strcpy(s->kind, kind);
    s->files.kind = s->kind;
    s->files.header = header;
    s->files.header_len = header_len;
    s->files.fd = -1;
    s->max_queued = w->buffer_bytes / 4 > STREAM_MIN_QUEUE ? w->buffer_bytes / 4 : STREAM_MIN_QUEUE;
    pthread_mutex_lock(&w->lock);
    int taken = w->closed;
    for (tw_writer_stream_t *o = w->streams; o != NULL && !taken; o = o->next)
        taken = strcmp(o->kind, kind) == 0;
    if (!taken) {
        /* Added at the head: the writer thread walks a list it read under the lock, whose links
         * never change afterwards. */
        s->next = w->streams;
        w->streams = s;
    }
    pthread_mutex_unlock(&w->lock);
    if (taken) {
        pthread_mutex_destroy(&s->lock);
        free(s->files.buf);
        free(header);
        free(s);
        return TW_EBUSY;
    }
    *out = s;
    return 0;
}

tw_format_t tw_writer_stream_format(const tw_writer_stream_t *s)
{
    return s->w->env.format;
}

int tw_writer_stream_write_gpu(tw_writer_stream_t *s, const char *row, size_t len, uint32_t api_id, uint64_t gpu_ns)
{
    size_t text = len > 0 && row[len - 1] == '\n' ? len : len + 1; /* one '\n' at the end */
    if (len == 0 || text > TW_STREAM_ROW_MAX || text > s->w->env.max_size - s->files.header_len ||
        memchr(row, '\n', text - 1) != NULL) {
        atomic_fetch_add(&s->dropped_full, 1);
        return TW_EINVAL;
    }
    size_t need = sizeof(queued_row_t) + ((text + 7) & ~(size_t)7);
    int kick = 0, rc = 0;
    pthread_mutex_lock(&s->lock);
    if (s->closed) {
        rc = TW_ENOTACTIVE;
    } else if (s->queue_len + need > s->max_queued) {
        rc = TW_EFULL;
    } else {
        if (s->queue_len + need > s->queue_capacity) {
            size_t capacity = s->queue_capacity ? s->queue_capacity : 64 * 1024;
            while (capacity < s->queue_len + need)
                capacity *= 2;
            if (capacity > s->max_queued)
                capacity = s->max_queued;
            char *queue = realloc(s->queue, capacity);
            if (queue == NULL) {
                rc = TW_ENOMEM;
            } else {
                s->queue = queue;
                s->queue_capacity = capacity;
            }
        }
        if (rc == 0) {
            queued_row_t h = {(uint32_t)text, api_id, gpu_ns};
            char *at = s->queue + s->queue_len;
            memcpy(at, &h, sizeof h);
            memcpy(at + sizeof h, row, len);
            at[sizeof h + text - 1] = '\n';
            s->queue_len += need;
            /* Past half of its bound, the writer is woken to drain it rather than at the next
             * flush interval. */
            if (!s->kicked && s->queue_len > s->max_queued / 2)
                kick = s->kicked = 1;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) {
        atomic_fetch_add(&s->dropped_full, 1);
        return rc;
    }
    if (kick)
        tw_queue_kick(s->w->queue);
    return 0;
}

int tw_writer_stream_write(tw_writer_stream_t *s, const char *row, size_t len)
{
    return tw_writer_stream_write_gpu(s, row, len, TW_API_ID_NONE, 0);
}

void tw_writer_stream_add_dropped(tw_writer_stream_t *s, uint64_t count)
{
    atomic_fetch_add(&s->dropped_upstream, count);
}

void tw_writer_stream_stats(tw_writer_stream_t *s, tw_writer_stream_stats_t *stats)
{
    tw_writer_t *w = s->w;
    pthread_mutex_lock(&w->lock);
    stats->records_written = s->files.written;
    stats->records_dropped = s->files.dropped;
    stats->bytes_written = s->files.bytes_total;
    pthread_mutex_unlock(&w->lock);
    stats->records_dropped += atomic_load(&s->dropped_full);
    stats->records_lost_upstream = atomic_load(&s->dropped_upstream);
    stats->records_dropped += stats->records_lost_upstream;
}

/* ---- on-demand captures ------------------------------------------------------------------------- */


/* The writer's manifest keys with "capture": {"id", "steps": [first, last]}, as JSON text. */
static char *capture_manifest_extra(const tw_writer_t *w, const capture_t *c)
{
    cJSON *root = w->manifest_extra != NULL ? cJSON_Parse(w->manifest_extra) : NULL;
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        root = cJSON_CreateObject();
    }
    cJSON *o = root != NULL ? cJSON_AddObjectToObject(root, "capture") : NULL;
    char *text = NULL;
    if (o != NULL) {
        add_capture_steps(o, c);
        cJSON_AddStringToObject(o, "run_dir", w->out_dir);
        text = cJSON_PrintUnformatted(root);
    }
    cJSON_Delete(root);
    return text;
}

int tw_writer_capture(tw_writer_t *w, uint64_t from_step, uint64_t steps, const char *dir, uint32_t *id, char *err,
                      size_t err_size)
{
    if (w == NULL || steps == 0 || dir == NULL || dir[0] == '\0' || from_step > UINT64_MAX - steps) {
        snprintf(err, err_size, "a capture needs 1 or more steps (got %llu) and a directory",
                 (unsigned long long)steps);
        return TW_EINVAL;
    }
    pthread_mutex_lock(&w->lock);
    const capture_t *last = w->capture_count > 0 ? w->captures[w->capture_count - 1] : NULL;
    int closed = w->closed;
    uint64_t last_to = last != NULL ? last->to : 0;
    uint32_t last_id = last != NULL ? last->id : 0;
    pthread_mutex_unlock(&w->lock);
    if (closed) {
        snprintf(err, err_size, "the writer is closed");
        return TW_EINVAL;
    }
    if (last != NULL && from_step < last_to) {
        snprintf(err, err_size, "capture %u (steps %llu-%llu) is still recording: one capture at a time", last_id,
                 (unsigned long long)last->from, (unsigned long long)(last_to - 1));
        return TW_EBUSY;
    }
    int e = tw_make_dirs(dir);
    if (e != 0) {
        snprintf(err, err_size, "capture directory '%s' cannot be made: %s", dir, strerror(e));
        return TW_EIO;
    }
    capture_t *c = calloc(1, sizeof *c);
    if (c == NULL || (c->files.buf = malloc(TW_BUFFER_FLUSH + TW_LINE_MAX)) == NULL ||
        (c->dir = strdup(dir)) == NULL) {
        if (c != NULL) {
            free(c->files.buf);
            free(c);
        }
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    c->from = from_step;
    c->to = from_step + steps;
    c->asked = steps;
    c->start_ns = tw_realtime_ns();
    c->env = w->env; /* its naming, format, size, pid, rank and lock; counters of its own */
    c->env.out_dir = c->dir;
    c->env.names_skipped = c->env.links_refused = 0;
    c->env.write_errno = 0;
    c->files.kind = "calls";
    c->files.fd = -1;
    c->files.header = w->calls.header;
    c->files.header_len = w->calls.header_len;
    tw_stats_init(&c->stats);
    const char *suffix = strrchr(w->manifest_path, '/'); /* manifest.json or manifest-PID.json, as out_dir's */
    const char *summary = strrchr(w->summary_path, '/');
    int too_long = snprintf(c->manifest_path, sizeof c->manifest_path, "%s%s", dir, suffix) >= (int)sizeof c->manifest_path ||
                   snprintf(c->summary_path, sizeof c->summary_path, "%s%s", dir, summary) >= (int)sizeof c->summary_path;
    pthread_mutex_lock(&w->lock);
    int busy = w->capture_count > 0 && from_step < w->captures[w->capture_count - 1]->to; /* asked twice at once */
    if (!too_long && !busy && w->capture_count == w->capture_capacity) {
        size_t capacity = w->capture_capacity ? 2 * w->capture_capacity : 8;
        capture_t **grown = realloc(w->captures, capacity * sizeof *grown);
        if (grown != NULL) {
            w->captures = grown;
            w->capture_capacity = capacity;
        }
    }
    int added = !too_long && !busy && w->capture_count < w->capture_capacity;
    if (added) {
        c->id = (uint32_t)w->capture_count + 1;
        c->manifest_extra = capture_manifest_extra(w, c);
        w->captures[w->capture_count++] = c;
        w->manifest_due = 1;
    }
    pthread_mutex_unlock(&w->lock);
    if (!added) {
        snprintf(err, err_size, too_long ? "capture directory '%s' is too long" : busy ? "another capture began at once"
                                                                                       : "out of memory", dir);
        tw_stats_free(&c->stats);
        free(c->files.buf);
        free(c->dir);
        free(c);
        return too_long ? TW_EINVAL : busy ? TW_EBUSY : TW_ENOMEM;
    }
    *id = c->id;
    tw_queue_kick(w->queue); /* out_dir's manifest lists it now, not at the next file */
    return 0;
}

void tw_writer_set_step(tw_writer_t *w, uint64_t step)
{
    atomic_store_explicit(&w->step, step, memory_order_relaxed);
}

int tw_writer_capture_stats(tw_writer_t *w, uint32_t id, tw_writer_capture_stats_t *stats)
{
    int rc = TW_EINVAL;
    pthread_mutex_lock(&w->lock);
    if (id >= 1 && id <= w->capture_count) {
        const capture_t *c = w->captures[id - 1];
        *stats = (tw_writer_capture_stats_t){c->from, c->to, c->state == CAPTURE_DONE, c->files.written,
                                             atomic_load(&c->late)};
        rc = 0;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}
