/* SPDX-License-Identifier: MIT */
/* On-demand captures as the writer's sources and thread use them (writer_captures.c; not public
 * API: tw_writer_capture() is writer.h's). */
#ifndef TW_WRITER_CAPTURES_H
#define TW_WRITER_CAPTURES_H

#include <stddef.h>
#include <stdint.h>

#include "writer_state.h"

/* The capture whose steps hold step, or NULL (pen). A done capture counts the record as late and
 * gives NULL. */
capture_t *tw_capture_of(tw_writer_t *w, uint64_t step);
/* Appends a line of source index and step to capture c's files; a new file brings new manifests. */
void tw_capture_append(tw_writer_t *w, capture_t *c, unsigned index, uint64_t step, const char *line, size_t len);
/* Takes a new copy of the capture list when it grew (the pen and the writer's lock held). */
void tw_captures_refresh_view(tw_writer_t *w);
/* At each flush interval: flushes open captures, finishes those whose steps are over; closing:
 * finishes every one. */
void tw_captures_advance(tw_writer_t *w, int closing);
/* Frees every capture (destroy, and a forked child, where they are the parent's). */
void tw_captures_free(tw_writer_t *w, int forked);

#endif
