/* SPDX-License-Identifier: MIT */
/*
 * The row filters (filter.c): --api, --pid, --tid, --window, --steps. The drivers apply them (the
 * report's pass in pass.c, --diff's in diff.c); the sinks see each row with its verdict.
 */
#ifndef TW_REPORT_FILTER_H
#define TW_REPORT_FILTER_H

#include <stdint.h>

#include "torchwrapper/reader.h"

#include "cli.h"

typedef struct report_filter {
    const options_t *o;
    int64_t window_from_ns, window_to_ns; /* --window, absolute; to = INT64_MAX when open */
} report_filter_t;

/* 1 when the filters keep row, else 0. */
int report_filter_keep(const report_filter_t *f, const tw_row_t *row);

/* 1 when o filters rows at all (else every row is kept: no need to ask for each). */
int report_filter_any(const options_t *o);

#endif
