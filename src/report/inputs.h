/* SPDX-License-Identifier: MIT */
/* tw-report's inputs (inputs.c): the record files and directories given, and what their manifests say. */
#ifndef TW_REPORT_INPUTS_H
#define TW_REPORT_INPUTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "torchwrapper/reader.h"

#include "cli.h"
#include "own_cost_report.h"

typedef struct input_file {
    char *path;
    tw_file_kind_t kind;
} input_file_t;

/* A process, from its manifest: its rank, and its clock's offset to rank 0's (clock_sync). */
typedef struct input_proc {
    int64_t pid;
    int64_t rank;            /* -1: none */
    int has_clock;           /* the manifest holds a measured offset */
    int64_t clock_offset_ns; /* add to the process's times to have rank 0's clock's */
    int64_t clock_error_ns;  /* the offset is right within +- this (half the round trip) */
    int64_t world_size;      /* the run's ranks, when its manifest says (WORLD_SIZE, clock_sync); -1: not */
} input_proc_t;

typedef struct inputs {
    input_file_t *files;
    size_t count, capacity;
    int64_t origin_ns;   /* the earliest start_ns of the manifests found; INT64_MAX when none */
    int64_t rank_pids[256][2]; /* (pid, rank) from the manifests, for the trace's process names */
    size_t nranks;
    input_proc_t *procs;     /* every manifest's process, in the order read */
    size_t nprocs, procs_capacity;
    /* What the manifests say about the run, for --html's summary. */
    struct run_info {
        size_t manifests;
        char host[128], torch[64], torchwrapper[32];
        int hosts; /* distinct host names seen: 1, or 2 for "more than one" */
        uint64_t written, dropped;
        double peak_flops; /* FLOP/s MFU is measured against (the first manifest's peak_flops); 0: none */
        int64_t cpus;          /* the first manifest's process's usable CPUs; 0: not said */
        int64_t torch_threads; /* its torch threads when profiling began; 0: not said */
        report_own_t own;      /* the profiler's own cost, summed over the manifests that say it */
        /* record files the writer removed (max_total_size, max_files: a flight recorder), their call
         * records' files only: the reports then cover the newest records */
        uint64_t removed_files, removed_records, removed_bytes;
        char removed_by[16];   /* the limit the first manifest with removed files names ("by") */
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

/* The manifest's word on process pid, or NULL when no manifest names it. hint (may be NULL) keeps the
 * index found last: rows come in runs of one process. */
const input_proc_t *report_input_proc(const inputs_t *in, int64_t pid, size_t *hint);

/* The line every report prints when the writer removed record files of the run, so that its tables
 * and findings are read as the newest records' ("" when none were removed). */
void report_removed_text(const struct run_info *info, char *buf, size_t size);

/* The offset to add to pid's times (0 without a measured one). */
static inline int64_t report_clock_offset(const inputs_t *in, int64_t pid, size_t *hint)
{
    const input_proc_t *p = report_input_proc(in, pid, hint);
    return p != NULL && p->has_clock ? p->clock_offset_ns : 0;
}

#endif
