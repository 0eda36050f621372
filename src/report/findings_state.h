/* SPDX-License-Identifier: MIT */
/*
 * The findings' state (not public), types only: what the pass (findings.c) fills and settle reads: the
 * step anatomy (findings_anatomy.c), the catalogue's rules (findings_catalogue.c; findings_rules.c,
 * findings_generic.c, findings_gpu.c) and their shared helpers (findings_tally.c). Each of those files
 * declares what it defines in a header of its own.
 */
#ifndef TW_REPORT_FINDINGS_STATE_H
#define TW_REPORT_FINDINGS_STATE_H

#include <stdint.h>

#include "cli.h"
#include "findings_types.h"
#include "findings_series.h"
#include "groups.h"
#include "sink.h"
#include "site_texts.h"

#define FIND_DEPTH 64       /* calls deeper than this are counted as if at this depth */
#define FIND_THREADS 256    /* threads followed; the rows of more are still counted by API rules */
#define FIND_STEPS 65536    /* steps whose times are kept (drift, the anatomy) */
#define SMALL_CALL_NS 5000  /* "a small operation": a call with nothing inside under 5 us */
#define WHERE_TEXT_MAX 300
#define SITE_CACHE 1024     /* lines remembered (a power of two): a row's line is looked up once */
#define LEVEL_RUNS 32       /* distinct keys whose calls a level follows (the program's loops): a forward
                            * calls a dozen modules and functions before its loop */
#define SWITCHES_MAX 16     /* the catalogue's settings followed */
#define FINDINGS_NEVER 2.0  /* a severity threshold no share reaches */

/* Runs of calls of one key at a level: the calls inside one invocation of their caller. */
typedef struct level_run {
    series_entry_t *entry;
    uint32_t count;
    uint64_t cost_ns;
    long lead; /* the leading size of the last call's first tensor (0: none) */
} level_run_t;

/* What the calls inside one call did (the rule counters of a subtree). */
typedef struct subtree {
    uint32_t rows, foreach_calls, fused_calls, inplace_calls, fills, conv_bias;
    uint64_t fill_ns;
    uint64_t forward_ns, backward_ns; /* in the outermost module forwards and backward calls inside */
    uint32_t nruns;
    level_run_t runs[LEVEL_RUNS]; /* its calls (a level's: its rows' parent's children), [0, nruns) set:
                                   * last, so that clearing a level clears what comes before it */
} subtree_t;

/* A convolution whose output the next batch norm may read (its shape, as an argument summary writes
 * it: "f32[4,8,6,6]@cpu"). */
typedef struct pending_conv {
    int set;
    char shape[96];
    size_t shape_len;
    char module[128];
    char where[WHERE_TEXT_MAX + 1]; /* the convolution's line (the norm's may be the model call's, when the
                                     * norm's own forward is a private class's and not recorded) */
    size_t where_len;
} pending_conv_t;

/* The parts of a step, on one thread (findings.h's PART_*), and the settings on during it. */
typedef struct step_parts {
    uint64_t ns[PARTS];
    uint32_t switches; /* bit k: the catalogue's switch k was on at one of the step's calls */
    int used;
} step_parts_t;

#define BATCH_LEADS 8
#define DATASET_PIDS 64

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
    pending_conv_t conv;
    step_parts_t *parts; /* by step, [0, nparts) */
    uint64_t nparts;
    int grad_off;        /* no_grad / inference_mode contexts open (outermost calls) */
    int eval_mode;       /* the last outermost Module.eval() / train(False) not undone by train() */
    char eval_class[128]; /* the class it was called on */
    /* the leading sizes (2 or more) of the first tensors its module forwards were given, the first
     * BATCH_LEADS: the batches a loop of the program's may go over one sample at a time */
    long batch_leads[BATCH_LEADS];
    unsigned nbatch_leads;
    /* DataLoader iterators it made (DataLoader.__iter__: an epoch's start, its worker processes started
     * there unless persistent) and the batch each one gave first (the wait for those workers) */
    uint64_t loader_iters, loader_iter_ns, first_batches, first_batch_ns;
    uint64_t startup_ns_first; /* the first iterator's: its time and its first batch's */
    uint64_t last_batch_ns;    /* the latest next()'s: an epoch's last, its StopIteration, shuts the workers down */
    uint64_t ends_ns;          /* the iterators' last next() before another iterator was made */
    int first_batch_pending; /* an iterator made, its first batch not yet given */
    char loader_where[WHERE_TEXT_MAX]; /* the line that made the costliest iterator */
    uint64_t loader_where_ns;          /* and its cost */
} thread_state_t;

/* The tallies keyed by a line alone, whose groups a site_line_t keeps. */
enum { LINE_SMALL_OPS, LINE_DATASET, LINE_LOADER, LINE_COMPILES, LINE_FILLS, LINE_KEPT, LINE_EVAL_GRAD, LINE_TALLIES };

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
    int library; /* in an installed package's or the interpreter's file (site_texts.h) */
    group_t *line[LINE_TALLIES][2];
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

/* A rule of the catalogue: one entry of the table (findings_catalogue.c). */
typedef struct rule rule_t;
typedef struct findings findings_t;
typedef struct settle_context settle_context_t;
typedef void (*rule_fn)(findings_t *f, const rule_t *rule, const settle_context_t *c);

