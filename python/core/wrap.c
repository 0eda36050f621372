/* SPDX-License-Identifier: MIT */
/*
 * Making wrappers: wrap() and wrap_many() check the original and its API name, decide whether the
 * wrapper binds like a function, and find the original's own vectorcall entry once, so that the
 * hot path (wrapper.c) calls it directly.
 */
#include "module.h"
#include "wrapper.h"

/* Whether the original binds as a class attribute: functions, method descriptors, and wrappers of them. */
static int binds_like_function(tw_module_state *state, PyObject *original)
{
    if (Py_IS_TYPE(original, state->method_wrapper_type))
        return 1;
    if (Py_IS_TYPE(original, state->wrapper_type) || PyType_Check(original))
        return 0;
    return Py_TYPE(original)->tp_descr_get != NULL;
}

/*
 * The original's vectorcall entry point, for the kinds whose entry is fixed when the object is
 * created (builtin functions, method descriptors, Python functions in 3.11): calling it directly
 * saves PyObject_Vectorcall's lookup on every call. NULL for anything else.
 */
static vectorcallfunc stable_vectorcall(PyObject *original)
{
    if (PyCFunction_Check(original) || Py_IS_TYPE(original, &PyMethodDescr_Type))
        return PyVectorcall_Function(original);
#if PY_VERSION_HEX < 0x030C0000 /* 3.12 lets PyFunction_SetVectorcall change it later */
    if (PyFunction_Check(original))
        return PyVectorcall_Function(original);
#endif
    return NULL;
}

/*
 * A new wrapper of original recorded as api_name (a new reference, or NULL with an exception).
 * bind: 1 or 0, or -1 to decide from the original (functions and method descriptors bind).
 */
static PyObject *new_wrapper(tw_module_state *state, PyObject *original, PyObject *api_name, int bind,
                             unsigned long kind)
{
    if (kind & ~(unsigned long)TW_KIND_ALL) {
        PyErr_Format(PyExc_ValueError, "wrap(): kind=%lu is not a combination of the KIND_* flags (0 to %u)", kind,
                     TW_KIND_ALL);
        return NULL;
    }
    if (!PyCallable_Check(original)) {
        PyErr_Format(PyExc_TypeError, "cannot wrap a '%.200s' object: it is not callable", Py_TYPE(original)->tp_name);
        return NULL;
    }
    if (!PyUnicode_Check(api_name)) {
        PyErr_Format(PyExc_TypeError, "api_name must be a str, not '%.200s'", Py_TYPE(api_name)->tp_name);
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(api_name);
    if (name == NULL)
        return NULL;
    uint32_t api_id;
    int err = tw_api_intern(name, &api_id);
    if (err != 0) {
        PyErr_Format(err == TW_ENOMEM ? PyExc_MemoryError : PyExc_ValueError,
                     "invalid api_name %R: %s (a non-empty name of at most %d bytes is accepted)", api_name,
                     tw_strerror(err), TW_API_NAME_MAX);
        return NULL;
    }
    int binding = bind >= 0 ? bind : binds_like_function(state, original);
    PyTypeObject *type = binding ? state->method_wrapper_type : state->wrapper_type;
    tw_wrapper_object *self = PyObject_GC_New(tw_wrapper_object, type);
    if (self == NULL)
        return NULL;
    self->vectorcall = tw_wrapper_vectorcall;
    self->wrapped = Py_NewRef(original);
    self->call = stable_vectorcall(original);
    self->dict = NULL;
    self->weakrefs = NULL;
    self->api_id = api_id;
    self->kind = (uint32_t)kind;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* bind as new_wrapper() takes it: None -> -1, else its truth; -2 with an exception. */
static int bind_flag(PyObject *bind)
{
    if (bind == Py_None)
        return -1;
    int truth = PyObject_IsTrue(bind);
    return truth < 0 ? -2 : truth;
}

PyObject *tw_wrap(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    tw_module_state *state = PyModule_GetState(module);
    PyObject *bind = Py_None;
    unsigned long kind = 0;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "wrap() takes 2 positional arguments (original, api_name), got %zd", nargs);
        return NULL;
    }
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, i);
            if (PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, "bind") == 0) {
                bind = args[nargs + i];
            } else if (PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, "kind") == 0) {
                kind = PyLong_AsUnsignedLong(args[nargs + i]);
                if (kind == (unsigned long)-1 && PyErr_Occurred())
                    return NULL;
            } else {
                PyErr_Format(PyExc_TypeError, "wrap() got an unexpected keyword argument %R (accepted: 'bind', 'kind')",
                             key);
                return NULL;
            }
        }
    }
    int binding = bind_flag(bind);
    if (binding == -2)
        return NULL;
    return new_wrapper(state, args[0], args[1], binding, kind);
}

/*
 * wrap_many(specs, kind_mask) -> list of wrappers: wrap(original, api_name, bind=bind,
 * kind=kind & kind_mask) for each (original, api_name, bind, kind) of specs, in one call. A start
 * makes ~4,000 wrappers: one C loop instead of as many keyword calls from the interpreter.
 */
PyObject *tw_wrap_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "wrap_many(specs, kind_mask) takes 2 arguments");
        return NULL;
    }
    unsigned long mask = PyLong_AsUnsignedLong(args[1]);
    if (mask == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    PyObject *specs = PySequence_Fast(args[0], "wrap_many() needs a sequence of (original, api_name, bind, kind)");
    if (specs == NULL)
        return NULL;
    tw_module_state *state = PyModule_GetState(module);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(specs);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *spec = PySequence_Fast_GET_ITEM(specs, i);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 4) {
            PyErr_Format(PyExc_TypeError, "wrap_many() spec %zd is not a tuple (original, api_name, bind, kind)", i);
            Py_CLEAR(out);
            break;
        }
        unsigned long kind = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(spec, 3));
        int binding = kind == (unsigned long)-1 && PyErr_Occurred() ? -2 : bind_flag(PyTuple_GET_ITEM(spec, 2));
        if (binding != -2 && (kind & ~(unsigned long)TW_KIND_ALL)) { /* as wrap() refuses it, before the mask */
            PyErr_Format(PyExc_ValueError, "wrap_many() spec %zd: kind=%lu is not a combination of the KIND_* "
                         "flags (0 to %u)", i, kind, TW_KIND_ALL);
            binding = -2;
        }
        PyObject *wrapper = binding == -2 ? NULL
                                          : new_wrapper(state, PyTuple_GET_ITEM(spec, 0), PyTuple_GET_ITEM(spec, 1),
                                                        binding, kind & mask);
        if (wrapper == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, wrapper);
    }
    Py_DECREF(specs);
    return out;
}
