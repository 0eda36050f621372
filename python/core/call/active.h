/* SPDX-License-Identifier: MIT */
/*
 * The active session's state (not public API): what every wrapper's hot path reads to record, owned
 * by active.c, the only file that writes it (through the setters below, at Session.start and stop,
 * at step boundaries, and when call sites start and end). Guarded by the GIL.
 */
#ifndef TW_PY_ACTIVE_H
#define TW_PY_ACTIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "torchwrapper/torchwrapper.h"

#include "watch/hooks.h"

/*
 * The profiling session that wrappers record into. Process-wide on purpose: the wrappers are
 * installed into torch, which is one per process, and a wrapper's hot path must not look anything up
 * to find it. Guarded by the GIL: it changes only in Session.start/stop, and the hot path reads it with
 * the GIL held (before and after calling through), so a session cannot vanish under a recording call.
 */
typedef struct {
    /* ---- read by every recorded call: kept first, in the struct's first 64 bytes (tw_active is
     * aligned to 64), so that a call whose lines torch's code evicted fetches one line of them, not
     * five (callgrind's cache simulation, a BERT step: the fields were spread over 0x0..0x100) ---- */
    uint64_t gen;                  /* 0: no session; else a number unique to this session */
    /* 1 outside the schedule's active and warmup steps when the summary counts active steps only:
     * wrappers call through, recording nothing (optimizer steps are still watched for the step's
     * end). Flipped at step boundaries (active.c), read by every call right after gen. */
    uint32_t idle;
    tw_clock_source_t clock_source;
    tw_args_mode_t args_mode;
    tw_sites_mode_t sites_mode;    /* call sites recorded (call_sites.c) */
    uint32_t detail;               /* the current step has the costly detail (own_cost.h counts it apart) */
    uint32_t sites_overflow_id;    /* the sites table's id of the sites past its cap */
    const tw_gpu_hooks_t *gpu;     /* CUPTI's push/pop while GPU timing is on; else NULL */
    /* aten "backward": the autograd sequence number of this thread (backward.h), read when a call
     * begins and ends to link the nodes it creates to it; NULL when backward nodes are off */
    uint64_t (*seq_peek)(void);
    tw_hooks_t hooks;              /* the model watch's; kinds (its first field, at 48) == 0 when none */
    /* ---- the rest: steps, configuration, the session's objects ---- */
    uint32_t manual_steps;         /* the program marks steps (Session.step()): optimizer steps do not */
    uint32_t step;                 /* the current step, counted from 0 (also in the recorder) */
    uint32_t step_recorded;        /* the schedule or a capture records the current step's calls */
    tw_args_mode_t args_configured; /* the session's args mode; args_mode is NONE outside active steps */
    uint32_t detail_sampled;       /* detail "sampled": the costly detail in some steps only (tw_detail_step) */
    uint32_t flops_configured;     /* the session measures FLOPs (in the steps with detail) */
    uint64_t (*seq_peek_configured)(void); /* aten "backward"'s, in the steps with detail (seq_peek) */
    tw_schedule_t schedule;
    /* On-demand capture (config on_demand): the capture recording, steps [capture_from, capture_to),
     * active whatever the schedule; capture_to == 0: none. */
    uint64_t capture_from, capture_to;
    tw_ondemand_t *ondemand;       /* NULL: on_demand off */
    tw_writer_t *writer;           /* the session's, NULL when records stay in memory */
    tw_recorder_t *recorder;
    PyTypeObject *tensor_type;     /* torch._C.TensorBase when torch is imported (held by the session) */
    PyObject *session;             /* strong reference to the active Session object */
    /* GPU timing's session, whose CUPTI activities are on in the steps recorded (warm-up, active,
     * a capture's) and the one after each, off in the others; NULL when GPU timing is off */
    tw_gpu_t *gpu_session;
    int gpu_recording;
    tw_sites_t *sites;             /* the session's table of them, while sites_mode != OFF */
} tw_active_t;

extern tw_active_t tw_active;

/* ---- the session (Session.start and stop) ---- */

/* What a session that starts recording puts in place for the wrappers. */
typedef struct {
    tw_recorder_t *recorder;
    tw_clock_source_t clock_source;
    tw_args_mode_t args_mode;
    PyTypeObject *tensor_type;
    const tw_hooks_t *hooks;       /* borrowed: the session holds them until it is deallocated */
    tw_writer_t *writer;
    tw_ondemand_t *ondemand;
    const tw_schedule_t *schedule;
    int detail_sampled;            /* config detail "sampled" */
    const tw_gpu_hooks_t *gpu;
    tw_gpu_t *gpu_session;
    PyObject *session;             /* a new reference is taken */
} tw_active_config_t;

/* Makes c's session the active one, at step 0; returns its generation (tw_active.gen). */
uint64_t tw_active_begin(const tw_active_config_t *c);

/* aten "backward": the function that reads the autograd sequence number (NULL: off). */
void tw_active_set_seq_peek(uint64_t (*seq_peek)(void));

/* Config flops: the wrappers of APIs with a FLOP formula measure their calls (flops.h). */
void tw_active_set_flops(int on);

/* Wrappers stop recording (gen 0); forgets the session's recorder, writer, hooks and GPU hooks;
 * returns the session's reference (the caller drops it). */
PyObject *tw_active_end(void);

/* Call sites (call_sites.c): the table and mode recorded into, or none. */
void tw_active_set_sites(tw_sites_mode_t mode, tw_sites_t *sites);

/* In a forked child: CUPTI must not be called there (gpu.h). */
void tw_active_forget_gpu(void);

/* ---- steps ---- */

/* Sets tw_active's step fields for a session that starts recording at step 0 under schedule. */
void tw_steps_start(const tw_schedule_t *schedule, tw_args_mode_t args_mode, int detail_sampled);

/* Ends the current step (with the GIL held, in the active session): the next one begins, and the
 * schedule says whether wrappers record in it. */
void tw_step_end(void);

/* Session.step() of the active session: from now on only the program's marks end steps. The first
 * mark ends a step only if no optimizer step has ended one (then the current step goes on). */
void tw_step_mark(void);
/* Only tw_step_mark() ends steps from now on (optimizer steps no longer do); the step goes on. */
void tw_steps_manual(void);

#endif
