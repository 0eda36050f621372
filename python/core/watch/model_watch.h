/* SPDX-License-Identifier: MIT */
/* The model watch's functions of _core (model_watch.c; not public API): its access to the tables
 * (model_watch_tables.h), module paths, and the KIND_* constants. */
#ifndef TW_PY_MODEL_WATCH_H
#define TW_PY_MODEL_WATCH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Adds table_set(), table_get(), ..., module_path() and the KIND_* and MODULE_ROOT constants. */
int tw_model_watch_add_functions(PyObject *core);

#endif
