/* SPDX-License-Identifier: MIT */
/*
 * Record text into rows (reader_parse.c; not public API): CSV records and JSON lines, the header or
 * first object telling the file's kind and its columns, each row handed to the caller's function.
 * Shared by reader_parse.c and the file reader (reader.c), which feeds it what it reads.
 */
#ifndef TW_READER_PARSE_H
#define TW_READER_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "reader_row.h"
#include "torchwrapper/reader.h"

#define MAX_COLUMNS 64               /* columns per record we look at; more is not one of our files */

typedef struct reader {
    const char *name;
    tw_row_fn fn;
    void *ctx;
    tw_read_stats_t *stats;
    char *err;
    size_t err_size;
    int json;                   /* -1 until the first byte is seen */
    tw_file_kind_t kind;        /* 0 until the header (CSV) or first object (JSON) is read */
    column_t columns[MAX_COLUMNS];
    size_t ncolumns;
    char *scratch;
    size_t scratch_size;
    size_t limit;               /* rows to deliver before pausing (tw_reader_next); 0: no limit */
    size_t delivered;
    int paused;                 /* the limit was reached: process() stopped after that row */
    size_t stop;                /* a byte range (tw_reader_open_range): no record starting at or after
                                 * this offset of the data given to process() is read; SIZE_MAX: none */
    int gz;                     /* read_head: the file is gzip */
} reader_t;

/* Starts a reader_t for the records of name (for messages), rows to fn(ctx, row), counters in
 * *stats, else in *local; a scratch buffer of scratch_size bytes (malloc'ed: free r->scratch). 0, or
 * TW_ENOMEM with err filled. */
int tw_parse_init(reader_t *r, const char *name, tw_row_fn fn, void *ctx, tw_read_stats_t *stats,
                  tw_read_stats_t *local, char *err, size_t err_size, size_t scratch_size);

/* Handles the complete records at the start of data[0..len); *used receives the bytes consumed.
 * At eof, what is left is a torn last record. 0, 1 when r->limit rows were delivered (r->paused),
 * or the error of fn or of a file that is not ours (r->err filled). */
int tw_parse(reader_t *r, const char *data, size_t len, int eof, size_t *used);

#endif
