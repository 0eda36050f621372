/* SPDX-License-Identifier: MIT */
/*
 * Installing and restoring attributes in bulk. The Python package decides what goes where; these
 * loops do the thousands of dictionary reads and setattr calls of a start or a stop without the
 * interpreter's per-iteration overhead (measured: 11 ms in Python for ~5,000 places).
 */
#include "patch.h"

/* owner.__dict__ (borrowed), for modules and classes; NULL with an exception otherwise. */
static PyObject *namespace_of(PyObject *owner)
{
    if (PyModule_Check(owner))
        return PyModule_GetDict(owner);
    if (PyType_Check(owner)) {
        PyObject *dict = ((PyTypeObject *)owner)->tp_dict;
        if (dict != NULL)
            return dict;
    }
    PyErr_Format(PyExc_TypeError, "cannot patch a '%.200s': only modules and classes", Py_TYPE(owner)->tp_name);
    return NULL;
}

/* owner.__dict__.get(attr, missing) as a new reference, or NULL with an exception. */
static PyObject *raw_get(PyObject *owner, PyObject *attr, PyObject *missing)
{
    PyObject *ns = namespace_of(owner);
    if (ns == NULL)
        return NULL;
    PyObject *value = PyDict_GetItemWithError(ns, attr);
    if (value == NULL && PyErr_Occurred())
        return NULL;
    return Py_NewRef(value != NULL ? value : missing);
}

/*
 * install(items, missing[, installed]) -> (placements, failures, stale)
 * items: a sequence of (owner, attr, new, expected), or with installed (a list) of (index, owner,
 * attr, expected) where new is installed[index]. For each, remembers
 * owner.__dict__.get(attr, missing), then sets owner.attr = new, and appends the placement
 * (owner, attr, before, new) that restore() takes. A place that refuses (AttributeError,
 * TypeError) is reported in failures as (index, message) instead; any other error stops and
 * raises. stale lists the indexes whose before was not `expected` (what discovery saw there).
 */
PyObject *tw_install(PyObject *core, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "install(items, missing[, installed]) takes 2 or 3 arguments");
        return NULL;
    }
    /* With `installed` (a list), items are (index, owner, attr, expected) and new is installed[index]:
     * a start installs ~5,000 places, and building those tuples in Python cost ~2 ms of it. */
    PyObject *installed = nargs == 3 ? args[2] : NULL;
    if (installed != NULL && !PyList_Check(installed)) {
        PyErr_SetString(PyExc_TypeError, "install(): installed must be a list");
        return NULL;
    }
    PyObject *items = PySequence_Fast(args[0], "install() needs a sequence of (owner, attr, new, expected)");
    if (items == NULL)
        return NULL;
    PyObject *missing = args[1];
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    PyObject *placements = PyList_New(0);
    PyObject *failures = PyList_New(0);
    PyObject *stale = PyList_New(0);
    if (placements == NULL || failures == NULL || stale == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            PyErr_Format(PyExc_TypeError, "install() item %zd is not a tuple %s", i,
                         installed == NULL ? "(owner, attr, new, expected)" : "(index, owner, attr, expected)");
            goto fail;
        }
        PyObject *owner, *attr, *new_value, *expected;
        if (installed == NULL) {
            owner = PyTuple_GET_ITEM(item, 0), attr = PyTuple_GET_ITEM(item, 1);
            new_value = PyTuple_GET_ITEM(item, 2), expected = PyTuple_GET_ITEM(item, 3);
        } else {
            Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
            if (index == -1 && PyErr_Occurred())
                goto fail;
            if (index < 0 || index >= PyList_GET_SIZE(installed)) {
                PyErr_Format(PyExc_IndexError, "install() item %zd: index %zd is not in installed", i, index);
                goto fail;
            }
            new_value = PyList_GET_ITEM(installed, index);
            owner = PyTuple_GET_ITEM(item, 1), attr = PyTuple_GET_ITEM(item, 2), expected = PyTuple_GET_ITEM(item, 3);
        }
        PyObject *before = raw_get(owner, attr, missing);
        if (before == NULL)
            goto fail;
        if (before != expected) {
            PyObject *index = PyLong_FromSsize_t(i);
            int err = index != NULL ? PyList_Append(stale, index) : -1;
            Py_XDECREF(index);
            if (err < 0) {
                Py_DECREF(before);
                goto fail;
            }
        }
        if (PyObject_SetAttr(owner, attr, new_value) < 0) {
            Py_DECREF(before);
            if (!PyErr_ExceptionMatches(PyExc_AttributeError) && !PyErr_ExceptionMatches(PyExc_TypeError))
                goto fail;
            /* The reason, as text, for the caller's report; the exception itself is dropped. */
#if PY_VERSION_HEX >= 0x030C0000
            PyObject *value = PyErr_GetRaisedException();
            PyObject *message = value != NULL ? PyObject_Str(value) : PyUnicode_FromString("");
            Py_XDECREF(value);
#else
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyObject *message = value != NULL ? PyObject_Str(value) : PyUnicode_FromString("");
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
#endif
            PyObject *failure = message != NULL ? Py_BuildValue("(nN)", i, message) : NULL;
            if (failure == NULL || PyList_Append(failures, failure) < 0) {
                Py_XDECREF(failure);
                goto fail;
            }
            Py_DECREF(failure);
            continue;
        }
        PyObject *placement = PyTuple_Pack(4, owner, attr, before, new_value);
        Py_DECREF(before);
        if (placement == NULL || PyList_Append(placements, placement) < 0) {
            Py_XDECREF(placement);
            goto fail;
        }
        Py_DECREF(placement);
    }
    Py_DECREF(items);
    return Py_BuildValue("(NNN)", placements, failures, stale);
