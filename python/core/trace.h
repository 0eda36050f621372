/* SPDX-License-Identifier: MIT */
/* Model tracing's functions of _core (trace.c; not public API): the tracer's access to the tables
 * (trace_tables.h), module paths, the calls in progress, and the KIND_* constants. */
#ifndef TW_PY_TRACE_H
#define TW_PY_TRACE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Adds table_set(), table_get(), ..., current_call() and the KIND_* and MODULE_ROOT constants. */
int tw_trace_add_functions(PyObject *core);

#endif
