/* SPDX-License-Identifier: MIT */
/* tw-report's inputs (inputs.c): the record files and directories given, and what their manifests say. */
#ifndef TW_REPORT_INPUTS_H
#define TW_REPORT_INPUTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "torchwrapper/reader.h"

#include "cli.h"

typedef struct input_file {
    char *path;
    tw_file_kind_t kind;
} input_file_t;

typedef struct inputs {
    input_file_t *files;
    size_t count, capacity;
    int64_t origin_ns;   /* the earliest start_ns of the manifests found; INT64_MAX when none */
    int64_t rank_pids[256][2]; /* (pid, rank) from the manifests, for the trace's process names */
    size_t nranks;
    /* What the manifests say about the run, for --html's summary. */
    struct run_info {
        size_t manifests;
        char host[128], torch[64], torchwrapper[32];
        int hosts; /* distinct host names seen: 1, or 2 for "more than one" */
        uint64_t written, dropped;
        double peak_flops; /* FLOP/s MFU is measured against (the first manifest's peak_flops); 0: none */
    } info;
} inputs_t;

/*
 * Lists o->inputs' record files (a directory's in name order) with their kinds, and reads the
 * manifests beside them. Returns 0, or after a message on err: the -errno of stat or opendir,
 * -ENOENT (a directory without record files), TW_ENOMEM, or tw_read_kind's TW_EIO or TW_EINVAL (not
 * a record file). in is the caller's to free with report_free_inputs, whatever the result.
 */
int report_collect_inputs(const options_t *o, inputs_t *in, FILE *err);
void report_free_inputs(inputs_t *in);

#endif
