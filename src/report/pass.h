/* SPDX-License-Identifier: MIT */
/*
 * The pass over the record files (pass.c), run by the driver (main.c) on its thread and by jobs.c on
 * several: each thread has a pass of its own, with sinks of its own, fed by report_pass_row.
 */
#ifndef TW_REPORT_PASS_H
#define TW_REPORT_PASS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "torchwrapper/reader.h"

#include "cli.h"
#include "filter.h"
#include "index.h"
#include "inputs.h"
#include "site_texts.h"
#include "sink.h"

#define REPORT_MAX_SINKS 6

typedef struct pass {
    report_pass_t out;    /* what the sinks' outputs read */
    report_filter_t filter;
    int filtering;        /* some filter is given (report_filter_any) */
    report_sink_t *sinks[REPORT_MAX_SINKS]; /* in the order they write and print (report_open_sinks) */
    size_t nsinks;
    int64_t min_start_ns; /* for the origin when no manifest gave one */
    int gpu_pass;         /* reading GPU files (first) */
    int prepass;          /* only finding the run's first call */
    report_index_t index; /* the calls read lately and what waits for a row, for every sink (index.h) */
} pass_t;

/* The reader's callback: the filters' verdict on row, and the row to the sinks that asked for it. */
int report_pass_row(void *ctx, const tw_row_t *row);

/*
 * The sinks the options ask for, into p, given p's index (p must not move while they live:
 * free them, then report_index_free). 0, or a negative errno after a message on err; the
 * sinks opened are in p either way.
 */
int report_open_sinks(pass_t *p, const options_t *o, const inputs_t *in, const report_sites_t *sites, FILE *err);

#endif
