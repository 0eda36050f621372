/* SPDX-License-Identifier: MIT */
/* Shared declarations of the torchwrapper._core extension module. */
#ifndef TW_PY_MODULE_H
#define TW_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchwrapper/torchwrapper.h"

typedef struct {
    PyTypeObject *wrapper_type;        /* Wrapper: calls never bind (builtins, partials, ...) */
    PyTypeObject *method_wrapper_type; /* MethodWrapper: binds like a function (x.f(...)) */
    PyTypeObject *session_type;
    PyTypeObject *record_reader_type;  /* RecordReader (reader.c) */
} tw_module_state;

/*
 * The exception in flight, kept aside around profiler work and put back untouched (the caller's code
 * may be handling it). 3.12+ holds one object; 3.11 the (type, value, traceback) triple.
 */
typedef struct {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc;
#else
    PyObject *type, *value, *traceback;
#endif
} tw_saved_exc_t;

static inline void tw_exc_save(tw_saved_exc_t *saved)
{
#if PY_VERSION_HEX >= 0x030C0000
    saved->exc = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&saved->type, &saved->value, &saved->traceback);
#endif
}

/* Puts the saved exception back (steals it); any exception raised since is dropped first. */
static inline void tw_exc_restore(tw_saved_exc_t *saved)
{
    PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(saved->exc);
#else
    PyErr_Restore(saved->type, saved->value, saved->traceback);
#endif
}

/* ---- Session's arguments (options.c) ---- */

/* The config keys Session takes as keyword arguments, in its keyword order. */
#define TW_SESSION_CONFIG_KEYWORDS 15
extern const char *const tw_session_config_keywords[TW_SESSION_CONFIG_KEYWORDS];

/* The given config arguments (values[i] for tw_session_config_keywords[i], NULL when not given)
 * through the library's validator with a bare Session's defaults: a new dict of every key, or NULL
 * with ValueError naming the key, the value and what is accepted. */
PyObject *tw_session_config(PyObject *const *values);

/* config[key] as UTF-8 (borrowed from the dict), or NULL when not a str (None); as an integer. */
const char *tw_config_str(PyObject *config, const char *key);
unsigned long long tw_config_uint(PyObject *config, const char *key);

/* config["schedule"] (null or the validator's complete object) as a schedule. 0, or -1 with an
 * exception. */
int tw_config_schedule(PyObject *config, tw_schedule_t *out);

/* Copies that outlive the Python objects (PyMem_Raw; NULL with MemoryError). */
char *tw_dup_cstr(const char *s);
char *tw_dup_utf8(PyObject *text);

/* cupti_paths (a sequence of str) as a NULL-terminated array (PyMem_Raw), or NULL with an exception;
 * freed by tw_free_paths. */
char **tw_cupti_paths_of(PyObject *paths);
void tw_free_paths(char **paths);

typedef enum { TW_ARGS_NONE = 0, TW_ARGS_SUMMARY = 1, TW_ARGS_REPR = 2 } tw_args_mode_t;

/*
 * What tracing looks at around a wrapped callable (the wrapper's `kind`, set at wrap time; a
 * session hooks the kinds its tracer asks for, see tw_hooks_t). All need args[0]: the instance or
 * the tensor the call is about.
 */
enum {
    TW_KIND_MODULE_FORWARD = 1u << 0, /* an nn.Module subclass's forward: args[0] is the instance */
    TW_KIND_MODULE_CALL = 1u << 1,    /* nn.Module.__call__: the same, and tensor statistics */
    TW_KIND_INPLACE = 1u << 2,        /* may update args[0] (a tensor, or a list of them) in place */
    TW_KIND_BOUNDARY = 1u << 3,       /* optimizer step, backward, zero_grad: parameters checked around it */
    TW_KIND_STEP = 1u << 4,           /* an optimizer's step: an outermost one ends a step (steps.c) */
    TW_KIND_ALL = 31u,
};

