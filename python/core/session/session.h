/* SPDX-License-Identifier: MIT */
/* Sessions (session.c; not public API): the Session type. Its object's layout is session_object.h. */
#ifndef TW_PY_SESSION_H
#define TW_PY_SESSION_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Makes the Session type into _core, and into *type (the module's state holds it). 0, or -1 with an
 * exception. */
int tw_session_add_type(PyObject *core, PyTypeObject **type);

#endif
