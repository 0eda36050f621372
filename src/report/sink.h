/* SPDX-License-Identifier: MIT */
/*
 * A sink: one output of tw-report (the table's groups, the call tree, the trace, the flame graph's
 * stacks, the HTML page's aggregates), fed row by row by the pass over the record files (pass.c),
 * which knows none of them by name:
 *
 *   row     every row the sink asked for (rows: the ones the filters kept, left out, or both), with
 *           the filters' verdict;
 *   settle  once the last row is read: what waited for rows that never came is counted;
 *   merge   for a reading on several threads (jobs.c, -j): each thread feeds sinks of its own, fed
 *           parts of the files in whatever order the threads take them, merged into the driver's
 *           at the end, before settle. A merge must give what one pass would have, whatever the
 *           order of the parts (sums, counts, min, max, histograms); NULL where the sink needs the
 *           rows in file order (the trace, the flame graph, the tree, --by parent and site): then
 *           the whole report is read on one thread;
 *   gpu_read  with -j, once the threads have read the GPU files and before they read the others
 *           (the GPU files come first, as in one pass): called on the driver's sink (which it
 *           leaves as it is), given the threads' own, for what every thread must see of the GPU
 *           files to read the call files (the aggregate's GPU time per call). NULL: nothing;
 *   write   the sink's files (--trace, --folded, --flamegraph, --html), every sink's in turn;
 *   print   what goes to the standard output (the table, the tree), after every file is written;
 *   free    its memory (and files still open, unfinished).
 *
 * Each returns 0 or a negative errno. From row and settle, TW_ENOMEM means rows left uncounted: the
 * report goes on and says so at the end; from write and print, an error comes after its message on
 * err, and the report's exit status is 1. Any op but row and free may be NULL.
 */
#ifndef TW_REPORT_SINK_H
#define TW_REPORT_SINK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "torchwrapper/reader.h"

#include "cli.h"
#include "inputs.h"

/* What the pass saw, for the outputs: read when the sinks write and print. */
typedef struct report_pass {
    const options_t *o;
    const inputs_t *in;
    const tw_read_stats_t *stats;
    uint64_t kept, filtered; /* rows the filters kept, and left out */
    int oom;                 /* some rows are not counted somewhere (out of memory) */
    int have_gpu_files;
    double seconds;          /* from the start to the last file written */
} report_pass_t;

typedef struct report_sink report_sink_t;

typedef struct report_sink_ops {
    const char *name;
    int (*row)(report_sink_t *sink, const tw_row_t *row, int kept);
    int (*settle)(report_sink_t *sink);
    int (*merge)(report_sink_t *into, report_sink_t *from);
    int (*gpu_read)(report_sink_t *sink, report_sink_t *const *threads, size_t count);
    int (*write)(report_sink_t *sink, const report_pass_t *pass, FILE *err);
    int (*print)(report_sink_t *sink, const report_pass_t *pass, FILE *out, FILE *err);
    void (*free)(report_sink_t *sink);
} report_sink_ops_t;

/* The rows a sink is given. */
enum {
    SINK_ROWS_KEPT = 1,     /* the rows the filters keep */
    SINK_ROWS_LEFT_OUT = 2, /* and those they leave out (the flame graph: a call left out still carries
                             * its children's stacks to its caller) */
};

/* The head of every sink's own struct. */
struct report_sink {
    const report_sink_ops_t *ops;
    unsigned rows; /* SINK_ROWS_*; 0: none (an output that stays empty, as --trace with --tree) */
};

#endif