/*
 * The session's tracer (torchwrapper._trace.Tracer): bound methods called around calls of the
 * kinds above, each with this thread's recording paused and its time left out of the calls in
 * progress. Borrowed from the session, which holds them; NULL when unused.
 */
typedef struct {
    uint32_t kinds;            /* TW_KIND_* hooked in this session */
    PyObject *resolve;         /* resolve(instance): registers paths on a cache miss (modules table) */
    PyObject *module_enter;    /* module_enter(instance) -> bool: an outermost module call begins; sample it? */
    PyObject *module_pre;      /* module_pre(instance, module_id, call_id, args, kwargs): before a sampled call */
    PyObject *module_exit;     /* module_exit(instance, module_id, call_id, result): after it */
    PyObject *update;          /* update(tensor_or_list, api_id, call_id, outer_call_id, outer_site) */
    PyObject *boundary_enter;  /* boundary_enter(instance, api_id) -> token */
    PyObject *boundary_exit;   /* boundary_exit(token, api_id, call_id, outer_call_id, outer_site) */
    int error_reported;        /* a hook's error was reported (once per session: reset at start) */
} tw_hooks_t;

/*
 * A table of live objects by address, guarded by the GIL: open addressing, linear probing. Entries
 * are put in and taken out by the tracer, which holds a weak reference to each object and takes
 * its entry out when the object dies, before its address can be reused.
 */
typedef struct {
    uintptr_t key;   /* 0: empty, 1: deleted */
    uint32_t value;
    uint32_t count;  /* calls seen (modules table) */
} tw_ptr_slot_t;

typedef struct {
    tw_ptr_slot_t *slots;
    size_t mask;     /* capacity - 1 (a power of two), or 0 with slots NULL */
    size_t used;     /* live entries */
    size_t filled;   /* live and deleted */
} tw_ptr_table_t;

static inline size_t tw_ptr_hash(uintptr_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 29);
}

/* The entry of object p, or NULL. Valid until the table changes. */
static inline tw_ptr_slot_t *tw_ptr_find(const tw_ptr_table_t *table, const void *p)
{
    if (table->used == 0)
        return NULL;
    uintptr_t key = (uintptr_t)p;
    for (size_t i = tw_ptr_hash(key) & table->mask;; i = (i + 1) & table->mask) {
        tw_ptr_slot_t *slot = &table->slots[i];
        if (slot->key == key)
            return slot;
        if (slot->key == 0)
            return NULL;
    }
}

extern tw_ptr_table_t tw_modules; /* nn.Module instance -> module id (TW_MODULE_*), calls */
extern tw_ptr_table_t tw_tracked; /* tracked tensor (parameter, grad) -> tracer's index */

/* ---- call sites (sites.c) ---- */

typedef enum { TW_SITES_OFF = 0, TW_SITES_BOUNDARY = 1, TW_SITES_ALL = 2 } tw_sites_mode_t;

/*
 * The session's cache of call sites by (code object, instruction offset): one probe per call. A
 * code object is a key only while the cache holds a reference to it (its entry with lasti
 * TW_SITE_CODE_ENTRY, made first), so an address cannot be reused under a key. Guarded by the GIL.
 */
#define TW_SITE_CODE_ENTRY UINT32_MAX
#define TW_SITE_IN_TORCH 0x80000000u /* value flag ("boundary"): the caller is torch's own code */

typedef struct {
    uintptr_t code;  /* 0: empty */
    uint32_t lasti;  /* the caller's instruction offset, or TW_SITE_CODE_ENTRY */
    uint32_t value;  /* a site id, or TW_SITE_IN_TORCH; a code entry: TW_SITE_IN_TORCH or 0 */
} tw_site_slot_t;

typedef struct {
    tw_site_slot_t *slots;
    size_t mask;     /* capacity - 1, or 0 with slots NULL */
    size_t used;
} tw_site_cache_t;

extern tw_site_cache_t tw_site_cache;

