/* SPDX-License-Identifier: MIT */
/* Discovery's first pass (scan.c; not public API): _core.scan_modules(). */
#ifndef TW_PY_SCAN_H
#define TW_PY_SCAN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *tw_scan_modules(PyObject *core, PyObject *const *args, Py_ssize_t nargs);

#endif
