/* SPDX-License-Identifier: MIT */
/* The state of the extension torchwrapper._core (not public API): its types, made by the files that
 * define them (wrap.c, session/session.c, record_reader.c) when the extension is executed (core.c). */
#ifndef TW_PY_CORE_STATE_H
#define TW_PY_CORE_STATE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyTypeObject *wrapper_type;        /* Wrapper: calls never bind (builtins, partials, ...) */
    PyTypeObject *method_wrapper_type; /* MethodWrapper: binds like a function (x.f(...)) */
    PyTypeObject *session_type;
    PyTypeObject *record_reader_type;  /* RecordReader (record_reader.c) */
} tw_core_state;

#endif
