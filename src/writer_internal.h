/* SPDX-License-Identifier: MIT */
/* Between the recorder and the writer (not public API). */
#ifndef TW_WRITER_INTERNAL_H
#define TW_WRITER_INTERNAL_H

#include <pthread.h>

#include "torchwrapper/api.h"
#include "torchwrapper/recorder.h"
#include "torchwrapper/writer.h"

/* One formatted record: escaped API name, module path and arguments (6 bytes per byte at worst in JSON). */
#define TW_LINE_MAX (12 * TW_API_NAME_MAX + 6 * TW_ARGS_MAX + 512)

/* Cuts n bytes of UTF-8 back to a character boundary at most max bytes long, so that cut text stays
 * valid UTF-8. */
static inline size_t tw_utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

/* Appends chunk to the FIFO list head..tail (the recorder's held chunks, the writer's queue). */
static inline void tw_chunk_append(tw_chunk_t **head, tw_chunk_t **tail, tw_chunk_t *chunk)
{
    chunk->next = NULL;
    if (*tail != NULL)
        (*tail)->next = chunk;
    else
        *head = chunk;
    *tail = chunk;
}

void tw_recorder_set_writer(tw_recorder_t *rec, tw_writer_t *writer);
void tw_recorder_request_flush(tw_recorder_t *rec);
void tw_chunk_release(tw_chunk_t *chunk);
void tw_writer_fork_prepare(tw_writer_t *writer);
void tw_writer_fork_parent(tw_writer_t *writer);
void tw_writer_fork_child(tw_writer_t *writer);
/* pthread_cond_init for waits with CLOCK_MONOTONIC deadlines. */
void tw_cond_init_monotonic(pthread_cond_t *cond);

#endif
