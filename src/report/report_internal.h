/* SPDX-License-Identifier: MIT */
/*
 * Between the files of tw-report (not public API): the options, the inputs, the report being
 * gathered (groups, --by parent's pending children, --tree's calls, the trace), and the functions
 * one file offers the others. Every file of src/report/ includes this header and no other's.
 */
#ifndef TW_REPORT_INTERNAL_H
#define TW_REPORT_INTERNAL_H

#include <stdint.h>
#include <stdio.h>
#include <zlib.h>

#include "torchwrapper/reader.h"
#include "torchwrapper/stats.h"
#include "torchwrapper/writer.h"

#define MAX_FILTERS 32

typedef struct group {
    char *key;
    size_t key_len;
    uint64_t hash;
    tw_api_stats_t stats;
    uint64_t bwd_ns;     /* --by api: the autograd nodes charged to this API's calls (their fwd_api) */
    char *detail;        /* --by site: the APIs called there (call_sites.c) */
    size_t detail_count;
} group_t;

typedef struct group_table {
    group_t **slots;
    size_t capacity; /* a power of two */
    size_t count;
} group_table_t;

/*
 * --by parent: a call's row is written when it returns, after the rows of the calls inside it, so
 * a child waits here, keyed by (pid, parent call id), until its parent's row names the parent's API.
 * Memory is what the calls still open at that point of the files have below them.
 */
typedef struct pending_child {
    group_t *api;   /* the child's own API (a group of the api table: its interned name) */
    uint64_t cost_ns, self_ns;
    int error;
} pending_child_t;

typedef struct pending {
    int64_t pid;
    uint64_t parent_id; /* 0: an empty slot */
    pending_child_t *children;
    size_t count, capacity;
} pending_t;

typedef struct pending_table {
    pending_t *slots;
    size_t capacity, count;
} pending_table_t;

typedef enum { BY_API, BY_THREAD, BY_PID, BY_PARENT, BY_STEP, BY_SITE } group_by_t;
typedef enum { OUT_TABLE, OUT_CSV, OUT_JSON, OUT_MARKDOWN } out_format_t;
typedef enum { SORT_TOTAL, SORT_SELF, SORT_GPU, SORT_CALLS, SORT_MEAN, SORT_MIN, SORT_MAX, SORT_P50, SORT_P95,
               SORT_P99, SORT_NAME } sort_key_t;

typedef struct options {
    sort_key_t sort;
    size_t top;
    group_by_t by;
    out_format_t format;
    const char *apis[MAX_FILTERS];
    size_t napis;
    int64_t pids[MAX_FILTERS];
    size_t npids;
    uint64_t tids[MAX_FILTERS];
    size_t ntids;
    int has_window;
    double window_from, window_to; /* seconds after the run's start; to < 0: open */
    int has_steps;
    int64_t steps_from, steps_to;  /* --steps: calls of steps from..to (inclusive); to < 0: open */
    const char *trace;
    uint64_t limit;
    int64_t tree_step; /* -1: no tree */
    const char *boundary;
    int boundary_given; /* --boundary: steps counted by its calls even where rows carry their step */
    uint64_t max_depth; /* 0: all levels */
    const char **inputs; /* the positional arguments: options may come before, between or after them */
    size_t ninputs;
    /* --folded, --flamegraph, --html (flame.c, html.c) */
    const char *folded, *flamegraph, *html;
    int frames_by_module; /* --by module: module paths as frames */
    int backward_timeline; /* --backward timeline: autograd nodes where they ran, not under their forward call */
    /* --diff BASE (repeatable; the positional inputs are NEW), --fail-above, --alpha, --min-change (diff.c) */
    const char **diff_base;
    size_t ndiff_base;
    double diff_fail_above, diff_alpha, diff_min_change; /* diff_alpha 0: the default */
    int diff_fail_above_given, diff_min_change_given;
} options_t;

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
    } info;
} inputs_t;

struct launch {
    int64_t pid;
    uint64_t call_id; /* 0: an empty slot */
};

typedef struct trace {
    FILE *file;
    gzFile gz;
    char buf[1 << 16];
    size_t used;
    int failed;
    uint64_t events;  /* calls written */
    uint64_t skipped; /* calls beyond --limit */
    int64_t origin_ns;
    /* Tracks named so far: (pid, tid) pairs; bounded by the threads and streams of the run. */
    struct { int64_t pid; uint64_t tid; } *tracks;
    size_t ntracks, track_capacity;
    /* (pid, call id) of the calls that launched GPU work, for the flow arrows. */
    struct launch *launches;
    size_t launch_capacity, nlaunches;
    /* The last calls seen, by (pid, call id) in a direct-mapped table (TRACE_RECENT slots), for the
     * arrows from a forward call to the backward nodes it created: a node comes at most a step after
     * its forward call, and the table stays 2 MB however long the run. NULL until a call is seen. */
    struct recent_call { int64_t pid; uint64_t call_id, tid; int64_t ts; } *recent;
    /* Nodes met before their forward call (another thread's records can reach the files first),
     * by (pid, forward call id), probed over a few slots: drawn when the forward call comes. */
    struct pending_node { int64_t pid; uint64_t fwd_call_id, call_id, tid; int64_t ts; } *pending;
} trace_t;

