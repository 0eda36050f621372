/* SPDX-License-Identifier: MIT */
/*
 * Argument summaries, computed on the calling thread before the call, into a bounded buffer.
 *
 * "summary": tensors as dtype, shape and device (f32[2,3]@cpu), ints, floats, bools and None as
 * values, short strings quoted, tuples and lists of up to 8 items (then "... N items"), two levels
 * deep, anything else by its type name: no user __repr__ is ever called, and no reference to an argument is kept. Tensor
 * metadata is read by the libtorch layer from the tensor itself when it is loaded and the tensor's
 * type uses TensorBase's getters (no Python object made); else through Python attributes (dtype,
 * shape, is_cpu), which make temporary objects: then the only Python allocations of a recorded
 * call, and only in this mode.
 * "repr": repr() of each argument, bounded; it may write data values into the files.
 * The text reads like the original TorchWrapper's str((args, kwargs)): ((f32[1,3]@cpu, 2), {'dim': 0}).
 */
#include "args.h"


#include <stdio.h>
#include <string.h>

#include "active.h"
#include "exc.h"
#include "wrapper_object.h"
#include "below/layer.h"

typedef struct {
    char *p;
    char *end; /* leaves room for "..." */
    int full;
    int guarded;          /* the exception in flight is kept aside in saved (guard()) */
    tw_saved_exc_t saved;
} text_t;

/*
 * Before any Python call that may raise or look at the error indicator: the exception in flight
 * (the caller's code may be handling one) is kept aside until the summary ends. Only then: the
 * common summary (tensors read by the libtorch layer, ints, floats, None) calls nothing that may
 * raise, and saving and restoring on every call was ~10% of a two-tensor summary (callgrind).
 */
static void guard(text_t *t)
{
    if (!t->guarded) {
        tw_exc_save(&t->saved);
        t->guarded = 1;
    }
}

/* Attribute names, interned once: a fresh string per lookup would be hashed every time and would
 * miss CPython's type attribute cache (measured: ~1 us per tensor instead of ~0.25 us). */
static PyObject *name_dtype, *name_shape, *name_is_cpu, *name_device;

/* The wrappers' vectorcall entry: both wrapper types, and any subclass, call through it. */
static vectorcallfunc wrapper_entry;

int tw_args_init(vectorcallfunc entry)
{
    wrapper_entry = entry;
    if (name_dtype == NULL) {
        name_dtype = PyUnicode_InternFromString("dtype");
        name_shape = PyUnicode_InternFromString("shape");
        name_is_cpu = PyUnicode_InternFromString("is_cpu");
        name_device = PyUnicode_InternFromString("device");
    }
    return name_dtype && name_shape && name_is_cpu && name_device ? 0 : -1;
}

static void put_cut(text_t *t, const char *s, size_t n)
{
    if (t->full)
        return;
    if ((size_t)(t->end - t->p) < n) {
        n = (size_t)(t->end - t->p);
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) /* not inside a UTF-8 character */
            n--;
        t->full = 1;
    }
    memcpy(t->p, s, n);
    t->p += n;
}

/* Inline: most pieces are short literals, whose length and copy the compiler makes constants. */
static inline __attribute__((always_inline)) void put(text_t *t, const char *s, size_t n)
{
    if (TW_LIKELY(!t->full && (size_t)(t->end - t->p) >= n)) {
        memcpy(t->p, s, n);
        t->p += n;
        return;
    }
    put_cut(t, s, n);
}

static inline __attribute__((always_inline)) void puts_(text_t *t, const char *s)
{
    put(t, s, strlen(s));
}

/* A number is written whole or not at all (then the text is full). */
static void put_i64(text_t *t, long long v)
{
    char digits[24];
    size_t n = (size_t)(tw_format_i64(digits, v) - digits);
    if (t->full || (size_t)(t->end - t->p) < n) {
        t->full = 1;
        return;
    }
    put(t, digits, n);
}

/* Short names of dtypes, by the dtype object (a handful of singletons), filled on first sight. */
static struct {
    PyObject *dtype; /* borrowed: torch's dtype objects live as long as torch */
    char name[16];
} dtype_names[32];

