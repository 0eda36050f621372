/* SPDX-License-Identifier: MIT */
/*
 * The hot path's entry (wrapper.c) and what it offers on the calling thread. Private to the
 * extension module; the wrapper object's layout is wrapper_object.h's.
 */
#ifndef TW_CORE_WRAPPER_H
#define TW_CORE_WRAPPER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "wrapper_object.h"


/* The wrappers' vectorcall entry: the profiled call (wrapper.c). */
PyObject *tw_wrapper_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* Suspends recording on the calling thread while the profiler runs its own Python code. */
void tw_pause_thread(void);
void tw_resume_thread(void);

/* The innermost recorded call in progress on this thread, the outermost one and its site: 1, or 0 if none. */
int tw_current_call(uint64_t *call_id, uint64_t *outer_id, uint32_t *outer_site);

#endif
