/* SPDX-License-Identifier: MIT */
/* The record reader for Python (record_reader.c; not public API). */
#ifndef TW_PY_RECORD_READER_H
#define TW_PY_RECORD_READER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core_state.h"

/* RecordReader (into _core and its state), record_kind(), read_sites(). 0, or -1 with an exception. */
int tw_reader_add_functions(PyObject *core, tw_core_state *state);

#endif
