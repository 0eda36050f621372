/* SPDX-License-Identifier: MIT */
/*
 * On-demand captures (writer.h, tw_writer_capture): the records of every kind of a capture's steps,
 * written besides what the schedule writes to out_dir, to files of their own in the capture's
 * directory, with its manifest and summary. Sources hand each row of a capture's steps to
 * tw_capture_append() (writer_captures.h); the writer thread finishes a capture one flush interval
 * after its steps are over.
 */
#include "config.h"
#include "writer_captures.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "format.h"
#include "writer_outdir.h"
#include "writer_state.h"

/* A capture's own manifest, in its dir: the run's keys, its "capture", its files of every kind. */
static void write_capture_manifest(tw_writer_t *w, capture_t *c)
{
    tw_manifest_kind_t kinds[WRITER_SOURCES_MAX];
    size_t count = 0;
    for (unsigned k = 0; k < WRITER_SOURCES_MAX; k++)
        if (k == 0 || c->files[k].kind != NULL) /* the calls always; a stream once it had a row */
            kinds[count++] = (tw_manifest_kind_t){k == 0 ? "calls" : c->files[k].kind, &c->files[k], {0}, 0};
    tw_manifest_t m = {c->manifest_extra, w->clock.source, c->start_ns, c->end_ns, kinds, count, 0, 0, NULL,
                       NULL, NULL, NULL};
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

/* The file set of source index in capture c, its name, header and buffer taken at its first row.
 * NULL when out of memory (the row is counted as dropped by the caller). */
static tw_fileset_t *capture_files(tw_writer_t *w, capture_t *c, unsigned index)
{
    tw_fileset_t *fs = &c->files[index];
    if (fs->buf != NULL)
        return fs;
    const writer_source_t *s = tw_writer_sources(w);
    while (s != NULL && s->index != index)
        s = s->next;
    if (s == NULL || (fs->buf = malloc(TW_BUFFER_FLUSH + (index == 0 ? TW_LINE_MAX : TW_STREAM_ROW_MAX))) == NULL)
        return NULL;
    pthread_mutex_lock(&w->lock); /* the manifest reads the kind under it */
    fs->kind = s->files.kind;
    fs->header = s->files.header;
    fs->header_len = s->files.header_len;
    pthread_mutex_unlock(&w->lock);
    return fs;
}

void tw_capture_append(tw_writer_t *w, capture_t *c, unsigned index, uint64_t step, const char *line, size_t len)
{
    if (step > c->last_step)
        c->last_step = step;
    tw_fileset_t *fs = capture_files(w, c, index);
    if (fs == NULL) {
        pthread_mutex_lock(&w->lock);
        c->files[0].dropped++;
        pthread_mutex_unlock(&w->lock);
        return;
    }
    /* a new file brings new manifests: c's, and out_dir's, which lists c's files */
    if (tw_fileset_append(&c->env, fs, line, len)) {
        write_capture_manifest(w, c);
        tw_writer_write_manifest(w);
    }
}

capture_t *tw_capture_of(tw_writer_t *w, uint64_t step)
{
    /* Captures never overlap and come in step order: a binary search of the view, the newest (the
     * likeliest) tried first. */
    size_t n = w->capture_view_count;
    if (n == 0 || step >= w->capture_view[n - 1]->to)
        return NULL;
    capture_t *c;
    if (step >= w->capture_view[n - 1]->from) {
        c = w->capture_view[n - 1];
    } else {
        size_t lo = 0, hi = n - 1; /* the last capture with from <= step is below hi */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (w->capture_view[mid]->from <= step)
                lo = mid + 1;
            else
                hi = mid;
        }
        c = lo > 0 ? w->capture_view[lo - 1] : NULL;
        if (c == NULL || step >= c->to)
            return NULL;
    }
    if (c->state == CAPTURE_DONE) { /* the state moves on this thread only */
        atomic_fetch_add(&c->late, 1);
        return NULL;
    }
    return c;
}

void tw_captures_refresh_view(tw_writer_t *w)
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

static char *capture_manifest_extra(const tw_writer_t *w, const capture_t *c);

/* Closes capture c's files and writes its summary and final manifest (writer thread). A capture the
 * program's end cut short says the steps it holds. */
