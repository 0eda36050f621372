/* SPDX-License-Identifier: MIT */
/*
 * The call records as a source of the writer (writer_calls.h, writer_state.h): chunks taken from the chunk queue,
 * each record formatted (format.c), counted in the summary, and written where its step says: to
 * out_dir's files in the steps the schedule records, to a capture's files in the capture's steps.
 */
#include "config.h"
#include "writer_calls.h"

#include <stdatomic.h>
#include <string.h>

#include "torchwrapper/api.h"
#include "format.h"
#include "writer_captures.h"
#include "writer_outdir.h"
#include "writer_state.h"

static const writer_source_ops_t calls_ops;

void tw_writer_calls_init(tw_writer_t *w)
{
    writer_source_t *s = &w->calls;
    s->ops = &calls_ops;
    s->index = 0;
    strcpy(s->kind, "calls");
    s->files.kind = s->kind;
    s->files.fd = -1;
    if (w->env.format == TW_FORMAT_CSV) {
        s->files.header = TW_CALLS_CSV_HEADER;
        s->files.header_len = sizeof TW_CALLS_CSV_HEADER - 1;
    }
    w->source_count = 1;
    tw_format_cache_init(&w->calls_format);
}

/* A line formatted at the record files' tail has room there (tw_fileset_tail). */
_Static_assert(TW_LINE_MAX <= TW_BUFFER_FLUSH, "a buffer between appends has a whole line's room past its end");

static void write_chunk(tw_writer_t *w, tw_chunk_t *chunk)
{
    char line[TW_LINE_MAX];
    tw_fileset_t *files = &w->calls.files;
    uint64_t room = tw_fileset_room(&w->env, files); /* the longest line a file takes */
    /* a chunk's records are mostly of one step: what the schedule keeps of it, asked once a step */
    uint64_t keep_step = chunk->count > 0 ? chunk->records[0].step : 0;
    unsigned keep = tw_schedule_keeps(&w->schedule, w->summary_only, keep_step);
    for (uint32_t i = 0; i < chunk->count; i++) {
        const tw_record_t *r = &chunk->records[i];
        if (r->step != keep_step) {
            keep_step = r->step;
            keep = tw_schedule_keeps(&w->schedule, w->summary_only, keep_step);
        }
        capture_t *c = w->capture_view_count > 0 ? tw_capture_of(w, r->step) : NULL;
        if (!(keep & (TW_KEEP_SUMMARY | TW_KEEP_RECORD)) && c == NULL)
            continue;
        tw_format_times_t ns = {0, tw_clock_duration_ns(&w->clock, r->cost), 0};
        /* nine records in ten are calls with no recorded call inside (leaves): self is the cost */
        ns.self = r->self == r->cost ? ns.cost : tw_clock_duration_ns(&w->clock, r->self);
        int error = (r->flags & TW_RECORD_ERROR) != 0;
        if (keep & TW_KEEP_SUMMARY) {
            tw_stats_add(&w->stats, r->api_id, ns.cost, ns.self, 0, error);
            w->summary_changes++;
        }
        if (!(keep & TW_KEEP_RECORD) && c == NULL)
            continue;
        ns.start = tw_clock_epoch_ns(&w->clock, r->start);
        /* A kept record is formatted where it will lie in the file's buffer (no copy); a captured
         * one alone, on the stack. */
        char *text = (keep & TW_KEEP_RECORD) ? tw_fileset_tail(files) : line;
        size_t len = tw_format_record(text, w->env.format, &ns, w->env.pid, &w->calls_format, chunk, r, TW_ARGS_MAX);
        if (len > room) {
            /* Larger than a whole file: cut its argument text until it fits, and count it. */
            size_t args_max = r->args_len;
            while (len > room && args_max > 0) {
                args_max = args_max > 64 ? args_max - 64 : 0;
                len = tw_format_record(text, w->env.format, &ns, w->env.pid, &w->calls_format, chunk, r, args_max);
            }
            pthread_mutex_lock(&w->lock);
            w->truncated++;
            pthread_mutex_unlock(&w->lock);
        }
        if ((keep & TW_KEEP_RECORD) && tw_fileset_commit(&w->env, files, len) != 0) {
            /* a flush or a new file first (which may write the buffer's start): from a copy */
            memcpy(line, text, len);
            text = line;
            tw_writer_append(w, files, line, len);
        }
        if (c != NULL) {
            tw_stats_add(&c->stats, r->api_id, ns.cost, ns.self, 0, error);
            tw_capture_append(w, c, 0, r->step, text, len);
        }
    }
}

/* Writes the oldest chunk queued and gives its memory back (to the pool, and to the budget): 0 when
 * none was queued. The pen held. */
static int write_next(tw_writer_t *w)
{
    tw_chunk_t *chunk = tw_queue_pop(w->queue);
    if (chunk == NULL)
        return 0;
    pthread_mutex_lock(&w->lock); /* one step for fork(): the child gives it back */
    w->batch = chunk;
    tw_captures_refresh_view(w); /* after the pop: a capture asked before a chunk came is seen */
    pthread_mutex_unlock(&w->lock);
    write_chunk(w, chunk);
    pthread_mutex_lock(&w->lock);
    w->batch = NULL;
    tw_chunk_release(chunk);
    pthread_mutex_unlock(&w->lock);
    return 1;
}

/* The writer thread: every chunk queued, the pen taken for each, so that a producer that needs it (no
 * room left) waits for one chunk at most; once one waits, the rest is its to write. */
static void calls_drain(tw_writer_t *w, writer_source_t *s)
{
    (void)s;
    for (int more = 1; more && atomic_load_explicit(&w->pen_waiting, memory_order_relaxed) == 0;) {
        pthread_mutex_lock(&w->pen);
        more = !w->pen_closed && write_next(w);
        pthread_mutex_unlock(&w->pen);
    }
}

/* The pen held: every chunk queued (all), or, for a producer helping, chunks until the budget is down
 * to a quarter. */
static void calls_write(tw_writer_t *w, writer_source_t *s, int all)
{
    (void)s;
    uint64_t used, peak, limit;
    do {
        if (!write_next(w))
            break;
        tw_queue_memory(w->queue, &used, &peak, &limit);
    } while (all || used > limit / 4);
}

/* The queue refuses nothing itself once the writer closes (it holds what comes, as without a
 * consumer), and its fork handling is its own: nothing to do for these. */
static void calls_nothing(writer_source_t *s)
{
    (void)s;
}

static const writer_source_ops_t calls_ops = {calls_drain, calls_write, NULL, NULL, NULL, calls_nothing,
                                                 calls_nothing};
