/* SPDX-License-Identifier: MIT */
/* What the findings say (findings.c makes them, findings_output.c prints them, the HTML page shows them):
 * a finding, and the step's anatomy. Types only. */
#ifndef TW_REPORT_FINDINGS_TYPES_H
#define TW_REPORT_FINDINGS_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* The parts of a step (the step anatomy): the wait for data, the model's forward (outermost module
 * calls: training, then evaluation ones, under no_grad or in eval mode, apart), backward, the
 * optimizer, the other calls into torch, and Python between calls into torch. */
enum { PART_DATA, PART_FORWARD, PART_BACKWARD, PART_OPTIMIZER, PART_EVAL, PART_OTHER, PART_PYTHON, PARTS };

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

#endif
