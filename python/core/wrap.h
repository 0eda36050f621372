/* SPDX-License-Identifier: MIT */
/* The wrapper types and making wrappers (wrap.c; not public API). */
#ifndef TW_PY_WRAP_H
#define TW_PY_WRAP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core_state.h"

/* Makes the Wrapper and MethodWrapper types into _core and its state. 0, or -1 with an exception. */
int tw_wrapper_add_types(PyObject *core, tw_core_state *state);

/* _core.wrap() and _core.wrap_many(). */
PyObject *tw_wrap(PyObject *core, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *tw_wrap_many(PyObject *core, PyObject *const *args, Py_ssize_t nargs);

#endif
