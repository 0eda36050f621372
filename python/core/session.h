/* SPDX-License-Identifier: MIT */
/*
 * The Session object (not public API), shared by session.c (its life: new, start, stop, the type)
 * and session_output.c (what it gives back: records, sites, counters, and its row streams).
 */
#ifndef TW_PY_SESSION_H
#define TW_PY_SESSION_H

#include "module.h"

typedef enum { SESSION_NEW, SESSION_ACTIVE, SESSION_STOPPED } session_state_t;

typedef struct {
    PyObject_HEAD
    tw_recorder_t *recorder;
    tw_clock_t clock;
    session_state_t state;
    tw_config_t settings;  /* the validated configuration, typed (config.h) */
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
    PyObject *tracer;      /* torchwrapper._trace.Tracer or None */
    tw_hooks_t hooks;      /* the tracer's bound methods (strong references), taken at start */
    /* extra record streams of the writer (tracing: "stats", "updates"), owned by the writer */
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
    char gpu_reason[1024]; /* why GPU timing is off, "" when on or not asked for */
    tw_sites_mode_t sites_mode;
    tw_sites_t *sites;     /* call sites (sites.h), NULL with sites "off"; the writer writes it */
    /* backward nodes (config aten "backward", backward.h) */
    int aten_backward;       /* asked for (aten "backward" or "all") */
    int aten_operators;      /* aten "all": every operator a record too */
    char *torch_layer;       /* the libtorch layer's path, NULL when it was not built */
    char *torch_version;     /* torch.__version__ of the running torch */
    int backward_on;         /* recording them */
    char backward_reason[512]; /* why not, "" when on or not asked for */
    uint64_t backward_unlinked; /* nodes whose forward call was not found */
    /* FLOPs per call (config flops, flops.h) */
    int flops_on;
    char flops_reason[512]; /* why not, "" when on or not asked for */
} tw_session_object;

/* session_output.c: the methods of the same names. */
PyObject *tw_session_records(PyObject *op, PyObject *unused);
PyObject *tw_session_sites(PyObject *op, PyObject *unused);
PyObject *tw_session_stats(PyObject *op, PyObject *unused);
PyObject *tw_session_add_stream(PyObject *op, PyObject *args);
PyObject *tw_session_stream_write(PyObject *op, PyObject *args);
PyObject *tw_session_stream_stats(PyObject *op, PyObject *arg);

#endif