static inline size_t tw_site_hash(uintptr_t code, uint32_t lasti)
{
    return (size_t)(((code >> 4) ^ ((uint64_t)lasti << 24)) * 0x9E3779B97F4A7C15ull >> 29);
}

/* Slow paths of tw_caller_site (a key's first call, and an outermost call made from torch's code). */
uint32_t tw_site_miss(PyCodeObject *code, int lasti);
uint32_t tw_site_outside_torch(PyFrameObject *frame);

/* Starts (mode != OFF) or ends the sites of the active session: the cache, the torch directory. 0, or
 * -1 with an exception. */
int tw_sites_begin(tw_sites_mode_t mode, tw_sites_t *sites);
void tw_sites_end(void);

/*
 * The profiling session that wrappers record into. Process-wide on purpose: the wrappers are
 * installed into torch, which is one per process, and a wrapper's hot path must not look anything up
 * to find it. Guarded by the GIL: it changes only in Session.start/stop, and the hot path reads it with
 * the GIL held (before and after calling through), so a session cannot vanish under a recording call.
 */
typedef struct {
    uint64_t gen;                  /* 0: no session; else a number unique to this session */
    /* 1 outside the schedule's active and warmup steps when the summary counts active steps only:
     * wrappers call through, recording nothing (optimizer steps are still watched for the step's
     * end). Flipped at step boundaries (steps.c), read by every call right after gen. */
    uint32_t idle;
    uint32_t manual_steps;         /* the program marks steps (Session.step()): optimizer steps do not */
    uint32_t step;                 /* the current step, counted from 0 (also in the recorder) */
    uint32_t step_recorded;        /* the schedule or a capture records the current step's calls */
    tw_args_mode_t args_configured; /* the session's args mode; args_mode is NONE outside active steps */
    tw_schedule_t schedule;
    /* On-demand capture (config on_demand): the capture recording, steps [capture_from, capture_to),
     * active whatever the schedule; capture_to == 0: none. */
    uint64_t capture_from, capture_to;
    tw_ondemand_t *ondemand;       /* NULL: on_demand off */
    tw_writer_t *writer;           /* the session's, NULL when records stay in memory */
    tw_recorder_t *recorder;
    tw_clock_source_t clock_source;
    tw_args_mode_t args_mode;
    PyTypeObject *tensor_type;     /* torch._C.TensorBase when torch is imported (held by the session) */
    PyObject *session;             /* strong reference to the active Session object */
    tw_hooks_t hooks;              /* tracing; kinds == 0 when the session has no tracer */
    const tw_gpu_hooks_t *gpu;     /* CUPTI's push/pop while GPU timing is on; else NULL */
    tw_sites_mode_t sites_mode;    /* call sites recorded (sites.c) */
    tw_sites_t *sites;             /* the session's table of them, while sites_mode != OFF */
    uint32_t sites_overflow_id;    /* its id of the sites past its cap */
    /* aten "backward": the autograd sequence number of this thread (backward.h), read when a call
     * begins and ends to link the nodes it creates to it; NULL when backward nodes are off */
    uint64_t (*seq_peek)(void);
} tw_active_t;

int tw_args_init(void);

/* Writes a summary of a call's arguments (summary or repr mode) into buf; returns its length. */
uint32_t tw_summarize_args(char *buf, size_t size, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                           tw_args_mode_t mode);

extern tw_active_t tw_active;

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

static inline const tw_iframe_t *tw_iframe_current(void)
{
    return (const tw_iframe_t *)_PyThreadState_UncheckedGet()->cframe->current_frame;
}

/* PyFrame_GetLasti()'s value: the byte offset of the frame's instruction. */
static inline int tw_iframe_lasti(const tw_iframe_t *f)
{
    return (int)(f->prev_instr - f->f_code->co_code_adaptive);
}
#endif

extern int tw_site_frames_fast; /* the mirror above is used (checked by tw_sites_begin) */

