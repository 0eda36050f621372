/* SPDX-License-Identifier: MIT */
/* Bulk install and restore (patch.c; not public API): _core.install() and _core.restore(). */
#ifndef TW_PY_PATCH_H
#define TW_PY_PATCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *tw_install(PyObject *core, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_restore(PyObject *core, PyObject *const *args, Py_ssize_t nargs);

#endif
