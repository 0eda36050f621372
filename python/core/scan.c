/* SPDX-License-Identifier: MIT */
/*
 * The first pass of discovery (torchwrapper/_discover.py), in C: a walk over every attribute of
 * every module under the roots (~29,000 of them for torch), which the interpreter took ~20 ms to
 * do. The rules are the ones documented in _discover.py; this is only their fast loop.
 */
#include "scan.h"

#include <string.h>

/* name == a root, or starts with a root and a dot. */
static int under_roots(PyObject *name, PyObject *roots)
{
    if (name == NULL || !PyUnicode_Check(name))
        return 0;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(name, &n);
    if (s == NULL) {
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(roots); i++) {
        Py_ssize_t rn;
        const char *r = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(roots, i), &rn);
        if (r != NULL && n >= rn && memcmp(s, r, (size_t)rn) == 0 && (n == rn || s[rn] == '.'))
            return 1;
    }
    return 0;
}

/* No component of the dotted name starts with '_'. */
static int is_public_path(const char *s)
{
    for (const char *p = s; *p; p++)
        if (*p == '_' && (p == s || p[-1] == '.'))
            return 0;
    return 1;
}

/*
 * scan_modules(modules, roots) -> (function_places, classes, best_name)
 * modules: a list of (name, module) to walk; roots: a tuple of root module names.
 * function_places: (module, attr, function) for every Python or builtin function under the roots;
 * classes: {id: class} for classes under the roots found under a public name;
 * best_name: {id: name}, the preferred public name of each function and class.
 */
PyObject *tw_scan_modules(PyObject *core, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "scan_modules(modules: list, roots: tuple)");
        return NULL;
    }
    PyObject *modules = args[0], *roots = args[1];
    PyObject *places = PyList_New(0), *classes = PyDict_New(), *best_name = PyDict_New(), *best_key = PyDict_New();
    PyObject *module_attr = PyUnicode_InternFromString("__module__");
    if (places == NULL || classes == NULL || best_name == NULL || best_key == NULL || module_attr == NULL)
        goto fail;
    for (Py_ssize_t m = 0; m < PyList_GET_SIZE(modules); m++) {
        PyObject *pair = PyList_GET_ITEM(modules, m);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyModule_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "scan_modules(): modules holds (name, module) pairs");
            goto fail;
        }
        PyObject *mod_name = PyTuple_GET_ITEM(pair, 0), *mod = PyTuple_GET_ITEM(pair, 1);
        Py_ssize_t mod_len;
        const char *mod_text = PyUnicode_AsUTF8AndSize(mod_name, &mod_len);
        if (mod_text == NULL)
            goto fail;
        int public_module = is_public_path(mod_text);
        long depth = 1;
        for (const char *p = mod_text; *p; p++)
            depth += *p == '.';
        /* A copy of the items: a module's dict may change while we read attributes. */
        PyObject *items = PyDict_Items(PyModule_GetDict(mod));
        if (items == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
            PyObject *kv = PyList_GET_ITEM(items, i);
            PyObject *attr = PyTuple_GET_ITEM(kv, 0), *value = PyTuple_GET_ITEM(kv, 1);
            if (!PyUnicode_Check(attr))
                continue;
            Py_ssize_t attr_len;
            const char *a = PyUnicode_AsUTF8AndSize(attr, &attr_len);
            if (a == NULL) {
                PyErr_Clear();
                continue;
            }
            if (a[0] == '_' && a[1] == '_')
                continue; /* module hooks (__getattr__, __dir__) and metadata */
            int public = public_module && a[0] != '_';
            /* Py_TYPE, not isinstance: some torch attributes warn when their __class__ is read. */
            PyTypeObject *kind = Py_TYPE(value);
            int is_function = kind == &PyFunction_Type || kind == &PyCFunction_Type;
            if (!is_function && !(public && PyType_IsSubtype(kind, &PyType_Type)))
                continue;
            PyObject *home = PyObject_GetAttr(value, module_attr);
            if (home == NULL)
                PyErr_Clear();
            int keep = is_function ? (home == NULL || home == Py_None || under_roots(home, roots))
                                   : under_roots(home, roots);
            if (!keep) {
                Py_XDECREF(home);
                continue; /* another library's function or class, re-exported */
            }
            PyObject *key_id = PyLong_FromVoidPtr(value);
            int err = key_id == NULL;
            if (!err && is_function) {
                PyObject *place = PyTuple_Pack(3, mod, attr, value);
                err = place == NULL || PyList_Append(places, place) < 0;
                Py_XDECREF(place);
            } else if (!err) {
                err = PyDict_SetItem(classes, key_id, value) < 0;
            }
            if (!err && public) {
                /* Names in the object's home package first (see _discover.py), then fewest
                 * components, fewest characters, alphabetical. */
                int at_home = 0;
                if (home != NULL && PyUnicode_Check(home)) {
                    Py_ssize_t hn;
                    const char *h = PyUnicode_AsUTF8AndSize(home, &hn);
                    at_home = h != NULL && hn >= mod_len && memcmp(h, mod_text, (size_t)mod_len) == 0 &&
                              (hn == mod_len || h[mod_len] == '.');
                }
                PyObject *key = Py_BuildValue("(OllOO)", at_home ? Py_False : Py_True, depth,
                                              (long)(mod_len + 1 + attr_len), mod_name, attr);
                PyObject *current = key != NULL ? PyDict_GetItemWithError(best_key, key_id) : NULL;
                int better = key != NULL && !PyErr_Occurred() &&
                             (current == NULL || PyObject_RichCompareBool(key, current, Py_LT) == 1);
                if (better) {
                    PyObject *name = PyUnicode_FromFormat("%U.%U", mod_name, attr);
                    err = name == NULL || PyDict_SetItem(best_key, key_id, key) < 0 ||
                          PyDict_SetItem(best_name, key_id, name) < 0;
                    Py_XDECREF(name);
                }
                err = err || key == NULL || PyErr_Occurred();
                Py_XDECREF(key);
            }
            Py_XDECREF(key_id);
            Py_XDECREF(home);
            if (err) {
                Py_DECREF(items);
                goto fail;
            }
        }
        Py_DECREF(items);
    }
    Py_DECREF(best_key);
    Py_DECREF(module_attr);
    return Py_BuildValue("(NNN)", places, classes, best_name);
fail:
    Py_XDECREF(places);
    Py_XDECREF(classes);
    Py_XDECREF(best_name);
    Py_XDECREF(best_key);
    Py_XDECREF(module_attr);
    return NULL;
}