typedef struct tree_call {
    uint64_t call_id, start_ns, cost_ns, self_ns, depth, site, parent_id, fwd_call_id;
    char *api, *module;
    /* while printing: the tree as shown (nodes charged to their forward call, or where they ran) */
    size_t first_child, last_child, next_sibling; /* indexes + 1; 0: none */
} tree_call_t;

typedef struct tree_calls {
    tree_call_t *items;
    size_t count, capacity;
} tree_calls_t;

/* The call sites of the run (call_sites.c): (pid, id) -> "file:line function". */
typedef struct report_site {
    int64_t pid;
    uint64_t id;
    char *text; /* NULL: an empty slot */
} report_site_t;

typedef struct report_sites {
    report_site_t *slots;
    size_t capacity, count;
} report_sites_t;

typedef struct tree {
    const report_sites_t *sites; /* to name the calls' sites */
    int have_tid;
    uint64_t tid;
    int64_t pid;
    int64_t boundaries; /* outermost boundary calls seen: the step the next outermost call is in */
    int64_t column_steps; /* by the step column: 1 + the largest step of an outermost call; 0: none */
    tree_calls_t pending;  /* calls inside the outermost call not yet returned (rows come children first) */
    tree_calls_t selected; /* the step's calls */
} tree_t;

typedef struct report {
    const options_t *o;
    const inputs_t *in;
    group_table_t groups;
    group_table_t api_names; /* --by parent: the child's API, interned */
    pending_table_t pending;
    int64_t window_from_ns, window_to_ns; /* absolute; to = INT64_MAX when open */
    int64_t min_start_ns;                 /* for the origin when no manifest gave one */
    int gpu_pass;                         /* reading GPU files (first) */
    int prepass;                          /* only finding the run's first call */
    int have_gpu_files;
    uint64_t kept, filtered;
    int oom;
    trace_t *trace;
    tree_t tree;
    struct flame *flame;         /* --folded, --flamegraph, --html */
    struct html_data *html_data; /* --html */
    report_sites_t sites;
} report_t;

/* aggregate.c */
uint64_t report_pid_id_hash(int64_t pid, uint64_t id);
uint64_t report_hash_bytes(const char *s, size_t len, uint64_t seed);
int report_on_row(void *ctx, const tw_row_t *row);
void report_settle_pending(report_t *r);
void report_free(report_t *r);
group_t *report_group_get(group_table_t *t, const char *key, size_t len);
void report_group_table_free(group_table_t *t);

/* inputs.c */
int report_has_suffix(const char *s, const char *suffix);
int report_collect_inputs(const options_t *o, inputs_t *in, FILE *err);
void report_free_inputs(inputs_t *in);

