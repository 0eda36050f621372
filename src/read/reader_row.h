/* SPDX-License-Identifier: MIT */
/*
 * One row of a record file, field by field (not public API): shared by the reader (reader_parse.c,
 * which splits text into records; reader.c, which reads the files) and reader_row.c (columns, field
 * parsing, JSON-lines objects).
 */
#ifndef TW_READER_ROW_H
#define TW_READER_ROW_H

/* The reader's hot loops start on a cache line (reader_parse.c says why). */
#define TW_HOT_ALIGNED __attribute__((aligned(64)))

#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/reader.h"

typedef enum {
    COL_UNKNOWN = 0,
    COL_CALL_ID,
    COL_API,
    COL_START_NS,
    COL_COST_NS,
    COL_SELF_NS,
    COL_GPU_NS,
    COL_PID,
    COL_TID,
    COL_DEPTH,
    COL_PARENT_ID,
    COL_ERROR,
    COL_ARGS,
    COL_KIND,
    COL_NAME,
    COL_END_NS,
    COL_DEVICE,
    COL_STREAM,
    COL_CORRELATION_ID,
    COL_MODULE,
    COL_STEP,
    COL_SITE,
    COL_FWD_CALL_ID,
    COL_FWD_API,
    COL_FLOPS,
    COL_FLOPS_TOTAL,
    COL_MEM_ALLOC,
    COL_MEM_SELF,
    COL_MEM_FREED,
    COL_MEM_PEAK,
    COL_LAUNCH_START_NS,
    COL_LAUNCH_END_NS,
    COL_LAUNCH,
    COL_COUNT
} column_t;

/* p past spaces, tabs and carriage returns (at most end). */
static inline const char *tw_skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* The column named s[0..len), or COL_UNKNOWN. */
column_t tw_column_of(const char *s, size_t len);

/* The kind of a file with these columns (a bit set of 1 << column_t), or 0 if it is not one of ours. */
tw_file_kind_t tw_kind_of(uint64_t present);

/* Stores one field's text in row; -1 when it does not parse. */
int tw_set_field(tw_row_t *row, column_t col, const char *s, size_t len);

/* Parses one line holding a flat JSON object into row; *present gets the bit set of known keys.
 * Strings that need unescaping go to scratch (room for the line). Returns 0, or -1 when the line is
 * not such an object or a known field does not parse. */
int tw_json_row(const char *p, const char *end, tw_row_t *row, uint64_t *present, char *scratch);

#endif
