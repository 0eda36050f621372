/* SPDX-License-Identifier: MIT */
/*
 * The Session object's layout (not public API), shared by session.c (its life: new, start, stop, the
 * type), session_features.c (what start starts and stop stops) and session_output.c (what it gives
 * back: records, sites, counters, and its row streams).
 */
#ifndef TW_PY_SESSION_OBJECT_H
#define TW_PY_SESSION_OBJECT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchwrapper/torchwrapper.h"

#include "call/own_cost.h"
#include "watch/hooks.h"

typedef enum { SESSION_NEW, SESSION_ACTIVE, SESSION_STOPPED } session_state_t;

/* What a session starts, in the order it starts them (session_features.c's table). */
typedef enum {
    TW_SESSION_MODEL_WATCH,    /* the model watch's hooks taken */
    TW_SESSION_WRITER,    /* file output (out_dir) */
    TW_SESSION_GPU,       /* GPU timing (CUPTI) */
    TW_SESSION_SITES,     /* call sites looked up */
    TW_SESSION_ONDEMAND,  /* on-demand capture's control */
    TW_SESSION_MEMORY,    /* the allocators' reports (config memory) */
    TW_SESSION_RECORDING, /* the wrappers record into this session (tw_active) */
    TW_SESSION_BACKWARD,  /* backward nodes (config aten) */
    TW_SESSION_FLOPS,     /* FLOPs per call (config flops) */
    TW_SESSION_SUMMARY,   /* tensor summaries by the libtorch layer (config args "summary") */
    TW_SESSION_FEATURES
} tw_session_feature_t;

typedef struct {
    PyObject_HEAD
    tw_recorder_t *recorder;
    tw_clock_t clock;
    session_state_t state;
    tw_config_t settings;  /* the validated configuration, typed (config_keys.h) */
    /* file output; out_dir == NULL keeps records in memory for records() */
    tw_writer_config_t config;
    const char *out_dir;   /* settings.out_dir */
    char *manifest_json;
    tw_writer_t *writer;
    tw_args_mode_t args_mode;
    tw_schedule_t schedule; /* the steps whose records are kept (also in config, for the writer) */
    int summary_only;       /* records "summary": no per-call records kept */
    uint64_t ondemand_steps; /* on_demand: steps of a capture asked without a number; 0: off */
    const char *ondemand_dir; /* on_demand's dir (settings'), NULL: out_dir/capture-N */
    tw_ondemand_t *ondemand; /* while recording */
    PyObject *tensor_type; /* torch._C.TensorBase, found at start, when args are summarized */
    PyObject *model_watch; /* torchwrapper._model_watch.ModelWatch or None */
    tw_hooks_t hooks;      /* the model watch's bound methods (strong references), taken at start */
    /* extra record streams of the writer (the model watch's: "stats", "updates"), owned by the writer */
    struct {
        char kind[TW_STREAM_KIND_MAX + 1];
        tw_writer_stream_t *stream;
    } streams[4];
    int stream_count;
    /* GPU timing */
    tw_gpu_mode_t gpu_mode;
    int gpu_device;        /* the caller found a CUDA device */
    char **cupti_paths;    /* NULL-terminated, PyMem_Raw; candidates for the CUPTI library */
    tw_gpu_t *gpu;         /* while GPU timing runs, and after stop for its counters */
    tw_sites_mode_t sites_mode;
    tw_sites_t *sites;     /* call sites (sites.h), NULL with sites "off"; the writer writes it */
    /* backward nodes (config aten "backward", backward.h) */
    int aten_backward;       /* asked for (aten "backward" or "all") */
    int aten_operators;      /* aten "all": every operator a record too */
    char *torch_layer;       /* the libtorch layer's path, NULL when it was not built */
    char *torch_version;     /* torch.__version__ of the running torch */
    uint64_t backward_unlinked; /* nodes whose forward call was not found */
    uint64_t gen;            /* the generation tw_active_begin gave this session */
    uint64_t started_ticks;  /* the clock when it began recording (the own cost's run time) */
    int own_known;           /* own is the stopped session's (own_cost.h) */
    tw_own_figures_t own;
    /* memory per call (config memory, memory.h) */
    int memory_asked;
    char memory_note[512];    /* what stop could not undo, "" when all was */
    /* What start started, in session_features.c's order (tw_session_feature_t); stop stops them in reverse. */
    struct {
        int on;               /* started (and, in a stopped session, was): stop undoes it */
        char reason[1024];    /* why it is off, "" when on or not asked for */
    } features[TW_SESSION_FEATURES];
} tw_session_object;

#endif
