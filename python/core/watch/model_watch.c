/* SPDX-License-Identifier: MIT */
/*
 * _core's functions for the model watch (torchwrapper._model_watch), which fills its tables
 * (model_watch_tables.h) off the hot path; the wrappers read them on it: nn.Module instances by
 * address -> the id of their path (so that a module forward's record carries its instance's path
 * for the cost of one probe), and tracked tensors (parameters, gradients) by address -> the model
 * watch's index (so that an in-place update of one is seen). The model watch keeps a weak reference
 * to every object it puts in, and takes the entry out from the weak reference's callback, before the
 * address can be reused.
 */
#include "model_watch.h"

#include "torchwrapper/api.h"
#include "torchwrapper/recorder.h"

#include "hooks.h"
#include "model_watch_tables.h"

static tw_ptr_table_t *table_named(PyObject *name)
{
    if (PyUnicode_Check(name)) {
        if (PyUnicode_CompareWithASCIIString(name, "modules") == 0)
            return &tw_modules;
        if (PyUnicode_CompareWithASCIIString(name, "tracked") == 0)
            return &tw_tracked;
    }
    PyErr_Format(PyExc_ValueError, "no table named %R (accepted: 'modules', 'tracked')", name);
    return NULL;
}

/* table_set(table, obj, value): obj's entry holds value (an unsigned 32-bit int). */
static PyObject *core_table_set(PyObject *core, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "table_set(table, obj, value) takes 3 arguments");
        return NULL;
    }
    tw_ptr_table_t *table = table_named(args[0]);
    if (table == NULL)
        return NULL;
    unsigned long value = PyLong_AsUnsignedLong(args[2]);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (value > UINT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "table value %lu does not fit 32 bits", value);
        return NULL;
    }
    if (tw_ptr_table_set(table, args[1], (uint32_t)value) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* table_remove(table, address) -> count: takes out the entry of the object that was at address. */
static PyObject *core_table_remove(PyObject *core, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "table_remove(table, address) takes 2 arguments");
        return NULL;
    }
    tw_ptr_table_t *table = table_named(args[0]);
    if (table == NULL)
        return NULL;
    void *address = PyLong_AsVoidPtr(args[1]);
    if (address == NULL && PyErr_Occurred())
        return NULL;
    return PyLong_FromUnsignedLong(tw_ptr_table_remove(table, (uintptr_t)address));
}

/* table_get(table, obj) -> (value, count) or None. */
static PyObject *core_table_get(PyObject *core, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "table_get(table, obj) takes 2 arguments");
        return NULL;
    }
    tw_ptr_table_t *table = table_named(args[0]);
    if (table == NULL)
        return NULL;
    tw_ptr_slot_t *slot = tw_ptr_find(table, args[1]);
    if (slot == NULL)
        Py_RETURN_NONE;
    return Py_BuildValue("(kk)", (unsigned long)slot->value, (unsigned long)slot->count);
}

/* table_clear(table) -> [(address, value, count)]: empties it, returning what it held. */
static PyObject *core_table_clear(PyObject *core, PyObject *name)
{
    tw_ptr_table_t *table = table_named(name);
    if (table == NULL)
        return NULL;
    /* Emptied first: building the list can run the garbage collector, whose weak reference
     * callbacks take entries out of this very table. */
    tw_ptr_table_t held = *table;
    table->slots = NULL;
    table->mask = table->used = table->filled = 0;
    PyObject *out = PyList_New(0);
    for (size_t i = 0; out != NULL && held.slots != NULL && i <= held.mask; i++) {
        tw_ptr_slot_t *slot = &held.slots[i];
        if (slot->key <= TW_PTR_TOMBSTONE)
            continue;
        PyObject *item = Py_BuildValue("(Nkk)", PyLong_FromVoidPtr((void *)slot->key), (unsigned long)slot->value,
                                       (unsigned long)slot->count);
        if (item == NULL || PyList_Append(out, item) < 0)
            Py_CLEAR(out);
        Py_XDECREF(item);
    }
    tw_ptr_table_clear(&held);
    return out;
}

/* table_size(table) -> (entries, slots): live entries and the slots they take (tombstones included). */
static PyObject *core_table_size(PyObject *core, PyObject *name)
{
    tw_ptr_table_t *table = table_named(name);
    if (table == NULL)
        return NULL;
    return Py_BuildValue("(nn)", (Py_ssize_t)table->used,
                         (Py_ssize_t)(table->slots != NULL ? table->mask + 1 : 0));
}

/* intern_path(path) -> module id: TW_MODULE_ROOT for "", else 1 + the path's id in the name table. */
static PyObject *core_intern_path(PyObject *core, PyObject *path)
{
    if (!PyUnicode_Check(path)) {
        PyErr_Format(PyExc_TypeError, "a module path is a str, not '%.200s'", Py_TYPE(path)->tp_name);
        return NULL;
    }
    const char *text = PyUnicode_AsUTF8(path);
    if (text == NULL)
        return NULL;
    if (text[0] == '\0')
        return PyLong_FromUnsignedLong(TW_MODULE_ROOT);
    uint32_t id;
    int err = tw_api_intern(text, &id);
    if (err != 0) {
        PyErr_Format(err == TW_ENOMEM ? PyExc_MemoryError : PyExc_ValueError,
                     "cannot intern the module path %R: %s (at most %d bytes)", path, tw_strerror(err),
                     TW_API_NAME_MAX);
        return NULL;
    }
    return PyLong_FromUnsignedLong((unsigned long)id + 1);
}

