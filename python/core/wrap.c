/* SPDX-License-Identifier: MIT */
/*
 * Making wrappers: the wrapper types (attributes read through to the original, pickling as the
 * original, copy, repr, the GC slots), and wrap() and wrap_many(), which check the original and its
 * API name, decide whether the wrapper binds like a function, and find the original's own vectorcall
 * entry once, so that the hot path (wrapper.c, the profiled call only) calls it directly.
 */
#include "wrap.h"

#include "torchwrapper/api.h"
#include <structmember.h>

#include "below/flops.h"
#include "watch/hooks.h"
#include "call/wrapper.h"

/* Whether the original binds as a class attribute: functions, method descriptors, and wrappers of them. */
static int binds_like_function(tw_core_state *state, PyObject *original)
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
static PyObject *new_wrapper(tw_core_state *state, PyObject *original, PyObject *api_name, int bind,
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
    /* a builtin's entry is fixed when it is made: without one, it is called through tp_call */
    self->tp_call_only = self->call == NULL && PyCFunction_Check(original);
    self->dict = NULL;
    self->weakrefs = NULL;
    self->api_id = api_id;
    self->kind = (uint32_t)kind;
    self->flops_kind = tw_flops_kind_of(name);
    if (self->flops_kind != TW_FLOPS_NONE)
        self->kind |= TW_KIND_FLOPS;
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

PyObject *tw_wrap(PyObject *core, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    tw_core_state *state = PyModule_GetState(core);
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
PyObject *tw_wrap_many(PyObject *core, PyObject *const *args, Py_ssize_t nargs)
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
    tw_core_state *state = PyModule_GetState(core);
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

/* ---- the wrapper types ------------------------------------------------------------------------------ */

static PyObject *method_wrapper_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* Attributes the wrapper lacks read through to the original (torch reads e.g. `step.hooked`). */
static PyObject *wrapper_getattro(PyObject *op, PyObject *name)
{
    PyObject *value = PyObject_GenericGetAttr(op, name);
    if (value != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return value;
    PyErr_Clear();
    return PyObject_GetAttr(((tw_wrapper_object *)op)->wrapped, name);
}

/* __name__, __qualname__, __module__, __doc__: the wrapper's own if one was set, else the original's. */
static PyObject *wrapper_get_forwarded(PyObject *op, void *closure)
{
    tw_wrapper_object *self = (tw_wrapper_object *)op;
    PyObject *name = PyUnicode_InternFromString((const char *)closure);
    if (name == NULL)
        return NULL;
    PyObject *value = NULL;
    if (self->dict != NULL) {
        value = PyDict_GetItemWithError(self->dict, name);
        if (value != NULL)
            Py_INCREF(value);
        else if (PyErr_Occurred()) {
            Py_DECREF(name);
            return NULL;
        }
    }
    if (value == NULL)
        value = PyObject_GetAttr(self->wrapped, name);
    Py_DECREF(name);
    return value;
}

static int wrapper_set_forwarded(PyObject *op, PyObject *value, void *closure)
{
    tw_wrapper_object *self = (tw_wrapper_object *)op;
    if (self->dict == NULL && (self->dict = PyDict_New()) == NULL)
        return -1;
    if (value == NULL) {
        if (PyDict_DelItemString(self->dict, (const char *)closure) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError))
                return -1;
            PyErr_Clear();
        }
        return 0;
    }
    return PyDict_SetItemString(self->dict, (const char *)closure, value);
}

static PyObject *wrapper_get_api_name(PyObject *op, void *closure)
{
    const char *name = tw_api_name(((tw_wrapper_object *)op)->api_id);
    if (name == NULL) /* cannot happen: the id came from tw_api_intern */
        Py_RETURN_NONE;
    return PyUnicode_FromString(name);
}

static PyObject *wrapper_get_api_id(PyObject *op, void *closure)
{
    return PyLong_FromUnsignedLong(((tw_wrapper_object *)op)->api_id);
}

static PyObject *wrapper_get_kind(PyObject *op, void *closure)
{
    return PyLong_FromUnsignedLong(((tw_wrapper_object *)op)->kind & TW_KIND_ALL); /* as given */
}

/*
 * __class__ is the original's class, as for wrapt's ObjectProxy: isinstance(w, types.FunctionType)
 * holds for a wrapped function, so that code which checks what kind of callable it was given (torch's
 * config modules, inspect.isfunction, torch.compile's graph capture) treats the wrapper as the original.
 * type(w) stays the wrapper type.
 */
static PyObject *wrapper_get_class(PyObject *op, void *closure)
{
    return Py_NewRef((PyObject *)Py_TYPE(((tw_wrapper_object *)op)->wrapped));
}

static PyGetSetDef wrapper_getset[] = {
    {"__class__", wrapper_get_class, NULL, NULL, NULL},
    {"__name__", wrapper_get_forwarded, wrapper_set_forwarded, NULL, "__name__"},
    {"__qualname__", wrapper_get_forwarded, wrapper_set_forwarded, NULL, "__qualname__"},
    {"__module__", wrapper_get_forwarded, wrapper_set_forwarded, NULL, "__module__"},
    {"__doc__", wrapper_get_forwarded, wrapper_set_forwarded, NULL, "__doc__"},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"api_name", wrapper_get_api_name, NULL, "the API name calls are recorded under", NULL},
    {"api_id", wrapper_get_api_id, NULL, "the id of api_name in the C name table", NULL},
    {"watch_kind", wrapper_get_kind, NULL, "what the model watch looks at around a call (KIND_* flags)", NULL},
    {NULL},
};

