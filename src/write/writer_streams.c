/* SPDX-License-Identifier: MIT */
/*
 * Row streams as sources of the writer (writer_state.h; their API is writer.h's): rows of another kind (GPU activity,
 * tensor statistics, parameter updates), formatted by their producer, queued with their step under
 * the stream's lock, and written by the writer thread where their step says, as call records are:
 * out_dir's files in the steps the schedule records, a capture's files in the capture's steps. The
 * queue's bytes are charged to the writer's memory budget (queue.h), the same one the call records'
 * chunks are charged to.
 */
#include "config.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/api.h"
#include "writer_captures.h"
#include "writer_outdir.h"
#include "writer_state.h"
#include "record/queue_internal.h"
#include "stats_internal.h"

#define STREAM_FIRST_CAPACITY (64 * 1024) /* bytes of a stream's first queue buffer */
#define STREAM_SPARE_KEEP (64 * 1024)     /* a drained buffer up to this size is kept for the next batch */

/* A row queued by tw_writer_stream_put(): this header, then len bytes of text ending in '\n',
 * padded to 8 bytes. */
typedef struct {
    uint32_t len;
    uint32_t api_id;  /* TW_API_ID_NONE: no GPU time to add to the per-API totals */
    uint64_t gpu_ns;
    uint64_t step;
} queued_row_t;

struct tw_writer_stream {
    writer_source_t base;  /* first: the writer sees a source */
    tw_writer_t *w;
    uint64_t ring_at;      /* queued bytes past which the writer is rung rather than waiting for its interval */
    /* guarded by lock */
    pthread_mutex_t lock;
    char *queue;
    size_t queue_len;
    size_t queue_capacity; /* charged to the budget, as is spare_capacity */
    int closed;
    int rung;              /* the writer was rung for this batch already */
    char *spare;           /* the previous queue, emptied by the writer thread */
    size_t spare_capacity;
};

/* ---- the writer's side ---------------------------------------------------------------------------- */

/* Takes the rows queued (swapping the queue with the spare one, so that producers wait only for the
 * swap) and writes each where its step says. The pen held; a stream holds at most half of the budget,
 * so all or not, it writes them all. */
static void stream_write(tw_writer_t *w, writer_source_t *source, int all)
{
    (void)all;
    tw_writer_stream_t *s = (tw_writer_stream_t *)source;
    pthread_mutex_lock(&s->lock);
    char *rows = s->queue;
    size_t len = s->queue_len, capacity = s->queue_capacity;
    s->queue = s->spare;
    s->queue_capacity = s->spare_capacity;
    s->queue_len = 0;
    s->rung = 0;
    s->spare = rows;
    s->spare_capacity = capacity;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&w->lock);
    tw_captures_refresh_view(w); /* after the swap: a capture asked before a row came is seen */
    pthread_mutex_unlock(&w->lock);
    for (size_t at = 0; at < len;) {
        queued_row_t h;
        memcpy(&h, rows + at, sizeof h);
        at += sizeof h;
        const char *text = rows + at;
        at += (h.len + 7) & ~(size_t)7;
        unsigned keep = tw_schedule_keeps(&w->schedule, w->summary_only, h.step);
        capture_t *c = w->capture_view_count > 0 ? tw_capture_of(w, h.step) : NULL;
        if (keep & TW_KEEP_RECORD)
            tw_writer_append(w, &source->files, text, h.len);
        if (h.api_id != TW_API_ID_NONE) {
            /* GPU time is measured in the steps recorded only (CUPTI is off in the others, gpu.h:
             * tw_gpu_set_recording): summary.json counts those, whatever its "summary" says */
            if ((keep & TW_KEEP_SUMMARY) && tw_schedule_state(&w->schedule, h.step) == TW_STEP_ACTIVE) {
                tw_stats_add_gpu(&w->stats, h.api_id, h.gpu_ns);
                w->summary_changes++;
            }
            if (c != NULL)
                tw_stats_add_gpu(&c->stats, h.api_id, h.gpu_ns);
        }
        if (c != NULL)
            tw_capture_append(w, c, source->index, h.step, text, h.len);
    }
    /* A burst's large buffer goes back to malloc and its bytes to the budget; a small one is kept. */
    pthread_mutex_lock(&s->lock);
    if (s->spare_capacity > STREAM_SPARE_KEEP) {
        free(s->spare);
        tw_queue_refund(w->queue, s->spare_capacity);
        atomic_fetch_sub(&w->stream_bytes, s->spare_capacity);
        s->spare = NULL;
        s->spare_capacity = 0;
    }
    pthread_mutex_unlock(&s->lock);
}

