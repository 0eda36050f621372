/* SPDX-License-Identifier: MIT */
/* Between the recorder and the writer (not public API). */
#ifndef TW_WRITER_INTERNAL_H
#define TW_WRITER_INTERNAL_H

#include <pthread.h>

#include "torchwrapper/api.h"
#include "torchwrapper/recorder.h"
#include "torchwrapper/writer.h"

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
