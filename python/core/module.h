/* SPDX-License-Identifier: MIT */
/* Shared declarations of the torchwrapper._core extension module. */
#ifndef TW_PY_MODULE_H
#define TW_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchwrapper/torchwrapper.h"

typedef struct {
    PyTypeObject *wrapper_type;        /* Wrapper: calls never bind (builtins, partials, ...) */
    PyTypeObject *method_wrapper_type; /* MethodWrapper: binds like a function (x.f(...)) */
    PyTypeObject *session_type;
} tw_module_state;

/*
 * The profiling session that wrappers record into. Process-wide on purpose: the wrappers are
 * installed into torch, which is one per process, and a wrapper's hot path must not look anything up
 * to find it. Guarded by the GIL: it changes only in Session.start/stop, and the hot path reads it with
 * the GIL held (before and after calling through), so a session cannot vanish under a recording call.
 */
typedef enum { TW_ARGS_NONE = 0, TW_ARGS_SUMMARY = 1, TW_ARGS_REPR = 2 } tw_args_mode_t;

typedef struct {
    uint64_t gen;                  /* 0: no session; else a number unique to this session */
    tw_recorder_t *recorder;
    tw_clock_source_t clock_source;
    tw_args_mode_t args_mode;
    PyTypeObject *tensor_type;     /* torch._C.TensorBase when torch is imported (held by the session) */
    PyObject *session;             /* strong reference to the active Session object */
    const tw_gpu_hooks_t *gpu;     /* CUPTI's push/pop while GPU timing is on; else NULL */
} tw_active_t;

int tw_args_init(void);

/* Writes a summary of a call's arguments (summary or repr mode) into buf; returns its length. */
uint32_t tw_summarize_args(char *buf, size_t size, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                           tw_args_mode_t mode);

extern tw_active_t tw_active;

int tw_wrapper_add_types(PyObject *module, tw_module_state *state);
int tw_session_add_type(PyObject *module, tw_module_state *state);
PyObject *tw_wrap(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *tw_install(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_restore(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_scan_modules(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* Suspends recording on the calling thread while the profiler runs its own Python code. */
void tw_pause_thread(void);
void tw_resume_thread(void);

#endif
