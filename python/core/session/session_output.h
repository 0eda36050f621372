/* SPDX-License-Identifier: MIT */
/* What a Session gives back (session_output.c; not public API): its methods of the same names. */
#ifndef TW_PY_SESSION_OUTPUT_H
#define TW_PY_SESSION_OUTPUT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *tw_session_records(PyObject *op, PyObject *unused);
PyObject *tw_session_sites(PyObject *op, PyObject *unused);
PyObject *tw_session_stats(PyObject *op, PyObject *unused);
PyObject *tw_session_add_stream(PyObject *op, PyObject *args);
PyObject *tw_session_stream_write(PyObject *op, PyObject *args);
PyObject *tw_session_stream_stats(PyObject *op, PyObject *arg);

#endif
