/* SPDX-License-Identifier: MIT */
/* The exception in flight kept aside around the profiler's own work (not public API): the wrappers,
 * argument summaries, call sites and sessions run Python code of their own while the caller's
 * exception may be set. */
#ifndef TW_PY_EXC_H
#define TW_PY_EXC_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/*
 * The exception in flight, kept aside around profiler work and put back untouched (the caller's code
 * may be handling it). 3.12+ holds one object; 3.11 the (type, value, traceback) triple.
 */
typedef struct {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc;
#else
    PyObject *type, *value, *traceback;
#endif
} tw_saved_exc_t;

static inline void tw_exc_save(tw_saved_exc_t *saved)
{
#if PY_VERSION_HEX >= 0x030C0000
    saved->exc = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&saved->type, &saved->value, &saved->traceback);
#endif
}

/* Puts the saved exception back (steals it); any exception raised since is dropped first. */
static inline void tw_exc_restore(tw_saved_exc_t *saved)
{
    PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(saved->exc);
#else
    PyErr_Restore(saved->type, saved->value, saved->traceback);
#endif
}

#endif
