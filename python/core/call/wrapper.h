/* SPDX-License-Identifier: MIT */
/*
 * The wrapper object, shared by the two files of the wrapper: wrapper.c (the hot path) and wrap.c
 * (the types, and making wrappers). Private to the extension module.
 */
#ifndef TW_CORE_WRAPPER_H
#define TW_CORE_WRAPPER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *wrapped;   /* the original callable (strong) */
    vectorcallfunc call; /* wrapped's own vectorcall entry, where it can never change; else NULL */
    PyObject *dict;      /* instance __dict__, created on demand */
    PyObject *weakrefs;
    uint32_t api_id;
    uint32_t kind;       /* TW_KIND_*: what the model watch looks at around a call (hooks.h) */
    uint32_t flops_kind; /* tw_flops_kind_t: its FLOP formula (flops.h), TW_FLOPS_NONE for most */
} tw_wrapper_object;

/* The wrappers' vectorcall entry: the profiled call (wrapper.c). */
PyObject *tw_wrapper_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* Suspends recording on the calling thread while the profiler runs its own Python code. */
void tw_pause_thread(void);
void tw_resume_thread(void);

/* The innermost recorded call in progress on this thread, the outermost one and its site: 1, or 0 if none. */
int tw_current_call(uint64_t *call_id, uint64_t *outer_id, uint32_t *outer_site);

#endif
