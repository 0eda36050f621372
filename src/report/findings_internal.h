/* SPDX-License-Identifier: MIT */
/* What findings.c (the rows) and findings_rules.c (the rules, at settle) share: the sink's state. */
#ifndef TW_REPORT_FINDINGS_INTERNAL_H
#define TW_REPORT_FINDINGS_INTERNAL_H

#include <stdint.h>

#include "findings.h"
#include "groups.h"

#define FIND_DEPTH 64       /* calls deeper than this are counted as if at this depth */
#define FIND_THREADS 256    /* threads followed; the rows of more are still counted by API rules */
#define FIND_STEPS 65536    /* steps whose times are kept (drift) */
#define SMALL_CALL_NS 5000  /* "a small operation": a call with nothing inside under 5 us */
#define WHERE_TEXT_MAX 300
#define SITE_CACHE 1024     /* lines remembered (a power of two): a row's line is looked up once */

/* What the calls inside one call did (the rule counters of a subtree). */
typedef struct subtree {
    uint32_t rows, foreach_calls, fused_calls, inplace_calls, fills, conv_bias;
    uint64_t fill_ns;
} subtree_t;

/* The last call read at a depth of a thread: a convolution module's forward is kept for the next. */
typedef struct sibling {
    uint64_t parent_id;
    int conv;           /* a Conv*d.forward with a bias */
    char module[128];
} sibling_t;

typedef struct thread_state {
    int64_t pid;
    uint64_t tid;
    int used;
    uint64_t first_start, last_end; /* of its outermost calls */
    uint64_t outer_rows;
    /* level[k]: what the calls closed at depth k since the last row at a depth < k counted (see
     * close_subtree); level[k] for k > top is empty */
    subtree_t level[FIND_DEPTH + 2];
    size_t top;
    sibling_t last[FIND_DEPTH + 1];
} thread_state_t;

/* The tallies keyed by a line alone, whose groups a site_line_t keeps. */
enum { LINE_SMALL_OPS, LINE_DATASET, LINE_LOADER, LINE_COMPILES, LINE_FILLS, LINE_KEPT, LINE_TALLIES };

/* A row's line, looked up once per (process, site) rather than per row: its text and length, whether
 * it is in a Dataset's __getitem__, and the tallies' groups of that key (all steps, the first step;
 * NULL until a row counts there). A cache: an entry taken by another site is filled again. */
typedef struct site_line {
    int used;
    int64_t pid;
    uint64_t site;
    const char *text; /* the sites' text (borrowed), or "(no site)" */
    size_t len;       /* the key's length: strlen(text), at most WHERE_TEXT_MAX */
    int dataset;
    group_t *line[LINE_TALLIES][2];
    int sync;               /* the host sync API (is_sync's number) whose groups sync holds; 0: none */
    group_t *sync_g[2];
    uint64_t gap_tid;       /* the thread whose gaps' groups gap holds (the entry's pid's) */
    int gap_set;
    group_t *gap[2];
} site_line_t;

typedef struct step_span {
    uint64_t start, end;
    int64_t net_bytes; /* config memory: allocated less freed by the step's outermost calls */
    uint64_t gap_ns;   /* the gaps before its outermost calls: Python between calls into torch */
    uint64_t loader_ns; /* its waits for the DataLoader's next batch */
} step_span_t;

/* A rule's tally, keyed by a line's text (group_t: stats.calls a count, stats.total_ns time,
 * stats.self_ns a second number), over all steps and over the first step alone: settle takes the
 * first out when the run has steps enough (a first step holds one-off work: an import in an
 * optimizer's constructor took 1.7 s of a 1.9 s test). */
typedef struct tally {
    group_table_t all, first;
    int first_step_too; /* counted whatever the steps (a first compilation is one all the same) */
} tally_t;

typedef struct findings {
    report_sink_t sink;
    const options_t *o;
    const report_sites_t *sites;
    thread_state_t *threads;
    thread_state_t *last_thread; /* the last row's: rows come in runs of one thread */
    site_line_t *lines;          /* SITE_CACHE of them */
    tally_t loader_wait, dataset_lines, syncs, gaps, small_ops, single_tensor_opt, fills, conv_bn, compiles,
        kept_bytes; /* kept_bytes: per line, bytes its outermost calls allocated and did not free */
    int have_memory; /* some row carries allocator reports */
    uint64_t leaf_calls[2], small_calls[2], small_ns[2]; /* all steps, the first step */
    int skip_first; /* settle: the first step (warm-up: imports, lazy inits) is left out of the rules */
    step_span_t *steps; /* of every thread's outermost calls: drift uses the busiest thread's only */
    int64_t steps_pid;
    uint64_t steps_tid;
    uint64_t max_step;
    int oom;
    int have_gpu; /* GPU records among the inputs */
    report_sink_t *ranks; /* the ranks' analysis (NULL: one process) */
    int ranks_done;       /* its finding added (after every sink settled) */
    finding_t *found;
    size_t nfound;
    double run_ms;
    uint64_t nsteps;
} findings_t;

/* Takes the first step's counts out of t's when settle leaves that step out (findings.c). */
void findings_tally_settle(findings_t *f, tally_t *t);

/* The straggler finding from the ranks' analysis, once every sink settled (findings_rules.c). */
void findings_add_stragglers(findings_t *f);

/* The rules: the tallies into f->found, most severe first (findings_rules.c). */
int findings_settle(report_sink_t *sink);

#endif
