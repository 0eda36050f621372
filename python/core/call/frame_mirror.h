/* SPDX-License-Identifier: MIT */
/* A mirror of CPython's interpreter frame layout (not public API), for call sites (call_sites.c). */
#ifndef TW_PY_FRAME_MIRROR_H
#define TW_PY_FRAME_MIRROR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/*
 * The caller's frame without a frame object. PyEval_GetFrame() makes a PyFrameObject for the
 * calling frame (an allocation per Python frame: ~50 ns, paid again by each new call of a small
 * function). On CPython 3.11 and 3.12 the interpreter's own frame (_PyInterpreterFrame) is read
 * instead, through a copy of its leading fields (Include/internal/pycore_frame.h; the thread
 * state's cframe->current_frame is public). Guarded twice: only for those versions at compile time,
 * and only once tw_sites_begin() has checked, against the public API, that it reads the same code
 * object, offset and caller's caller (tw_site_frames_fast); otherwise the public calls are used.
 */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && !defined(Py_LIMITED_API) && \
    !defined(Py_GIL_DISABLED)
#define TW_SITE_FRAME_MIRROR 1
typedef struct tw_iframe {
#if PY_VERSION_HEX < 0x030C0000
    PyObject *f_func, *f_globals, *f_builtins, *f_locals;
    PyCodeObject *f_code;
    PyFrameObject *frame_obj;
    struct tw_iframe *previous;
    const char *prev_instr; /* _Py_CODEUNIT * */
    int stacktop;
    _Bool is_entry;
    char owner;
#else
    PyCodeObject *f_code;
    struct tw_iframe *previous;
    PyObject *f_funcobj, *f_globals, *f_builtins, *f_locals;
    PyFrameObject *frame_obj;
    const char *prev_instr;
    int stacktop;
    uint16_t return_offset;
    char owner;
#endif
} tw_iframe_t;

/* Whether the frame has not begun its first instruction (or, 3.12, is a C-stack entry frame):
 * CPython's _PyFrame_IsIncomplete. */
static inline int tw_iframe_incomplete(const tw_iframe_t *f)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == 3) /* FRAME_OWNED_BY_CSTACK */
        return 1;
#endif
    return f->owner != 1 /* FRAME_OWNED_BY_GENERATOR */ &&
           f->prev_instr < f->f_code->co_code_adaptive + 2 * f->f_code->_co_firsttraceable;
}

/* The frame tstate (the calling thread's) runs: a wrapper has its thread state read already. */
static inline const tw_iframe_t *tw_iframe_of(PyThreadState *tstate)
{
    return (const tw_iframe_t *)tstate->cframe->current_frame;
}

static inline const tw_iframe_t *tw_iframe_current(void)
{
    return tw_iframe_of(_PyThreadState_UncheckedGet());
}

/* PyFrame_GetLasti()'s value: the byte offset of the frame's instruction. */
static inline int tw_iframe_lasti(const tw_iframe_t *f)
{
    return (int)(f->prev_instr - f->f_code->co_code_adaptive);
}
#endif

#endif
