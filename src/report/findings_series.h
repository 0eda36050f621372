/* SPDX-License-Identifier: MIT */
/*
 * The findings' per-line series (findings_series.c): for each (process, thread, line, API, module)
 * of the calls read, what they cost a step over the run, how often the program itself called them,
 * and the few argument traits the rules ask for. The step anatomy and the generic rules
 * (findings_catalogue.c) read them at settle; memory is one entry a distinct key, never per call
 * or per step (SERIES_BINS buckets of steps, widened as the run grows).
 */
#ifndef TW_REPORT_FINDINGS_SERIES_H
#define TW_REPORT_FINDINGS_SERIES_H

#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/reader.h"

#define SERIES_BINS 64 /* buckets of steps: step s (s >= 1) in bucket (s - 1) / width */

typedef struct series_entry {
    uint64_t hash;
    int64_t pid;
    uint64_t tid, site;
    char *api, *module; /* NUL-terminated copies */
    size_t api_len, module_len;
    int node;           /* an autograd node (charged to its forward call's line) */
    int library;        /* its line is in an installed package's or the interpreter's file */
    int dataset;        /* its line is in a Dataset's __getitem__ */
    int outermost;      /* some of its calls were outermost (depth 0) */
    int module_forward; /* an nn.Module's forward */
    uint64_t calls, self_ns, cost_ns;            /* all steps */
    uint64_t first_calls, first_self, first_cost; /* the first step's (taken out at settle) */
    /* calls the program made itself (not torch's code inside another call at this line): their
     * number and cost, and the most of them one invocation of their caller made (a step's, for
     * outermost calls): a Python loop at the line */
    uint64_t program_calls, program_cost;
    uint32_t max_run;
    uint64_t program_gap_ns, first_gap_ns; /* the Python before its outermost calls (all, the first step's) */
    int64_t run_step;   /* outermost calls: the step run_calls counts */
    uint32_t run_calls;
    int64_t eval_step;     /* a module forward: the last step it ran in as an evaluation (outermost, under no_grad or
                            * its model in eval mode; -1: none) */
    uint64_t eval_steps;   /* and the steps it did */
    int64_t sample_step;   /* the step sample_calls counts: the program's calls in it, at any depth (-1: none) */
    uint32_t sample_calls;
    uint64_t steps_seen; /* distinct steps after the first with a call (rows come in step order) */
    int64_t last_step;
    uint64_t detail_calls;        /* calls in the steps whose calls carry argument summaries (detail) */
    uint64_t f64_calls, f64_ns;   /* calls whose tensors are float64 */
    int dtype_setter;             /* an API that can ask for a dtype (.to, set_default_dtype, torch.tensor) */
    int f64_made;                 /* a call that asked for float64 (torch.float64 / torch.double among its
                                   * arguments: set_default_dtype, .to, torch.tensor) */
    uint64_t f32_gpu_calls, f32_gpu_ns; /* calls with float32 CUDA tensors */
    uint64_t single_calls;        /* calls whose first tensor has a leading dimension of 1 */
    uint64_t per_sample_runs;     /* a module: runs of as many calls as their caller's batch, on a sample each;
                                   * other calls: steps with as many of the program's calls as a batch its
                                   * models were given (findings.c count_program_step) */
    uint64_t shape_changes;       /* calls whose tensors' shapes differed from the previous call's */
    uint64_t last_args_hash;
    /* the last call's argument summary (when short) and what read_tensors read of it: most calls of a
     * key pass the same shapes as the one before, and are not read again */
    char last_args[96];
    size_t last_args_len; /* 0: none kept */
    struct series_tensors {
        uint64_t shapes_hash;
        double elements, items;
        int f64, f32_cuda, first_single;
    } last_tensors;
    /* step after step, the elements of the tensors passed: steps whose total was above the step before's
     * (a list grown every step and cleared every epoch grows in most steps, not over the run) */
    double elems_step, elems_before;
    int64_t elems_step_of;   /* the step elems_step counts (-1: none yet) */
    uint32_t elems_up, elems_steps; /* steps above the one before, steps compared */
    /* and the tensors passed, counted (a list of tensors appended to every step: its length grows, where
     * inputs sorted by length grow their sizes) */
    double items_step, items_before, calls_step, calls_before;
    uint32_t items_up;
    double elems_min, elems_max, items_min, items_max; /* over the steps compared: how far they grew */
    uint32_t list_up; /* steps whose calls were given more tensors each than the step before's: a list
                       * argument that grows (the cause), not a loop over a growing tensor (its effect) */
    /* by bucket of steps (the first step left out): self time, and the elements of the tensors passed
     * (a tensor or list that grows every step shows there whatever the machine's load does to time) */
    uint64_t bin_self[SERIES_BINS];
    double bin_elems[SERIES_BINS];
} series_entry_t;

typedef struct series_table {
    series_entry_t **slots; /* NULL: an empty slot */
    size_t capacity;        /* a power of two; 0 before the first entry */
    size_t count;
    uint64_t bin_width; /* steps a bucket */
    uint64_t last_step; /* the highest step seen */
    /* the steps whose calls carry argument summaries (config detail "sampled": the first
     * detail_first, then one in detail_every; detail_every 0: every step): a bucket's elements are
     * averaged over those */
    int64_t detail_first, detail_every;
    int oom;
} series_table_t;

/* What e's counts from argument summaries (f64_ns, single_calls, shape_changes, ...) are multiplied
 * by to stand for all of its calls: 1, unless detail is sampled (calls / calls in the steps with it). */
double report_series_detail_scale(const series_entry_t *e);

/* Whether step's calls carry the detail (argument summaries): t's detail_first and detail_every. */
int report_series_detail_step(const series_table_t *t, int64_t step);

/* The entry of the row's key, created if missing; NULL when out of memory. */
series_entry_t *report_series_get(series_table_t *t, const tw_row_t *row, int node);

/* Counts the row (its step, self and cost) into e. */
void report_series_add(series_table_t *t, series_entry_t *e, const tw_row_t *row);

/* e's calls counted as the program's own: count calls costing cost_ns in one invocation of their
 * caller. */
void report_series_program(series_entry_t *e, uint32_t count, uint64_t cost_ns);

/* What e's calls cost (SERIES_SELF: self time; SERIES_ELEMS: tensor elements passed) a step in the
 * first and the last quarter of the run's buckets (the medians of their buckets' means), and whether
 * it rises through the run: every bucket of the last quarter above the first quarter's median, and each
 * middle quarter's median apart from its neighbouring end quarter's by a part of the rise (a ramp, not
 * one step up); -1 when the run has fewer than 8 buckets' worth of steps. */
enum { SERIES_SELF, SERIES_ELEMS };
int report_series_ends(const series_table_t *t, const series_entry_t *e, int which, double *first, double *last,
                       int *rising);

/* The first tensor of an argument summary: its leading size and its number of dimensions; 0 when it
 * has none (a module instance and numbers before it are skipped). */
int report_series_first_tensor(tw_str_t args, long *lead, int *ndim);

void report_series_free(series_table_t *t);

#endif
