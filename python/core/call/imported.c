/* SPDX-License-Identifier: MIT */
/* What the extension reads from modules the program imported: never an import of its own (importing
 * torch from the profiler would change the program it measures). */
#include "imported.h"

PyObject *tw_imported_attribute(const char *module, const char *attribute)
{
    PyObject *name = PyUnicode_FromString(module);
    PyObject *imported = name != NULL ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    PyObject *value = imported != NULL ? PyObject_GetAttrString(imported, attribute) : NULL;
    Py_XDECREF(imported);
    if (value == NULL)
        PyErr_Clear();
    return value;
}
