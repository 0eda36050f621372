/* SPDX-License-Identifier: MIT */
/*
 * The call records as a source of the writer (writer_internal.h): chunks taken from the chunk queue,
 * each record formatted (format.c), counted in the summary, and written where its step says: to
 * out_dir's files in the steps the schedule records, to a capture's files in the capture's steps.
 */
#include "config.h"

#include <stdatomic.h>
#include <string.h>

#include "torchwrapper/api.h"
#include "format.h"
#include "writer_internal.h"

void tw_writer_calls_init(tw_writer_t *w)
{
    writer_source_t *s = &w->calls;
    s->ops = &tw_writer_calls_ops;
    s->index = 0;
    strcpy(s->kind, "calls");
    s->files.kind = s->kind;
    s->files.fd = -1;
    if (w->env.format == TW_FORMAT_CSV) {
        s->files.header = TW_CALLS_CSV_HEADER;
        s->files.header_len = sizeof TW_CALLS_CSV_HEADER - 1;
    }
    w->source_count = 1;
}

static void write_chunk(tw_writer_t *w, tw_chunk_t *chunk)
{
    char line[TW_LINE_MAX];
    tw_fileset_t *files = &w->calls.files;
    uint64_t room = tw_fileset_room(&w->env, files); /* the longest line a file takes */
    for (uint32_t i = 0; i < chunk->count; i++) {
        const tw_record_t *r = &chunk->records[i];
        unsigned keep = tw_schedule_keeps(&w->schedule, w->summary_only, r->step);
        capture_t *c = w->capture_view_count > 0 ? tw_capture_of(w, r->step) : NULL;
        uint64_t cost_ns = 0, self_ns = 0;
        if ((keep & TW_KEEP_SUMMARY) || c != NULL) {
            cost_ns = tw_clock_duration_ns(&w->clock, r->cost);
            self_ns = tw_clock_duration_ns(&w->clock, r->self);
        }
        int error = (r->flags & TW_RECORD_ERROR) != 0;
        if (keep & TW_KEEP_SUMMARY) {
            tw_stats_add(&w->stats, r->api_id, cost_ns, self_ns, 0, error);
            w->summary_changes++;
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
            tw_writer_append(w, files, line, len);
        if (c != NULL) {
            tw_stats_add(&c->stats, r->api_id, cost_ns, self_ns, 0, error);
            tw_capture_append(w, c, 0, r->step, line, len);
        }
    }
}

/* Takes the chunks queued and writes them; each chunk's memory goes back (to the pool, and to the
 * budget) as soon as it is written. */
static void calls_drain(tw_writer_t *w, writer_source_t *s)
{
    (void)s;
    tw_chunk_t *list = tw_queue_take(w->queue);
    pthread_mutex_lock(&w->lock);
    w->batch = list;
    tw_captures_refresh_view(w); /* after the take: a capture asked before a chunk came is seen */
    pthread_mutex_unlock(&w->lock);
    while (list != NULL) {
        tw_chunk_t *next = list->next;
        write_chunk(w, list);
        pthread_mutex_lock(&w->lock); /* one step for fork(): released, and no longer in batch */
        w->batch = next;
        tw_chunk_release(list);
        pthread_mutex_unlock(&w->lock);
        list = next;
    }
}

/* The queue refuses nothing itself once the writer closes (it holds what comes, as without a
 * consumer), and its fork handling is its own: nothing to do for these. */
static void calls_nothing(writer_source_t *s)
{
    (void)s;
}

const writer_source_ops_t tw_writer_calls_ops = {calls_drain, NULL, NULL, NULL, calls_nothing, calls_nothing};