/* The cached value of (code, lasti), or the slow path's. */
static inline uint32_t tw_site_value(PyCodeObject *code, int lasti)
{
    size_t mask = tw_site_cache.mask;
    if (mask != 0) {
        for (size_t i = tw_site_hash((uintptr_t)code, (uint32_t)lasti) & mask;; i = (i + 1) & mask) {
            const tw_site_slot_t *slot = &tw_site_cache.slots[i];
            if (slot->code == (uintptr_t)code && slot->lasti == (uint32_t)lasti)
                return slot->value;
            if (slot->code == 0)
                break;
        }
    }
    return tw_site_miss(code, lasti);
}

uint32_t tw_caller_site_public(int outermost);
#ifdef TW_SITE_FRAME_MIRROR
uint32_t tw_site_outside_torch_fast(const tw_iframe_t *frame);
#endif

/*
 * The site of the call the current Python frame is making (sites.h ids): the caller's (code,
 * offset) looked up in the cache. In "boundary" mode a caller in torch's own code gives no site,
 * except to an outermost call, which gets the nearest frame outside torch. Never raises.
 */
static inline uint32_t tw_caller_site(int outermost)
{
#ifdef TW_SITE_FRAME_MIRROR
    if (TW_LIKELY(tw_site_frames_fast)) {
        const tw_iframe_t *frame = tw_iframe_current();
        if (frame == NULL)
            return TW_SITE_NONE;
        if (TW_UNLIKELY(tw_iframe_incomplete(frame)))
            return tw_caller_site_public(outermost);
        uint32_t value = tw_site_value(frame->f_code, tw_iframe_lasti(frame));
        if (TW_UNLIKELY(value & TW_SITE_IN_TORCH))
            return outermost ? tw_site_outside_torch_fast(frame) : TW_SITE_NONE;
        if (TW_UNLIKELY(value == tw_active.sites_overflow_id) && value != TW_SITE_NONE)
            tw_sites_note_overflow(tw_active.sites, 1);
        return value;
    }
#endif
    return tw_caller_site_public(outermost);
}

int tw_wrapper_add_types(PyObject *module, tw_module_state *state);
int tw_session_add_type(PyObject *module, tw_module_state *state);
PyObject *tw_wrap(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *tw_wrap_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_install(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_restore(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_scan_modules(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

int tw_trace_add_functions(PyObject *module);

/* The record reader (reader.c): RecordReader, record_kind(), read_sites(). */
int tw_reader_add_functions(PyObject *module, tw_module_state *state);
void tw_ptr_table_clear(tw_ptr_table_t *table);

/* The innermost recorded call in progress on this thread, the outermost one and its site: 1, or 0 if none. */
int tw_current_call(uint64_t *call_id, uint64_t *outer_id, uint32_t *outer_site);

/* module.attribute of a module already imported (the extension never imports torch itself): a new
 * reference, or NULL without an error when the module is not imported or lacks it. */
PyObject *tw_imported_attribute(const char *module, const char *attribute);

/* ---- steps (steps.c) ---- */

/* Sets tw_active's step fields for a session that starts recording at step 0 under schedule. */
void tw_steps_start(const tw_schedule_t *schedule, tw_args_mode_t args_mode);

/* Ends the current step (with the GIL held, in the active session): the next one begins, and the
 * schedule says whether wrappers record in it. */
void tw_step_end(void);

/* Session.step() of the active session: from now on only the program's marks end steps. The first
 * mark ends a step only if no optimizer step has ended one (then the current step goes on). */
void tw_step_mark(void);
/* Only tw_step_mark() ends steps from now on (optimizer steps no longer do); the step goes on. */
void tw_steps_manual(void);

/* Named ranges (ranges.c): _core.range_begin(name) and _core.range_end(). */
PyObject *tw_range_begin(PyObject *module, PyObject *name);
PyObject *tw_range_end(PyObject *module, PyObject *unused);

/* Suspends recording on the calling thread while the profiler runs its own Python code. */
void tw_pause_thread(void);
void tw_resume_thread(void);

#endif
