/* SPDX-License-Identifier: MIT */
/* Named ranges (ranges.c; not public API): _core.range_begin(name) and _core.range_end(). */
#ifndef TW_PY_RANGES_H
#define TW_PY_RANGES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *tw_range_begin(PyObject *core, PyObject *name);
PyObject *tw_range_end(PyObject *core, PyObject *unused);

#endif
