/* SPDX-License-Identifier: MIT */
/* What the model watch hooks around wrapped calls (not public API): the kinds of callables, and the
 * session's model watch's hooks. Shared by the wrappers (wrapper.c, wrap.c), the active session (active.h) and
 * sessions (session.c, session_features.c). */
#ifndef TW_PY_HOOKS_H
#define TW_PY_HOOKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/*
 * What the model watch looks at around a wrapped callable (the wrapper's `kind`, set at wrap time; a
 * session hooks the kinds its model watch asks for, see tw_hooks_t). All need args[0]: the instance or
 * the tensor the call is about.
 */
enum {
    TW_KIND_MODULE_FORWARD = 1u << 0, /* an nn.Module subclass's forward: args[0] is the instance */
    TW_KIND_MODULE_CALL = 1u << 1,    /* nn.Module.__call__: the same, and tensor statistics */
    TW_KIND_INPLACE = 1u << 2,        /* may update args[0] (a tensor, or a list of them) in place */
    TW_KIND_BOUNDARY = 1u << 3,       /* optimizer step, backward, zero_grad: parameters checked around it */
    TW_KIND_STEP = 1u << 4,           /* an optimizer's step: an outermost one ends a step (active.c) */
    TW_KIND_ALL = 31u,
    /* Internal, never given by Python: the API has a FLOP formula (flops.h; set from its name when
     * the wrapper is made), measured when the session counts FLOPs (config flops) */
    TW_KIND_FLOPS = 1u << 5,
};

/*
 * The session's model watch (torchwrapper._model_watch.ModelWatch): bound methods called around calls
 * of the kinds above, each with this thread's recording paused and its time left out of the calls in
 * progress. Borrowed from the session, which holds them; NULL when unused.
 */
typedef struct {
    uint32_t kinds;            /* TW_KIND_* hooked in this session */
    PyObject *resolve;         /* resolve(instance, parent_id): registers paths on a cache miss (modules table);
                                  parent_id: the path id of the innermost module forward in progress
                                  (not called for a transient of a kind in tw_transients) */
    PyObject *module_enter;    /* module_enter(instance) -> bool: an outermost module call begins; sample it? */
    PyObject *module_pre;      /* module_pre(instance, module_id, call_id, args, kwargs): before a sampled call */
    PyObject *module_exit;     /* module_exit(instance, module_id, call_id, result): after it */
    PyObject *update;          /* update(tensor_or_list, api_id, call_id, outer_call_id, outer_site) */
    PyObject *boundary_enter;  /* boundary_enter(instance, api_id) -> token */
    PyObject *boundary_exit;   /* boundary_exit(token, api_id, call_id, outer_call_id, outer_site) */
    int error_reported;        /* a hook's error was reported (once per session: reset at start) */
} tw_hooks_t;

#endif