static const char *dtype_name(text_t *t, PyObject *dtype)
{
    for (int i = 0; i < 32 && dtype_names[i].dtype != NULL; i++)
        if (dtype_names[i].dtype == dtype)
            return dtype_names[i].name;
    guard(t);
    PyObject *repr = PyObject_Repr(dtype);
    const char *text = repr ? PyUnicode_AsUTF8(repr) : NULL;
    static const char *const longs[] = {"torch.float32", "torch.float64", "torch.float16", "torch.bfloat16", "torch.int64",
                                        "torch.int32", "torch.int16", "torch.int8", "torch.uint8", "torch.bool",
                                        "torch.complex64", "torch.complex128"};
    static const char *const shorts[] = {"f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool",
                                         "c64", "c128"};
    char name[16] = "?";
    if (text != NULL) {
        snprintf(name, sizeof name, "%s", strncmp(text, "torch.", 6) == 0 ? text + 6 : text);
        for (size_t k = 0; k < sizeof longs / sizeof longs[0]; k++)
            if (strcmp(text, longs[k]) == 0)
                snprintf(name, sizeof name, "%s", shorts[k]);
    }
    Py_XDECREF(repr);
    PyErr_Clear();
    for (int i = 0; i < 32; i++) {
        if (dtype_names[i].dtype == NULL) {
            dtype_names[i].dtype = dtype;
            memcpy(dtype_names[i].name, name, sizeof name);
            return dtype_names[i].name;
        }
    }
    return "?"; /* more than 32 dtypes seen: not named */
}

/*
 * "%.6g" of v. The floats passed to torch calls are mostly the same few hyperparameters, again and
 * again (an optimizer step passes lr, betas, eps and weight decay to every parameter's update), and
 * snprintf was ~15% of a summarized call: the text of recent values is kept, keyed by their bits.
 * Only called with the GIL held (the summary runs on the calling thread before the call).
 */
static const char *float_text(double v)
{
    static struct {
        uint64_t bits;
        int used;
        char text[32];
    } recent[64];
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    unsigned slot = (unsigned)((bits * 0x9E3779B97F4A7C15ull) >> 58); /* 6 bits: 64 slots */
    if (!recent[slot].used || recent[slot].bits != bits) {
        snprintf(recent[slot].text, sizeof recent[slot].text, "%.6g", v);
        recent[slot].bits = bits;
        recent[slot].used = 1;
    }
    return recent[slot].text;
}

/* The getset descriptors of torch._C.TensorBase for dtype, shape, is_cpu and device (strong references),
 * looked up again whenever the session's tensor type changes. */
static PyTypeObject *descr_owner;
static PyObject *descr_dtype, *descr_shape, *descr_is_cpu, *descr_device;

static PyObject *getset_of(PyTypeObject *type, PyObject *name)
{
    PyObject *descr = _PyType_Lookup(type, name); /* borrowed; never raises */
    return descr != NULL && Py_IS_TYPE(descr, &PyGetSetDescr_Type) ? Py_NewRef(descr) : NULL;
}

static void refresh_descriptors(void)
{
    if (descr_owner == tw_active.tensor_type)
        return;
    descr_owner = tw_active.tensor_type;
    Py_XSETREF(descr_dtype, descr_owner ? getset_of(descr_owner, name_dtype) : NULL);
    Py_XSETREF(descr_shape, descr_owner ? getset_of(descr_owner, name_shape) : NULL);
    Py_XSETREF(descr_is_cpu, descr_owner ? getset_of(descr_owner, name_is_cpu) : NULL);
    Py_XSETREF(descr_device, descr_owner ? getset_of(descr_owner, name_device) : NULL);
}

/*
 * obj.name (a new reference, or NULL with an exception) for a tensor. When obj's type resolves name
 * to TensorBase's own getset (torch.Tensor, nn.Parameter: data descriptors win over any instance
 * dict), that getter is called directly, skipping the generic attribute lookup; a subclass that
 * overrides the attribute goes through getattr as usual.
 */
static PyObject *tensor_attr(PyObject *obj, PyObject *name, PyObject *base)
{
    if (base != NULL && _PyType_Lookup(Py_TYPE(obj), name) == base) {
        PyGetSetDef *def = ((PyGetSetDescrObject *)base)->d_getset;
        if (def->get != NULL)
            return def->get(obj, def->closure);
    }
    return PyObject_GetAttr(obj, name);
}

/*
 * The types whose tensors the libtorch layer reads (reads_tensor_base said yes, the layer is loaded),
 * with the version tag each had then: put_value's first check, two compares for a torch.Tensor or an
 * nn.Parameter, before any other test of the argument. A type changed since (new tag) falls to
 * put_tensor, which looks at it again.
 */
static struct {
    PyTypeObject *type;
    unsigned version;
} layer_types[2];

static inline int layer_reads(PyTypeObject *type)
{
    return (type == layer_types[0].type && type->tp_version_tag == layer_types[0].version) ||
           (type == layer_types[1].type && type->tp_version_tag == layer_types[1].version);
}

/*
 * Whether type reads dtype, shape, is_cpu and device through TensorBase's own getters (torch.Tensor,
 * nn.Parameter; not a subclass that overrides one, as FakeTensor does device): then the libtorch
 * layer can read them from the tensor itself, with the same result. Kept per type for its version
 * tag (a type changed since gets looked at again).
 */