static void finish_capture(tw_writer_t *w, capture_t *c)
{
    for (unsigned k = 0; k < WRITER_SOURCES_MAX; k++)
        if (c->files[k].buf != NULL)
            tw_fileset_close(&c->env, &c->files[k]);
    c->end_ns = tw_realtime_ns();
    tw_summary_write(&c->env, c->summary_path, &c->stats);
    pthread_mutex_lock(&w->lock);
    c->state = CAPTURE_DONE;
    if (atomic_load(&w->step) < c->to) {
        c->to = c->files[0].written > 0 || c->last_step > c->from ? c->last_step + 1 : c->from + 1;
        char *extra = capture_manifest_extra(w, c);
        if (extra != NULL) {
            free(c->manifest_extra);
            c->manifest_extra = extra;
        }
    }
    pthread_mutex_unlock(&w->lock);
    write_capture_manifest(w, c);
    tw_writer_write_manifest(w);
    /* What a finished capture keeps is what the manifests list: a job captured every few minutes
     * for a week must not hold write buffers and per-API statistics for each capture. */
    for (unsigned k = 0; k < WRITER_SOURCES_MAX; k++) {
        free(c->files[k].buf);
        c->files[k].buf = NULL;
    }
    tw_stats_free(&c->stats);
}

void tw_captures_advance(tw_writer_t *w, int closing)
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
        /* One more interval after its steps, in which the recording threads hand over their partial
         * chunks (the flush request that follows), then it is finished. */
        if (closing || c->state == CAPTURE_ENDING) {
            finish_capture(w, c);
            continue;
        }
        for (unsigned k = 0; k < WRITER_SOURCES_MAX; k++)
            if (c->files[k].buf != NULL)
                tw_fileset_flush(&c->env, &c->files[k]);
        if (step >= c->to) {
            pthread_mutex_lock(&w->lock);
            c->state = CAPTURE_ENDING;
            pthread_mutex_unlock(&w->lock);
        }
    }
}

void tw_captures_free(tw_writer_t *w, int forked)
{
    free(w->capture_view);
    w->capture_view = NULL;
    w->capture_view_count = w->capture_view_capacity = w->first_open_capture = 0;
    for (size_t i = 0; i < w->capture_count; i++) {
        capture_t *c = w->captures[i];
        for (unsigned k = 0; k < WRITER_SOURCES_MAX; k++) {
            if (forked) /* the parent's open files and buffered output stay the parent's */
                tw_fileset_fork_child(&c->files[k]);
            tw_fileset_free(&c->files[k]);
        }
        tw_stats_free(&c->stats);
        free(c->dir);
        free(c->manifest_extra);
        free(c);
    }
    free(w->captures);
    w->captures = NULL;
    w->capture_count = w->capture_capacity = 0;
}

/* ---- public API ---------------------------------------------------------------------------------- */

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
        tw_capture_steps_json(o, c);
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
        return TW_ECLOSED;
    }
    if (last != NULL && from_step < last_to) {
        snprintf(err, err_size, "capture %u (steps %llu-%llu) is still recording: one capture at a time", last_id,
                 (unsigned long long)last->from, (unsigned long long)(last_to - 1));
        return TW_EBUSY;
    }
    int e = tw_make_dirs(dir);
    if (e != 0) {
        snprintf(err, err_size, "capture directory '%s' cannot be made: %s", dir, tw_strerror(e));
        return TW_EIO;
    }
    capture_t *c = calloc(1, sizeof *c);
    if (c == NULL || (c->dir = strdup(dir)) == NULL) {
        free(c);
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
    for (unsigned k = 0; k < WRITER_SOURCES_MAX; k++)
        c->files[k].fd = -1; /* each kind's name, header and buffer come with its first row */
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
        free(c->dir);
        free(c);
        return too_long ? TW_EINVAL : busy ? TW_EBUSY : TW_ENOMEM;
    }
    *id = c->id;
    tw_writer_ring(w); /* out_dir's manifest lists it now, not at the next file */
    return 0;
}

int tw_writer_capture_stats(tw_writer_t *w, uint32_t id, tw_writer_capture_stats_t *stats)
{
    int rc = TW_EINVAL;
    pthread_mutex_lock(&w->lock);
    if (id >= 1 && id <= w->capture_count) {
        const capture_t *c = w->captures[id - 1];
        *stats = (tw_writer_capture_stats_t){c->from, c->to, c->state == CAPTURE_DONE, c->files[0].written,
                                             atomic_load(&c->late)};
        rc = 0;
    }
    pthread_mutex_unlock(&w->lock);
    return rc;
}
