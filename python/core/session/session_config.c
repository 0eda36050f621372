/* SPDX-License-Identifier: MIT */
/*
 * Session's arguments: its config keys through the library's one validator (config_keys.c, a bare
 * Session's defaults), the CUPTI candidates, and the C copies of them that outlive the Python
 * objects (the writer thread reads them without the GIL). See session_config.h.
 */
#include "session_config.h"

#include <string.h>

char *tw_dup_cstr(const char *s)
{
    char *copy = PyMem_RawMalloc(strlen(s) + 1);
    if (copy == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    return strcpy(copy, s);
}

char *tw_dup_utf8(PyObject *text)
{
    const char *s = PyUnicode_AsUTF8(text);
    return s != NULL ? tw_dup_cstr(s) : NULL;
}

void tw_free_paths(char **paths)
{
    for (char **p = paths; p != NULL && *p != NULL; p++)
        PyMem_RawFree(*p);
    PyMem_RawFree(paths);
}

char **tw_cupti_paths_of(PyObject *paths)
{
    PyObject *seq = PySequence_Fast(paths, "cupti_paths must be a sequence of paths (str)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    char **out = PyMem_RawCalloc((size_t)n + 1, sizeof *out);
    if (out == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "cupti_paths[%zd] must be a str path, not '%.200s'", i,
                         Py_TYPE(item)->tp_name);
            break;
        }
        if ((out[i] = tw_dup_utf8(item)) == NULL)
            break;
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) {
        tw_free_paths(out);
        return NULL;
    }
    return out;
}

const char *const tw_session_config_keywords[TW_SESSION_CONFIG_KEYWORDS] = {
    "out_dir", "format", "file_max_size", "file_name_spec", "max_files", "flush_interval", "buffer_size", "on_full",
    "args", "gpu", "schedule", "records", "on_demand", "sites", "aten", "flops",
    "peak_flops", "memory", "compress", "detail", "max_total_size"};

int tw_session_config(PyObject *const *values, tw_config_t *out)
{
    PyObject *given = PyDict_New(), *json = PyImport_ImportModule("json"), *text = NULL;
    int result = -1;
    for (size_t i = 0; given != NULL && json != NULL && i < TW_SESSION_CONFIG_KEYWORDS; i++)
        if (values[i] != NULL && PyDict_SetItemString(given, tw_session_config_keywords[i], values[i]) < 0)
            goto done;
    if (given == NULL || json == NULL || (text = PyObject_CallMethod(json, "dumps", "O", given)) == NULL)
        goto done;
    const char *json_in = PyUnicode_AsUTF8(text);
    if (json_in == NULL)
        goto done;
    char err[1024] = "";
    int rc = tw_config_load(TW_CONFIG_DEFAULTS_SESSION, json_in, 0, out, NULL, err, sizeof err);
    if (rc != 0) {
        PyErr_SetString(rc == TW_ENOMEM ? PyExc_MemoryError : PyExc_ValueError, err);
        goto done;
    }
    result = 0;
done:
    Py_XDECREF(text);
    Py_XDECREF(json);
    Py_XDECREF(given);
    return result;
}
