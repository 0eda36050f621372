/* SPDX-License-Identifier: MIT */
/* The call records as the writer's first source (writer_calls.c; not public API). */
#ifndef TW_WRITER_CALLS_H
#define TW_WRITER_CALLS_H

#include "writer_state.h"

/* Sets up w->calls (format and header from env). */
void tw_writer_calls_init(tw_writer_t *w);

#endif