/* The writer thread: the rows queued, with the pen, unless a producer waits for it. */
static void stream_drain(tw_writer_t *w, writer_source_t *source)
{
    if (atomic_load_explicit(&w->pen_waiting, memory_order_relaxed) != 0)
        return;
    pthread_mutex_lock(&w->pen);
    if (!w->pen_closed)
        stream_write(w, source, 0);
    pthread_mutex_unlock(&w->pen);
}

static void stream_close(writer_source_t *source)
{
    tw_writer_stream_t *s = (tw_writer_stream_t *)source;
    pthread_mutex_lock(&s->lock);
    s->closed = 1;
    pthread_mutex_unlock(&s->lock);
}

static void stream_fork_prepare(writer_source_t *source)
{
    pthread_mutex_lock(&((tw_writer_stream_t *)source)->lock);
}

static void stream_fork_parent(writer_source_t *source)
{
    pthread_mutex_unlock(&((tw_writer_stream_t *)source)->lock);
}

/* The rows queued are the parent's (it writes them); the buffers stay, charged, for the child's. */
static void stream_fork_child(writer_source_t *source)
{
    tw_writer_stream_t *s = (tw_writer_stream_t *)source;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_init(&s->lock, NULL);
    s->queue_len = 0;
    s->rung = 0;
}