static PyMemberDef wrapper_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(tw_wrapper_object, wrapped), READONLY, "the original callable"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(tw_wrapper_object, vectorcall), READONLY, NULL},
    {"__dictoffset__", T_PYSSIZET, offsetof(tw_wrapper_object, dict), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(tw_wrapper_object, weakrefs), READONLY, NULL},
    {NULL},
};

/*
 * getattr(sys.modules[module], qualname...) without raising: a new reference, or NULL with no
 * exception set when the path does not resolve.
 */
static PyObject *resolve_qualified(PyObject *module_name, PyObject *qualname)
{
    PyObject *obj = PyImport_GetModule(module_name);
    if (obj == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *dot = PyUnicode_FromString(".");
    PyObject *parts = dot != NULL ? PyUnicode_Split(qualname, dot, -1) : NULL;
    Py_XDECREF(dot);
    if (parts == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
        Py_SETREF(obj, PyObject_GetAttr(obj, PyList_GET_ITEM(parts, i)));
        if (obj == NULL)
            goto fail;
    }
    Py_DECREF(parts);
    return obj;
fail:
    PyErr_Clear();
    Py_XDECREF(parts);
    Py_XDECREF(obj);
    return NULL;
}

/*
 * Pickles as the original does. A Python function pickles by its qualified name: when that name
 * resolves to this wrapper (installed), the wrapper pickles to the very bytes the original would;
 * when it resolves to the original (not installed), the wrapper pickles to the original itself,
 * through copy.copy, which returns a function unchanged. Anything else (builtins, method
 * descriptors) reduces as the original does, e.g. getattr(torch._C.TensorBase, "view").
 */
static PyObject *wrapper_reduce_ex(PyObject *op, PyObject *protocol)
{
    tw_wrapper_object *self = (tw_wrapper_object *)op;
    if (PyFunction_Check(self->wrapped)) {
        PyObject *module_name = PyObject_GetAttrString(self->wrapped, "__module__");
        PyObject *qualname = PyObject_GetAttrString(self->wrapped, "__qualname__");
        PyObject *resolved = NULL;
        if (module_name != NULL && qualname != NULL && PyUnicode_Check(module_name) && PyUnicode_Check(qualname))
            resolved = resolve_qualified(module_name, qualname);
        PyErr_Clear();
        Py_XDECREF(module_name);
        PyObject *result = NULL;
        if (resolved == op) {
            result = Py_NewRef(qualname);
        } else if (resolved == self->wrapped) {
            PyObject *copy_module = PyImport_ImportModule("copy");
            PyObject *copy_fn = copy_module ? PyObject_GetAttrString(copy_module, "copy") : NULL;
            result = copy_fn ? Py_BuildValue("(O(O))", copy_fn, self->wrapped) : NULL;
            Py_XDECREF(copy_fn);
            Py_XDECREF(copy_module);
            if (result == NULL) {
                Py_XDECREF(resolved);
                Py_XDECREF(qualname);
                return NULL;
            }
        }
        Py_XDECREF(resolved);
        Py_XDECREF(qualname);
        if (result != NULL)
            return result;
    }
    return PyObject_CallMethod(self->wrapped, "__reduce_ex__", "O", protocol);
}

/* A wrapper is immutable like a function: copies are the wrapper itself. */
static PyObject *wrapper_copy(PyObject *op, PyObject *unused)
{
    return Py_NewRef(op);
}

static PyMethodDef wrapper_methods[] = {
    {"__reduce_ex__", wrapper_reduce_ex, METH_O, NULL},
    {"__copy__", wrapper_copy, METH_NOARGS, NULL},
    {"__deepcopy__", wrapper_copy, METH_O, NULL},
    {NULL},
};

static PyObject *wrapper_repr(PyObject *op)
{
    return PyUnicode_FromFormat("<profiled %R>", ((tw_wrapper_object *)op)->wrapped);
}

static int wrapper_traverse(PyObject *op, visitproc visit, void *arg)
{
    tw_wrapper_object *self = (tw_wrapper_object *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->wrapped);
    Py_VISIT(self->dict);
    return 0;
}

static int wrapper_clear(PyObject *op)
{
    tw_wrapper_object *self = (tw_wrapper_object *)op;
    Py_CLEAR(self->wrapped);
    Py_CLEAR(self->dict);
    return 0;
}

static void wrapper_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((tw_wrapper_object *)op)->weakrefs != NULL)
        PyObject_ClearWeakRefs(op);
    wrapper_clear(op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyObject *wrapper_new_refuse(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyErr_Format(PyExc_TypeError, "cannot create '%s' instances directly: use torchwrapper._core.wrap()",
                 type->tp_name);
    return NULL;
}

/* No Py_tp_doc: the type's __doc__ string would shadow the __doc__ getset that reads the original's. */
#define TW_WRAPPER_SLOTS                                       \
    {Py_tp_new, wrapper_new_refuse},                           \
    {Py_tp_dealloc, wrapper_dealloc},                          \
    {Py_tp_traverse, wrapper_traverse},                        \
    {Py_tp_clear, wrapper_clear},                              \
    {Py_tp_call, PyVectorcall_Call},                           \
    {Py_tp_getattro, wrapper_getattro},                        \
    {Py_tp_repr, wrapper_repr},                                \
    {Py_tp_getset, wrapper_getset},                            \
    {Py_tp_members, wrapper_members},                          \
    {Py_tp_methods, wrapper_methods}

static PyType_Slot wrapper_slots[] = {
    TW_WRAPPER_SLOTS,
    {0, NULL},
};

static PyType_Slot method_wrapper_slots[] = {
    TW_WRAPPER_SLOTS,
    {Py_tp_descr_get, method_wrapper_descr_get},
    {0, NULL},
};

#define TW_WRAPPER_FLAGS \
    (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE)

static PyType_Spec wrapper_spec = {
    .name = "torchwrapper._core.Wrapper",
    .basicsize = sizeof(tw_wrapper_object),
    .flags = TW_WRAPPER_FLAGS,
    .slots = wrapper_slots,
};

static PyType_Spec method_wrapper_spec = {
    .name = "torchwrapper._core.MethodWrapper",
    .basicsize = sizeof(tw_wrapper_object),
    .flags = TW_WRAPPER_FLAGS | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = method_wrapper_slots,
};

int tw_wrapper_add_types(PyObject *core, tw_core_state *state)
{
    state->wrapper_type = (PyTypeObject *)PyType_FromModuleAndSpec(core, &wrapper_spec, NULL);
    if (state->wrapper_type == NULL || PyModule_AddType(core, state->wrapper_type) < 0)
        return -1;
    state->method_wrapper_type = (PyTypeObject *)PyType_FromModuleAndSpec(core, &method_wrapper_spec, NULL);
    if (state->method_wrapper_type == NULL || PyModule_AddType(core, state->method_wrapper_type) < 0)
        return -1;
    return 0;
}