/* cli.c */
/* A usage error: the message, then where the options are listed; returns 2 (the exit status). */
int report_usage_error(FILE *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int report_parse_options(int argc, char *const argv[], options_t *o, FILE *out, FILE *err);

/* tree.c */
void report_print_tree(FILE *out, FILE *err, const options_t *o, tree_t *t);
void report_tree_row(report_t *r, const tw_row_t *row);
void report_tree_free(tree_t *t);

/* chrome_trace.c */
void report_launch_add(trace_t *t, int64_t pid, uint64_t call_id);
void report_trace_event(trace_t *t, const tw_row_t *row, const inputs_t *in);
trace_t *report_trace_open(const char *path, int64_t origin_ns, FILE *err);
int report_trace_close(trace_t *trace);
void report_trace_free(trace_t *trace);

/* call_sites.c */
int report_load_sites(report_sites_t *s, const inputs_t *in);
const char *report_site_text(const report_sites_t *s, int64_t pid, uint64_t id);
void report_sites_free(report_sites_t *s);
int report_site_key(const report_t *r, const tw_row_t *row, char *key, size_t size);
void report_site_note_api(group_t *g, const char *api, size_t api_len);
void report_site_keys_finish(report_t *r);

/* table.c */
/* Closes an output file the report wrote (rc: the writing's own error, 0 or a TW_E* code): 0, or 1
 * after saying what failed (a write error, or rc). */
int report_close_output(FILE *out, const char *path, int rc, FILE *err);
/* s as one CSV field (quoted when it must be), and as a JSON string (quotes included). */
void report_csv_text(FILE *out, const char *s);
void report_json_text(FILE *out, const char *s);
void report_print_table(FILE *out, FILE *err, const report_t *r, const tw_read_stats_t *stats, double seconds);

/* flame.c: stacks and their self time, built bottom-up as rows return (see there) */
typedef struct flame flame_t;
/* by_module: module paths as frames; sites: call sites as frames above their calls (NULL: none). */
/* timeline: backward nodes stay under the backward call that ran them (else: under the forward call
 * that created them, the charged view) */
flame_t *report_flame_new(int by_module, const report_sites_t *sites, int timeline);
void report_flame_row(flame_t *f, const tw_row_t *row, int counted);
void report_flame_settle(flame_t *f);
uint64_t report_flame_self_ns(const flame_t *f);
int report_flame_oom(const flame_t *f);
int report_flame_write_folded(const flame_t *f, const char *path, FILE *err);
/* The <svg> element (id: unique in its page; fluid: as wide as its container), at most max_frames
 * frames; 0 or TW_ENOMEM. */
int report_flame_write_svg(const flame_t *f, FILE *out, const char *id, const char *title, size_t max_frames,
                           int fluid);
int report_flame_write_svg_file(const flame_t *f, const char *path, FILE *err);
void report_flame_free(flame_t *f);
size_t report_module_label(const tw_row_t *row, const char **label);

/* html.c: --html's own aggregates (steps, processes, modules) and the page */
typedef struct html_data html_data_t;
html_data_t *report_html_new(void);
void report_html_row(html_data_t *h, const tw_row_t *row);
int report_html_write(const report_t *r, const tw_read_stats_t *stats, FILE *err);
/* For other pages: the page's head (styles) and end (scripts: sortable tables, the flame graph's
 * search box), and text escaped for HTML. */
void report_html_begin(FILE *out, const char *title);
void report_html_end(FILE *out);
void report_html_text(FILE *out, const char *s, size_t len);
void report_html_free(html_data_t *h);
/* ---- diff.c, diff_output.c: tw-report --diff BASE NEW ------------------------------------------ */

/* A two-sided Mann-Whitney U test (normal approximation, tie and continuity corrections): u is x's U
 * (the pairs (x_i, y_j) with x_i > y_j, ties counting one half), z its signed normal score, p the
 * two-sided p value (NAN when a sample is empty). 0, or TW_ENOMEM. */
typedef struct mann_whitney {
    double u, z, p;
} mann_whitney_t;
int report_mann_whitney(const double *x, size_t nx, const double *y, size_t ny, mann_whitney_t *out);

typedef enum { DIFF_SAME, DIFF_REGRESSION, DIFF_IMPROVEMENT, DIFF_APPEARED, DIFF_VANISHED } diff_verdict_t;

/* One API in one run: per step (means over the steps compared) and per call. */
typedef struct diff_side {
    double calls, total_ns, self_ns;
    double median_self_ns; /* the median step's self time */
    uint64_t p50_ns, p99_ns;
} diff_side_t;

typedef struct diff_row {
    char *api;
    diff_verdict_t verdict;
    diff_side_t base, new_;
    double change_ns;         /* a step's self time, NEW - BASE: medians (means where both medians are 0) */
    double change_pct;        /* change_ns in percent of BASE's step time */
    double self_change_pct, total_change_pct; /* of the means, in percent of BASE's; NAN when BASE's is 0 */
    double u, p_value;        /* Mann-Whitney of NEW's per-step self times against BASE's */
    int fails;                /* triggers --fail-above */
} diff_row_t;

typedef struct diff_run {
    const char *const *inputs;
    size_t ninputs, files, steps;
    uint64_t records;
    int64_t first_step, last_step, seen_last_step; /* the steps compared; the last step with records */
    double step_ns, mean_step_ns; /* median and mean over steps of the self time of all calls */
} diff_run_t;

typedef struct diff {
    diff_run_t base, new_;
    diff_row_t *rows; /* sorted: beyond noise first, then the rest; each the largest change first */
    size_t count;
    double step_change_pct, step_p_value; /* the step time's median change, and its test */
    double alpha, min_change_pct, fail_above_pct; /* fail_above_pct < 0: no --fail-above */
    int failed;
} diff_t;

int report_parse_diff_option(const char *name, size_t name_len, const char *value, int argc, options_t *o,
                             FILE *err);
int report_diff_run(const options_t *o, diff_t *d, FILE *err); /* reads both runs; 0, or 1 after a message */
void report_diff_write_json(FILE *out, const diff_t *d);       /* the whole diff, as --format json prints it */
int report_diff_write_html(const diff_t *d, const char *path, FILE *err); /* --html with --diff; 0, or 1 */
const char *report_diff_verdict_name(diff_verdict_t v);
void report_diff_free(diff_t *d);
int report_diff_main(const options_t *o, FILE *out, FILE *err);
int report_keep_row(report_t *r, const tw_row_t *row); /* aggregate.c's filters, for diff.c's own pass */

#endif
