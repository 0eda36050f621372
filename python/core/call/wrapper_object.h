/* SPDX-License-Identifier: MIT */
/*
 * The wrapper object's layout, shared by the files that read it: the hot path (wrapper.c), the types
 * and making wrappers (wrap.c), and argument summaries (args.c: a wrapper is named as what it
 * stands for). Private to the extension module.
 */
#ifndef TW_CORE_WRAPPER_OBJECT_H
#define TW_CORE_WRAPPER_OBJECT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *wrapped;   /* the original callable (strong) */
    vectorcallfunc call; /* wrapped's own vectorcall entry, where it can never change; else NULL */
    int tp_call_only;    /* wrapped is a builtin with no vectorcall entry (METH_VARARGS: torch.add) */
    PyObject *dict;      /* instance __dict__, created on demand */
    PyObject *weakrefs;
    uint32_t api_id;
    uint32_t kind;       /* TW_KIND_*: what the model watch looks at around a call (hooks.h) */
    uint32_t flops_kind; /* tw_flops_kind_t: its FLOP formula (flops.h), TW_FLOPS_NONE for most */
} tw_wrapper_object;

#endif