/* module_path(module_id) -> the path, or None for TW_MODULE_NONE and unknown ids. */
static PyObject *core_module_path(PyObject *core, PyObject *arg)
{
    unsigned long id = PyLong_AsUnsignedLong(arg);
    if (id == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    const char *path = id <= UINT32_MAX ? tw_module_path((uint32_t)id) : NULL;
    if (path == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(path);
}

/* transient_set(cls, parent_id, path_id) -> bool: a leaf of class cls made in the module forward
 * of path id parent_id takes path_id (model_watch_tables.h); False when the entries are full. */
static PyObject *core_transient_set(PyObject *core, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "transient_set(cls, parent_id, path_id) takes a class and two ids");
        return NULL;
    }
    unsigned long ids[2];
    for (int i = 0; i < 2; i++) {
        ids[i] = PyLong_AsUnsignedLong(args[1 + i]);
        if (ids[i] == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        if (ids[i] == TW_MODULE_NONE || ids[i] > UINT32_MAX) {
            PyErr_Format(PyExc_ValueError, "transient_set: %lu is no module path id (1 to %lu)", ids[i],
                         (unsigned long)UINT32_MAX);
            return NULL;
        }
    }
    return PyBool_FromLong(tw_transient_set((PyTypeObject *)args[0], (uint32_t)ids[0], (uint32_t)ids[1]));
}

/* The entries as [(cls, parent_id, path_id, calls)]; emptied when clear is set. */
static PyObject *transients_list(int clear)
{
    PyObject *out = PyList_New(0);
    for (unsigned i = 0; out != NULL && i < tw_transients_used; i++) {
        const tw_transient_t *entry = &tw_transients[i];
        PyObject *item = Py_BuildValue("(OkkK)", (PyObject *)entry->type, (unsigned long)entry->parent_id,
                                       (unsigned long)entry->path_id, (unsigned long long)entry->calls);
        if (item == NULL || PyList_Append(out, item) < 0)
            Py_CLEAR(out);
        Py_XDECREF(item);
    }
    if (clear)
        tw_transients_clear(); /* even when the list failed: a stale entry must not outlive its cause */
    return out;
}

static PyObject *core_transient_calls(PyObject *core, PyObject *unused)
{
    return transients_list(0);
}

static PyObject *core_transient_clear(PyObject *core, PyObject *unused)
{
    return transients_list(1);
}

static PyMethodDef model_watch_methods[] = {
    {"table_set", (PyCFunction)(void (*)(void))core_table_set, METH_FASTCALL,
     "table_set(table, obj, value)\n--\n\nPuts obj (by address) in the 'modules' or 'tracked' table with value."},
    {"table_remove", (PyCFunction)(void (*)(void))core_table_remove, METH_FASTCALL,
     "table_remove(table, address) -> count\n--\n\nTakes out the entry of the object that was at address."},
    {"table_get", (PyCFunction)(void (*)(void))core_table_get, METH_FASTCALL,
     "table_get(table, obj) -> (value, count) or None"},
    {"table_clear", core_table_clear, METH_O,
     "table_clear(table) -> [(address, value, count)]\n--\n\nEmpties the table; returns what it held."},
    {"table_size", core_table_size, METH_O,
     "table_size(table) -> (entries, slots)\n--\n\nHow many objects the table holds, and its capacity."},
    {"intern_path", core_intern_path, METH_O,
     "intern_path(path) -> module id\n--\n\nThe id records carry for a module path (\"\" is the root)."},
    {"module_path", core_module_path, METH_O, "module_path(module_id) -> path or None"},
    {"transient_set", (PyCFunction)(void (*)(void))core_transient_set, METH_FASTCALL,
     "transient_set(cls, parent_id, path_id) -> bool\n--\n\nA leaf of class cls made in the module forward of "
     "path id parent_id takes path_id, found by the wrappers with no Python (False: no room)."},
    {"transient_calls", core_transient_calls, METH_NOARGS,
     "transient_calls() -> [(cls, parent_id, path_id, calls)]\n--\n\nThe transient entries and their calls."},
    {"transient_clear", core_transient_clear, METH_NOARGS,
     "transient_clear() -> [(cls, parent_id, path_id, calls)]\n--\n\nEmpties the transient entries; returns "
     "what they held."},
    {NULL, NULL, 0, NULL},
};

int tw_model_watch_add_functions(PyObject *core)
{
    if (PyModule_AddFunctions(core, model_watch_methods) < 0)
        return -1;
    if (PyModule_AddIntConstant(core, "KIND_MODULE_FORWARD", TW_KIND_MODULE_FORWARD) < 0 ||
        PyModule_AddIntConstant(core, "KIND_MODULE_CALL", TW_KIND_MODULE_CALL) < 0 ||
        PyModule_AddIntConstant(core, "KIND_INPLACE", TW_KIND_INPLACE) < 0 ||
        PyModule_AddIntConstant(core, "KIND_BOUNDARY", TW_KIND_BOUNDARY) < 0 ||
        PyModule_AddIntConstant(core, "KIND_STEP", TW_KIND_STEP) < 0)
        return -1;
    PyObject *root = PyLong_FromUnsignedLong(TW_MODULE_ROOT);
    if (root == NULL || PyModule_AddObject(core, "MODULE_ROOT", root) < 0) {
        Py_XDECREF(root);
        return -1;
    }
    return 0;
}