/* After the writer detached from the budget: nothing is refunded. */
static void stream_free(writer_source_t *source)
{
    tw_writer_stream_t *s = (tw_writer_stream_t *)source;
    tw_fileset_free(&source->files);
    free((char *)source->files.header);
    free(s->queue);
    free(s->spare);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static const writer_source_ops_t stream_ops = {stream_drain, stream_write, stream_close, stream_fork_prepare,
                                                  stream_fork_parent, stream_fork_child, stream_free};

/* ---- public API ------------------------------------------------------------------------------------ */

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
    s->base.files.buf = malloc(TW_BUFFER_FLUSH + TW_STREAM_ROW_MAX);
    if (s->base.files.buf == NULL || (w->env.format == TW_FORMAT_CSV && header == NULL)) {
        free(s->base.files.buf);
        free(header);
        free(s);
        return TW_ENOMEM;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->w = w;
    s->base.ops = &stream_ops;
    strcpy(s->base.kind, kind);
    s->base.files.kind = s->base.kind;
    s->base.files.header = header;
    s->base.files.header_len = header_len;
    s->base.files.fd = -1;
    /* Rung at an eighth of the budget: the writer drains a burst long before it fills the budget. */
    s->ring_at = w->buffer_bytes / 8 < 256 * 1024 ? w->buffer_bytes / 8 : 256 * 1024;
    int rc = 0;
    pthread_mutex_lock(&w->lock);
    writer_source_t *last = &w->calls;
    for (writer_source_t *o = &w->calls; o != NULL && rc == 0; o = o->next) {
        if (strcmp(o->kind, kind) == 0)
            rc = TW_EBUSY;
        last = o;
    }
    if (rc == 0 && w->closed)
        rc = TW_ECLOSED;
    else if (rc == 0 && w->source_count == WRITER_SOURCES_MAX)
        rc = TW_EFULL;
    if (rc == 0) {
        /* At the tail: the writer thread walks a list whose links never change once added. */
        s->base.index = w->source_count++;
        atomic_store_explicit(&last->next, &s->base, memory_order_release);
    }
    pthread_mutex_unlock(&w->lock);
    if (rc != 0) {
        pthread_mutex_destroy(&s->lock);
        free(s->base.files.buf);
        free(header);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

tw_format_t tw_writer_stream_format(const tw_writer_stream_t *s)
{
    return s->w->env.format;
}

/* Makes room for need more bytes in the queue, charging what the buffer grows by to the budget.
 * Returns 0, TW_EFULL (no room in the budget) or TW_ENOMEM. The stream's lock held. */
static int grow(tw_writer_stream_t *s, size_t need)
{
    if (s->queue_len + need <= s->queue_capacity)
        return 0;
    size_t capacity = s->queue_capacity ? s->queue_capacity : STREAM_FIRST_CAPACITY;
    while (capacity < s->queue_len + need)
        capacity *= 2;
    size_t more = capacity - s->queue_capacity;
    tw_writer_t *w = s->w;
    if (atomic_fetch_add(&w->stream_bytes, more) + more > w->buffer_bytes / 2) {
        atomic_fetch_sub(&w->stream_bytes, more);
        return TW_EFULL;
    }
    if (!tw_queue_charge(w->queue, more)) {
        atomic_fetch_sub(&w->stream_bytes, more);
        return TW_EFULL;
    }
    char *queue = realloc(s->queue, capacity);
    if (queue == NULL) {
        tw_queue_refund(w->queue, more);
        atomic_fetch_sub(&w->stream_bytes, more);
        return TW_ENOMEM;
    }
    s->queue = queue;
    s->queue_capacity = capacity;
    return 0;
}

int tw_writer_stream_put(tw_writer_stream_t *s, const tw_stream_row_t *row)
{
    const char *text = row->text;
    size_t len = row->len;
    size_t total = len > 0 && text[len - 1] == '\n' ? len : len + 1; /* one '\n' at the end */
    if (len == 0 || total > TW_STREAM_ROW_MAX || total > tw_fileset_room(&s->w->env, &s->base.files) ||
        memchr(text, '\n', total - 1) != NULL) {
        atomic_fetch_add(&s->base.dropped_invalid, 1);
        return TW_EINVAL;
    }
    uint64_t step = row->step == TW_STEP_NOW ? atomic_load(&s->w->step) : row->step;
    size_t need = sizeof(queued_row_t) + ((total + 7) & ~(size_t)7);
    int ring = 0, rc;
    pthread_mutex_lock(&s->lock);
    rc = s->closed ? TW_ECLOSED : grow(s, need);
    if (rc == TW_EFULL) {
        /* No room: the writer thread is behind (it gets only idle CPU time); write for it, then try
         * again, as a producer of call records does. */
        pthread_mutex_unlock(&s->lock);
        int helped = tw_queue_help(s->w->queue);
        pthread_mutex_lock(&s->lock);
        if (helped)
            rc = s->closed ? TW_ECLOSED : grow(s, need);
    }
    if (rc == 0) {
        queued_row_t h = {(uint32_t)total, row->api_id, row->gpu_ns, step};
        char *at = s->queue + s->queue_len;
        memcpy(at, &h, sizeof h);
        memcpy(at + sizeof h, text, len);
        at[sizeof h + total - 1] = '\n';
        s->queue_len += need;
        if (!s->rung && s->queue_len >= s->ring_at)
            ring = s->rung = 1;
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) {
        atomic_fetch_add(rc == TW_ECLOSED ? &s->base.dropped_closed : &s->base.dropped_full, 1);
        return rc;
    }
    if (ring)
        tw_writer_ring(s->w);
    return 0;
}

int tw_writer_stream_write_gpu(tw_writer_stream_t *s, const char *row, size_t len, uint32_t api_id, uint64_t gpu_ns)
{
    tw_stream_row_t r = {row, len, TW_STEP_NOW, api_id, gpu_ns};
    return tw_writer_stream_put(s, &r);
}

int tw_writer_stream_write(tw_writer_stream_t *s, const char *row, size_t len)
{
    return tw_writer_stream_write_gpu(s, row, len, TW_API_ID_NONE, 0);
}

void tw_writer_stream_add_dropped(tw_writer_stream_t *s, uint64_t count)
{
    atomic_fetch_add(&s->base.dropped_upstream, count);
}

void tw_writer_stream_stats(tw_writer_stream_t *s, tw_writer_stream_stats_t *stats)
{
    tw_writer_t *w = s->w;
    pthread_mutex_lock(&w->lock);
    stats->records_written = s->base.files.written;
    stats->bytes_written = s->base.files.bytes_total;
    tw_manifest_drops_t drops = tw_writer_source_drops(&s->base);
    pthread_mutex_unlock(&w->lock);
    stats->records_dropped = tw_manifest_drops_total(&drops);
    stats->records_lost_upstream = drops.upstream;
}
