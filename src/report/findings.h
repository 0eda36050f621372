/* SPDX-License-Identifier: MIT */
/*
 * tw-report --findings (findings.c, findings_output.c): what is wrong in a run, where (the program's
 * lines), what it costs and how to fix it, from the call records in the one pass every report makes.
 *
 * A sink of the pass that keeps per thread a few counters per call depth: records are written when a
 * call returns, so the calls inside a call are the rows of its thread read just before it, deeper
 * than it; each row closes the subtree above it (its counts) in O(1), with no table of pending
 * calls. Memory is flat: per thread, per step and per (rule, line), never per call.
 */
#ifndef TW_REPORT_FINDINGS_H
#define TW_REPORT_FINDINGS_H

#include "cli.h"
#include "sink.h"
#include "site_texts.h"

int report_findings_new(const options_t *o, const report_sites_t *sites, int have_gpu_files, report_sink_t **sink);

/* The parts of a step (the step anatomy): the wait for data, the model's forward (outermost module
 * calls: training, then evaluation ones, under no_grad or in eval mode, apart), backward, the
 * optimizer, the other calls into torch, and Python between calls into torch. */
enum { PART_DATA, PART_FORWARD, PART_BACKWARD, PART_OPTIMIZER, PART_EVAL, PART_OTHER, PART_PYTHON, PARTS };
extern const char *const report_part_names[PARTS];

#define ANATOMY_LINES 6
/* A typical step of the steps' thread: the mean of the middle half of its steps (the first left out),
 * its parts, and the program's lines that cost the most of it, with what each runs there. */
typedef struct step_anatomy {
    int valid;      /* 3 steps at least */
    uint64_t steps; /* the steps it is made of */
    double step_ms;
    double part_ms[PARTS];
    struct {
        char where[304]; /* "train.py:51 main" */
        char runs[128];  /* the call that costs the most there ("torch.save") */
        double share;    /* of a step */
        double ms;       /* a step */
        int library;     /* in an installed package's or the interpreter's file, not the program's */
    } lines[ANATOMY_LINES];
    size_t nlines;
} step_anatomy_t;

/* One finding, as the outputs print it. */
#define FINDING_WHERE_MAX 5
#define FINDING_EVIDENCE_MAX 8
typedef struct finding {
    const char *kind;     /* a stable identifier: input_bound, host_sync, ... */
    const char *severity; /* high, medium, low */
    double share;         /* of the run's time (the steps' thread), 0..1; <0: not a time */
    char *where[FINDING_WHERE_MAX]; /* the program's lines (or module paths), most costly first */
    size_t nwhere;
    const char *evidence_keys[FINDING_EVIDENCE_MAX];
    double evidence[FINDING_EVIDENCE_MAX];
    size_t nevidence;
    char message[512];
    char fix[512];
    const char *source; /* where the rule's advice comes from */
} finding_t;

/* The host's usable CPUs and torch's threads when profiling began, from the manifest (0: not said):
 * what the threads rules weigh torch.set_num_threads against. */
void report_findings_use_host(report_sink_t *findings, int64_t cpus, int64_t torch_threads);

/* The ranks' analysis (a --ranks sink, settled with the others) gives the straggler finding. */
void report_findings_use_ranks(report_sink_t *findings, report_sink_t *ranks);

/* The findings of a settled sink (most severe first), *count their number. */
const finding_t *report_findings_result(const report_sink_t *sink, size_t *count);

/* The typical step of a settled sink. */
const step_anatomy_t *report_findings_anatomy(const report_sink_t *sink);

/* The page's findings section (--html): the step's bar, then the findings (findings_output.c). */
void report_findings_write_html(const finding_t *findings, size_t count, const step_anatomy_t *anatomy, FILE *out);

/* Prints the anatomy and findings in o->format (table: text) (findings_output.c). */
void report_findings_print(const options_t *o, const finding_t *findings, size_t count,
                           const step_anatomy_t *anatomy, double run_ms, uint64_t steps, FILE *out);

/* The catalogue's rules, one a line: kind, severity thresholds, source (tw-report --rules). */
void report_findings_print_rules(FILE *out);

#endif
