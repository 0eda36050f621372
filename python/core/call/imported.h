/* SPDX-License-Identifier: MIT */
/* What the extension reads from modules the program imported (imported.c; not public API). */
#ifndef TW_PY_IMPORTED_H
#define TW_PY_IMPORTED_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* module.attribute of a module already imported (the extension never imports torch itself): a new
 * reference, or NULL without an error when the module is not imported or lacks it. */
PyObject *tw_imported_attribute(const char *module, const char *attribute);

#endif