fail:
    Py_XDECREF(placements);
    Py_XDECREF(failures);
    Py_XDECREF(stale);
    Py_DECREF(items);
    return NULL;
}

/*
 * restore(placements, missing) -> list of indexes left alone
 * placements: a sequence of (owner, attr, before, installed), restored newest first. A place that
 * no longer holds `installed` (someone replaced it) is left alone and its index returned; else
 * owner.attr is set back to `before`, or deleted when before is `missing`.
 */
PyObject *tw_restore(PyObject *core, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "restore(placements, missing) takes 2 arguments");
        return NULL;
    }
    PyObject *placements = PySequence_Fast(args[0], "restore() needs a sequence of placements");
    if (placements == NULL)
        return NULL;
    PyObject *missing = args[1];
    PyObject *left_alone = PyList_New(0);
    if (left_alone == NULL)
        goto fail;
    for (Py_ssize_t i = PySequence_Fast_GET_SIZE(placements) - 1; i >= 0; i--) {
        PyObject *p = PySequence_Fast_GET_ITEM(placements, i);
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 4) {
            PyErr_Format(PyExc_TypeError, "restore() placement %zd is not (owner, attr, before, installed)", i);
            goto fail;
        }
        PyObject *owner = PyTuple_GET_ITEM(p, 0), *attr = PyTuple_GET_ITEM(p, 1);
        PyObject *before = PyTuple_GET_ITEM(p, 2), *installed = PyTuple_GET_ITEM(p, 3);
        PyObject *current = raw_get(owner, attr, missing);
        if (current == NULL)
            goto fail;
        int ours = current == installed;
        Py_DECREF(current);
        int err;
        if (!ours) {
            PyObject *index = PyLong_FromSsize_t(i);
            err = index != NULL ? PyList_Append(left_alone, index) : -1;
            Py_XDECREF(index);
        } else if (before == missing) {
            err = PyObject_DelAttr(owner, attr);
        } else {
            err = PyObject_SetAttr(owner, attr, before);
        }
        if (err < 0)
            goto fail;
    }
    Py_DECREF(placements);
    return left_alone;
fail:
    Py_XDECREF(left_alone);
    Py_DECREF(placements);
    return NULL;
}