/* How a setting is switched by a call (the generic settings rule). */
typedef enum {
    SWITCH_NONE = 0,
    SWITCH_FIRST_ARG, /* on when the call's first argument is True, off when False */
    SWITCH_ENTER,     /* on at the call, off at its pair (apis_off) */
    SWITCH_ONE_THREAD,  /* on when the first argument is 1 (torch.set_num_threads(1)) on a host of more CPUs */
    SWITCH_MORE_THREADS /* on when the first argument is more than the host's CPUs; on from the start when
                         * torch's threads were (OMP_NUM_THREADS) */
} switch_kind_t;

struct rule {
    const char *kind;    /* a stable identifier */
    rule_fn evaluate;    /* settle: adds the rule's finding(s) to f->found */
    double medium, high; /* severity from the share of a typical step (or the run) */
    const char *apis;    /* generic rules: the APIs they tally, '|'-separated, a trailing '*' a prefix */
    switch_kind_t switch_kind;
    const char *apis_off;  /* SWITCH_ENTER: the calls that switch it off */
    int affects;           /* settings: the parts of a step they slow (bit PART_*); 0: the whole step */
    const char *message;   /* the generic rules' message (their own format, see findings_generic.c) */
    const char *fix;
    const char *source;    /* where the advice comes from */
};

/* The GPU's busy time by bucket of time from base, and its kernels (findings_gpu.c). */
typedef struct gpu_time {
    uint64_t *busy; /* GPU_BUCKETS of them, NULL before the first GPU record */
    uint64_t base, width;
    uint64_t kernels, tiny_kernels;
} gpu_time_t;

/* A process-wide setting followed through the calls that switch it (the catalogue's switches):
 * whether it is on, and the line that last switched it on. */
typedef struct switch_state {
    int on;
    char where[WHERE_TEXT_MAX + 1];
    uint64_t calls_on; /* calls that switched it on */
} switch_state_t;

typedef struct findings {
    report_sink_t sink;
    const options_t *o;
    const report_sites_t *sites;
    thread_state_t **threads; /* FIND_THREADS slots, each allocated when its thread's first row comes */
    thread_state_t *last_thread; /* the last row's: rows come in runs of one thread */
    site_line_t *lines;          /* SITE_CACHE of them */
    /* the processes whose Dataset __getitem__ made calls (a DataLoader's workers, or the main process), the
     * first DATASET_PIDS, and the self time of those calls in each */
    int64_t dataset_pids[DATASET_PIDS];
    uint64_t dataset_pid_ns[DATASET_PIDS];
    unsigned ndataset_pids;
    int dataset_pids_full; /* more processes than that made some */
    tally_t loader_wait, dataset_lines, gaps, small_ops, single_tensor_opt, fills, conv_bn, compiles,
        kept_bytes, eval_grad; /* kept_bytes: per line, bytes its outermost calls allocated and did not free */
    series_table_t series;
    gpu_time_t gpu;
    int64_t cpus, torch_threads; /* the manifest's (report_findings_use_host); 0: not said */
    int fp32_precision_lowered;
    double step_growth;  /* settle: the whole step's last quarter over its first (rule_growing_line) */
    double elems_growth; /* and the median key's tensors' growth */
    double elems_up_share; /* and the median key's share of steps whose tensors outgrew the step before's */ /* torch.set_float32_matmul_precision("high" or "medium") was called */
    switch_state_t switches[SWITCHES_MAX];
    const rule_t *switch_rules[SWITCHES_MAX]; /* the catalogue's settings, switches[k]'s rule */
    size_t nswitch_rules;
    unsigned char switch_lengths[256]; /* lengths of their APIs' names: most rows are no switch */
    struct switch_name {            /* their APIs, split once */
        const char *name;
        size_t len;
        uint8_t rule; /* index in switch_rules */
        uint8_t off;  /* one of the rule's apis_off */
    } switch_names[4 * SWITCHES_MAX];
    size_t nswitch_names;
    int64_t switches_pid; /* the process whose settings switches follows (the first's) */
    int have_memory; /* some row carries allocator reports */
    uint64_t leaf_calls[2], small_calls[2], small_ns[2]; /* all steps, the first step */
    int skip_first; /* settle: the first step (warm-up: imports, lazy inits) is left out of the rules */
    step_span_t *steps; /* of every thread's outermost calls: drift uses the busiest thread's only */
    uint64_t max_step;
    int oom;
    int have_gpu; /* GPU records among the inputs */
    report_sink_t *ranks; /* the ranks' analysis (NULL: one process) */
    int ranks_done;       /* its finding added (after every sink settled) */
    finding_t *found;
    size_t nfound;
    double run_ms;
    uint64_t nsteps;
    step_anatomy_t anatomy;
} findings_t;

/* What settle knows before the rules run (findings_catalogue.c fills it): the steps' thread, the
 * run's time and steps after the first, and a typical step (findings_anatomy.c). */
typedef struct settle_context {
    const thread_state_t *thread; /* the steps' thread (NULL: no outermost call was read) */
    uint64_t run_ns;
    double per_step; /* steps counted (at least 1) */
    int typical;     /* typical_* below are set (3 steps at least) */
    double typical_gap, typical_wait, typical_step;
    /* the median over the steps of each one's Python gap over its span: a pause in a few steps' gaps (the
     * process preempted there on a busy machine) moves the middle steps' mean, not this */
    double median_gap_share;
    double median_wait_share; /* and of the DataLoader's next() (a wait preempted in a few steps, the same) */
} settle_context_t;

#endif
