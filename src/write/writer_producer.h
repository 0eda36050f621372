/* SPDX-License-Identifier: MIT */
/* What the library's own row producers (CUPTI's GPU rows, cupti.c) ask of a writer and its streams
 * (writer.h; not public API: nothing outside the library calls them). */
#ifndef TW_WRITER_PRODUCER_H
#define TW_WRITER_PRODUCER_H

#include "torchwrapper/writer.h"

/* The format rows must be written in (the stream functions take rows already formatted). */
tw_format_t tw_writer_format(const tw_writer_t *writer);

/* The writer a stream belongs to. */
tw_writer_t *tw_writer_stream_writer(const tw_writer_stream_t *stream);

#endif