static int reads_tensor_base(PyTypeObject *type)
{
    static struct {
        PyTypeObject *type;
        unsigned version;
        int ok;
    } seen[4];
    for (int i = 0; i < 4; i++)
        if (seen[i].type == type && seen[i].version == type->tp_version_tag && type->tp_version_tag != 0)
            return seen[i].ok;
    int ok = descr_dtype != NULL && descr_shape != NULL && descr_is_cpu != NULL && descr_device != NULL &&
             _PyType_Lookup(type, name_dtype) == descr_dtype && _PyType_Lookup(type, name_shape) == descr_shape &&
             _PyType_Lookup(type, name_is_cpu) == descr_is_cpu && _PyType_Lookup(type, name_device) == descr_device;
    static unsigned next;
    unsigned slot = next++ % 4;
    seen[slot].type = type;
    seen[slot].version = type->tp_version_tag;
    seen[slot].ok = ok;
    if (ok && type->tp_version_tag != 0) { /* 0: no tag (3.12+ stops tagging a type changed very often) */
        static unsigned next_fast;
        unsigned fast = next_fast++ % 2;
        layer_types[fast].type = type;
        layer_types[fast].version = type->tp_version_tag;
    }
    return ok;
}

/* Texts of tensors the layer writes longer than this go to the Python path, as they always did. */
#define LAYER_TEXT_MAX 160

/*
 * The tensor's summary written by the libtorch layer straight into the text; 0 when the Python path
 * must write it. A text that does not fit in what is left is cut as put() cuts it, from a copy.
 */
static inline int put_layer(text_t *t, PyObject *obj)
{
    if (t->full)
        return 1; /* nothing more is written */
    size_t room = (size_t)(t->end - t->p);
    int n = tw_layer.tensor_summary(obj, t->p, room < LAYER_TEXT_MAX ? room : LAYER_TEXT_MAX);
    if (TW_LIKELY(n >= 0)) {
        t->p += n;
        return 1;
    }
    if (n == -2 && room < LAYER_TEXT_MAX) {
        char text[LAYER_TEXT_MAX];
        n = tw_layer.tensor_summary(obj, text, sizeof text);
        if (n >= 0) {
            put(t, text, (size_t)n);
            return 1;
        }
    }
    return 0;
}

/* The summary from torch's Python getters: a tensor the layer does not read. */
static void put_tensor_python(text_t *t, PyObject *obj)
{
    guard(t);
    PyObject *dtype = tensor_attr(obj, name_dtype, descr_dtype);
    puts_(t, dtype != NULL ? dtype_name(t, dtype) : "tensor");
    Py_XDECREF(dtype);
    PyObject *shape = tensor_attr(obj, name_shape, descr_shape);
    puts_(t, "[");
    if (shape != NULL && PyTuple_Check(shape)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
            if (i)
                puts_(t, ",");
            put_i64(t, PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i)));
        }
    }
    Py_XDECREF(shape);
    puts_(t, "]");
    PyObject *is_cpu = tensor_attr(obj, name_is_cpu, descr_is_cpu);
    if (is_cpu == Py_True) {
        puts_(t, "@cpu");
    } else {
        PyObject *device = PyObject_GetAttr(obj, name_device);
        PyObject *text = device ? PyObject_Str(device) : NULL;
        const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
        puts_(t, "@");
        puts_(t, s ? s : "?");
        Py_XDECREF(text);
        Py_XDECREF(device);
    }
    Py_XDECREF(is_cpu);
    PyErr_Clear();
}

static void put_tensor(text_t *t, PyObject *obj)
{
    refresh_descriptors();
    if (tw_layer.tensor_summary != NULL && reads_tensor_base(Py_TYPE(obj)) && put_layer(t, obj))
        return;
    put_tensor_python(t, obj);
}

/* str's UTF-8 text; NULL with *n 0 when it has none (lone surrogates). */
static const char *utf8_of(text_t *t, PyObject *str, Py_ssize_t *n)
{
    if (PyUnicode_IS_COMPACT_ASCII(str)) { /* nearly every name: its own bytes, no call that may raise */
        *n = PyUnicode_GET_LENGTH(str);
        return (const char *)PyUnicode_DATA(str);
    }
    guard(t);
    const char *s = PyUnicode_AsUTF8AndSize(str, n);
    if (s == NULL) {
        PyErr_Clear();
        *n = 0;
    }
    return s;
}

static void put_value(text_t *t, PyObject *obj, int depth)
{
    PyObject *original;
    if (TW_LIKELY(layer_reads(Py_TYPE(obj)))) {
        if (!put_layer(t, obj))
            put_tensor_python(t, obj);
    } else if (tw_active.tensor_type != NULL && PyObject_TypeCheck(obj, tw_active.tensor_type)) {
        put_tensor(t, obj);
    } else if (obj == Py_None) {
        puts_(t, "None");
    } else if (PyBool_Check(obj)) {
        puts_(t, obj == Py_True ? "True" : "False");
    } else if (PyLong_CheckExact(obj)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow)
            puts_(t, "int");
        else
            put_i64(t, v);
    } else if (PyFloat_CheckExact(obj)) {
        puts_(t, float_text(PyFloat_AS_DOUBLE(obj)));
    } else if (PyUnicode_CheckExact(obj)) {
        Py_ssize_t n;
        const char *s = utf8_of(t, obj, &n);
        if (s == NULL) {
            puts_(t, "str");
            return;
        }
        puts_(t, "'");
        put(t, s, n > 32 ? 32 : (size_t)n);
        puts_(t, n > 32 ? "...'" : "'");
    } else if ((PyTuple_CheckExact(obj) || PyList_CheckExact(obj)) && depth < 2) {
        int tuple = PyTuple_CheckExact(obj);
        Py_ssize_t n = tuple ? PyTuple_GET_SIZE(obj) : PyList_GET_SIZE(obj);
        puts_(t, tuple ? "(" : "[");
        for (Py_ssize_t i = 0; i < n && i < 8; i++) {
            if (i)
                puts_(t, ", ");
            put_value(t, tuple ? PyTuple_GET_ITEM(obj, i) : PyList_GET_ITEM(obj, i), depth + 1);
        }
        if (n > 8) { /* "..., 48 items": a list's length shows what grows (findings: growing_line) */
            puts_(t, ", ... ");
            put_i64(t, (long long)n);
            puts_(t, " items");
        }
        if (tuple && n == 1)
            puts_(t, ",");
        puts_(t, tuple ? ")" : "]");
    } else if (strcmp(Py_TYPE(obj)->tp_name, "torch.dtype") == 0) {
        puts_(t, dtype_name(t, obj));
    } else if (wrapper_entry != NULL && PyVectorcall_Function(obj) == wrapper_entry &&
               (original = ((tw_wrapper_object *)obj)->wrapped) != NULL) {
        /* one of the profiler's wrappers (an optimizer's hook gets the step it wraps): named as what
         * it stands for, so that a summary reads the same as without the profiler */
        puts_(t, Py_TYPE(original)->tp_name);
    } else {
        puts_(t, Py_TYPE(obj)->tp_name); /* never a user __repr__ */
    }
}

/* An argument: the common one, a tensor the layer reads, without put_value's entry and exit. */
static inline __attribute__((always_inline)) void put_arg(text_t *t, PyObject *obj)
{
    if (TW_LIKELY(layer_reads(Py_TYPE(obj))) && put_layer(t, obj))
        return;
    put_value(t, obj, 0);
}

static void put_repr(text_t *t, PyObject *obj)
{
    guard(t);
    PyObject *repr = PyObject_Repr(obj);
    Py_ssize_t n = 0;
    const char *s = repr ? PyUnicode_AsUTF8AndSize(repr, &n) : NULL;
    if (s != NULL)
        put(t, s, (size_t)n);
    else
        puts_(t, Py_TYPE(obj)->tp_name);
    Py_XDECREF(repr);
    PyErr_Clear();
}

uint32_t tw_summarize_args(char *buf, size_t size, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                           tw_args_mode_t mode)
{
    if (size < 8)
        return 0;
    text_t t = {.p = buf, .end = buf + size - 3};
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    puts_(&t, "((");
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (i)
            puts_(&t, ", ");
        if (mode == TW_ARGS_REPR)
            put_repr(&t, args[i]);
        else
            put_arg(&t, args[i]);
    }
    puts_(&t, nargs == 1 ? ",), {" : "), {");
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        Py_ssize_t n;
        const char *key = utf8_of(&t, PyTuple_GET_ITEM(kwnames, i), &n);
        puts_(&t, i ? ", '" : "'");
        if (key != NULL)
            put(&t, key, (size_t)n);
        else
            puts_(&t, "?");
        puts_(&t, "': ");
        if (mode == TW_ARGS_REPR)
            put_repr(&t, args[nargs + i]);
        else
            put_arg(&t, args[nargs + i]);
    }
    puts_(&t, "})");
    if (t.guarded) /* an exception being handled by the caller's code stays as it was */
        tw_exc_restore(&t.saved);
    if (t.full) {
        memcpy(t.p, "...", 3);
        t.p += 3;
    }
    return (uint32_t)(t.p - buf);
}
