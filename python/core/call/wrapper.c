/* SPDX-License-Identifier: MIT */
/*
 * The profiling wrapper: the hot path of torchwrapper.
 *
 * A wrapper is installed in place of a torch callable. Each call reads the clock, calls the original
 * through vectorcall with the very same arguments, reads the clock again and appends a fixed-size
 * record to the calling thread's chunk (recorder.h). It takes no lock and never raises: the
 * original's result or exception is returned untouched. With args="none" it allocates no Python
 * object either; args="summary" reads tensor metadata through Python attributes first (args.c).
 *
 * Two types share this code. MethodWrapper is flagged Py_TPFLAGS_METHOD_DESCRIPTOR and has __get__,
 * so as a class attribute it binds like a function and `x.add(y)` / `a + b` call it with no bound
 * method allocated. Wrapper never binds, like a builtin function.
 */
#include "wrapper.h"

#include "active.h"
#include "args.h"
#include "below/backward.h"
#include "call_sites.h"
#include "exc.h"
#include "below/flops.h"
#include "watch/hooks.h"
#include "below/memory.h"
#include "own_cost.h"
#include "watch/model_watch_tables.h"



/* This thread's state in the active session. A thread state is valid only while `gen` equals
 * tw_active.gen; a stale one belongs to an ended session and is never touched again. */
typedef struct {
    tw_thread_t *thread;
    uint64_t gen;
    uint32_t module_depth; /* nn.Module.__call__ calls in progress (model watch) */
    int sampling;          /* tensor statistics are taken in the current step */
    uint32_t own_countdown; /* recorded calls until the next measured one (own_cost.h) */
} tw_thread_cache_t;

static _Thread_local tw_thread_cache_t thread_cache;

/*
 * The thread cache of the thread that called a wrapper last, found from its Python thread state.
 * Wrappers run with the GIL held, so the interpreter's current thread state names the calling thread:
 * a load and two compares, where a _Thread_local of a dlopen'ed module costs a call into the dynamic
 * linker's TLS resolver on every access (_dl_tlsdesc_dynamic: 34 instructions a wrapped call under
 * callgrind, and its code's cache lines beside torch's). A thread state's id is unique in its
 * interpreter, so a thread state freed and allocated again at the same address (by another thread,
 * or another interpreter) is not taken for the old one. Only the GIL's holder reads or writes it (the
 * GIL orders them); code that may run without the GIL (tw_pause_thread, ...) uses thread_cache
 * itself, the same memory.
 */
static struct {
    const PyThreadState *tstate;
    const PyInterpreterState *interp;
    uint64_t id;
    tw_thread_cache_t *cache;
} last_caller;

static __attribute__((noinline)) tw_thread_cache_t *caller_cache_slow(PyThreadState *tstate)
{
    last_caller.tstate = tstate;
    last_caller.interp = tstate != NULL ? tstate->interp : NULL;
    last_caller.id = tstate != NULL ? tstate->id : 0;
    last_caller.cache = &thread_cache;
    return &thread_cache;
}

/* This thread's cache, for code that holds the GIL (the wrappers). */
static inline tw_thread_cache_t *caller_cache_of(PyThreadState *tstate)
{
    if (TW_LIKELY(tstate == last_caller.tstate && tstate != NULL && tstate->id == last_caller.id &&
                  tstate->interp == last_caller.interp))
        return last_caller.cache;
    return caller_cache_slow(tstate);
}

static inline tw_thread_cache_t *caller_cache(void)
{
    return caller_cache_of(_PyThreadState_UncheckedGet());
}

static tw_thread_t *attach_thread(tw_thread_cache_t *cache, uint64_t gen)
{
    /* NULL (out of memory) is cached too: this thread then calls through without recording. */
    cache->thread = tw_recorder_attach(tw_active.recorder);
    tw_memory_attach(cache->thread); /* config memory: this thread's allocator reports */
    cache->gen = gen;
    cache->module_depth = 0;
    cache->sampling = 0;
    cache->own_countdown = TW_OWN_PERIOD;
    return cache->thread;
}

void tw_pause_thread(void)
{
    uint64_t gen = tw_active.gen;
    if (gen == 0)
        return;
    tw_thread_t *t = thread_cache.gen == gen ? thread_cache.thread : attach_thread(&thread_cache, gen);
    if (t != NULL)
        t->paused++;
}

int tw_current_call(uint64_t *call_id, uint64_t *outer_id, uint32_t *outer_site)
{
    uint64_t gen = tw_active.gen;
    if (gen == 0 || thread_cache.gen != gen || thread_cache.thread == NULL)
        return 0;
    tw_thread_t *t = thread_cache.thread;
    uint32_t depth = t->depth < TW_MAX_DEPTH ? t->depth : TW_MAX_DEPTH;
    if (depth == 0)
        return 0;
    *call_id = t->stack[depth - 1].call_id;
    *outer_id = t->stack[0].call_id;
    *outer_site = t->stack[0].site;
    return 1;
}

void tw_resume_thread(void)
{
    uint64_t gen = tw_active.gen;
    if (gen != 0 && thread_cache.gen == gen && thread_cache.thread != NULL && thread_cache.thread->paused > 0)
        thread_cache.thread->paused--;
}

/* Calls the original with the caller's arguments, as they came (PY_VECTORCALL_ARGUMENTS_OFFSET too). */
static inline PyObject *call_original(tw_wrapper_object *self, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames)
{
    if (TW_LIKELY(self->call != NULL))
        return self->call(self->wrapped, args, nargsf, kwnames);
    return PyObject_Vectorcall(self->wrapped, args, nargsf, kwnames);
}

/*
 * The same from the recorded path, which knows the calling thread's state: a builtin with no vectorcall
 * entry (torch.add, torch.matmul: METH_VARARGS) goes straight to what PyObject_Vectorcall would call
 * for it, _PyObject_MakeTpCall, public until 3.13 (CPython's own path for it, its checks included).
 */
static inline PyObject *call_original_in(tw_wrapper_object *self, PyThreadState *tstate, PyObject *const *args,
                                         size_t nargsf, PyObject *kwnames)
{
#if PY_VERSION_HEX < 0x030D0000 && !defined(Py_LIMITED_API)
    if (self->tp_call_only) /* never with a call entry (wrap.c) */
        return _PyObject_MakeTpCall(tstate, self->wrapped, args, PyVectorcall_NARGS(nargsf), kwnames);
#else
    (void)tstate;
#endif
    return call_original(self, args, nargsf, kwnames);
}

/* ---- the model watch: the path of wrappers whose kind a session hooks (never taken otherwise) -- */

/*
 * Calls a model watch hook with this thread's recording paused and the time it takes left out of the
 * calls in progress. Never raises: the exception in flight (the original's) is kept, and a hook's
 * own error is reported once per session as unraisable (the model watch catches its errors itself; this
 * is the backstop). Returns a new reference, or NULL when the hook failed.
 */
static PyObject *run_hook(tw_thread_t *t, tw_clock_source_t source, PyObject *hook, PyObject *const *args,
                          size_t nargs)
{
    uint64_t h0 = tw_clock_ticks(source);
    tw_saved_exc_t saved;
    tw_exc_save(&saved);
    t->paused++;
    PyObject *out = PyObject_Vectorcall(hook, args, nargs, NULL);
    t->paused--;
    if (out == NULL && !tw_active.hooks.error_reported) {
        tw_active.hooks.error_reported = 1;
        PyErr_WriteUnraisable(hook);
    }
    tw_exc_restore(&saved);
    uint64_t ticks = tw_clock_ticks(source) - h0;
    tw_thread_exclude(t, ticks);
    tw_own_calls.hook_ticks += ticks; /* the profiler's own cost, every hook (the GIL is held) */
    return out;
}

/* run_hook(hook, obj, a, b, c, d) with four integers, the result dropped. */
static void run_hook_ids(tw_thread_t *t, tw_clock_source_t source, PyObject *hook, PyObject *obj, uint64_t a,
                         uint64_t b, uint64_t c, uint64_t d)
{
    /* Runs after the original returned, maybe with its exception in flight: kept aside while the
     * integers are made (run_hook keeps it too), so that a failed allocation cannot erase it. */
    tw_saved_exc_t saved;
    tw_exc_save(&saved);
    PyObject *args[5] = {obj, PyLong_FromUnsignedLongLong(a), PyLong_FromUnsignedLongLong(b),
                         PyLong_FromUnsignedLongLong(c), PyLong_FromUnsignedLongLong(d)};
    if (args[1] != NULL && args[2] != NULL && args[3] != NULL && args[4] != NULL)
        Py_XDECREF(run_hook(t, source, hook, args, 5));
    else
        PyErr_Clear();
    tw_exc_restore(&saved);
    for (int i = 1; i < 5; i++)
        Py_XDECREF(args[i]);
}

/* The path id of the innermost module forward in progress on this thread (TW_MODULE_NONE: none). */
static uint32_t innermost_module(const tw_thread_t *t)
{
    uint32_t depth = t->depth < TW_MAX_DEPTH ? t->depth : TW_MAX_DEPTH;
    uint32_t parent = TW_MODULE_NONE;
    while (depth > 0 && parent == TW_MODULE_NONE)
        parent = t->stack[--depth].module_id;
    return parent;
}

/*
 * Asks the model watch for the path of *subject, a module instance missing from the table (its first
 * call), telling it parent, the path id of the innermost module forward in progress on this thread
 * (TW_MODULE_NONE: none). A module made anew in each step (transformers' BERT makes its
 * CrossEntropyLoss in forward) misses every step; with that id the model watch finds the path it gave
 * the last such instance without walking the Python stack (126 us a step on BERT, 1.5% of it,
 * before), and puts it in tw_transients, where the next one is found with no Python at all (see
 * record_module_forward). The hook may end the session.
 */
static void resolve_module(tw_thread_t *t, PyObject *subject, uint32_t parent)
{
    PyObject *args[2] = {subject, PyLong_FromUnsignedLong(parent)};
    if (args[1] == NULL) { /* out of memory: the model watch resolves without the hint */
        PyErr_Clear();
        Py_XDECREF(run_hook(t, tw_active.clock_source, tw_active.hooks.resolve, args, 1));
        return;
    }
    Py_XDECREF(run_hook(t, tw_active.clock_source, tw_active.hooks.resolve, args, 2));
    Py_DECREF(args[1]);
}

/* Whether obj, or an item of a list or tuple obj (torch._foreach_*_), is a tracked tensor. */
static int touches_tracked(PyObject *obj)
{
    if (tw_ptr_find(&tw_tracked, obj) != NULL)
        return 1;
    if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        PyObject **items = PySequence_Fast_ITEMS(obj);
        for (Py_ssize_t i = 0; i < n; i++)
            if (tw_ptr_find(&tw_tracked, items[i]) != NULL)
                return 1;
    }
    return 0;
}

/* args[1:] as a tuple and the keyword arguments as a dict (new references), for module_exit. */
static int call_arguments(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **tuple,
                          PyObject **kwargs)
{
    *tuple = PyTuple_New(nargs > 1 ? nargs - 1 : 0);
    *kwargs = PyDict_New();
    if (*tuple == NULL || *kwargs == NULL)
        goto fail;
    for (Py_ssize_t i = 1; i < nargs; i++)
        PyTuple_SET_ITEM(*tuple, i - 1, Py_NewRef(args[i]));
    for (Py_ssize_t i = 0; kwnames != NULL && i < PyTuple_GET_SIZE(kwnames); i++)
        if (PyDict_SetItem(*kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0)
            goto fail;
    return 0;
fail:
    Py_CLEAR(*tuple);
    Py_CLEAR(*kwargs);
    PyErr_Clear();
    return -1;
}

/*
 * Where the user's program made the call in frame: its caller's line, or when the caller is torch's
 * code (or the profiler's shims), the line outside torch that entered it (the boundary site), so that
 * every call is charged to a line of the program. An outermost call and a module's forward (entered
 * through Module.__call__, from the line that called the module) walk out of torch to find it; any
 * other call made by torch's code takes the site of the call around it, which is that line already:
 * no walk on the common path.
 */
static inline uint32_t call_site(const tw_wrapper_object *self, PyThreadState *tstate, const tw_thread_t *t,
                                 const tw_frame_t *frame)
{
    int outermost = frame == t->stack;
    uint32_t site = tw_caller_site_in(tstate, outermost || (self->kind & TW_KIND_MODULE_FORWARD));
    return site == TW_SITE_NONE && !outermost ? frame[-1].site : site;
}

/* ---- the model watch around a recorded call (record_call with watched != 0) ----------------------- */

/* What the model watch holds for one call, from before it begins to after it ended. */
typedef struct {
    PyObject *subject;     /* args[0], the instance or tensor the call is about, or NULL */
    int module_call;       /* an nn.Module call whose instance has a path: module_depth counts it */
    int sampled;           /* tensor statistics taken around it (module_pre, module_exit) */
    PyObject *token;       /* boundary_enter's answer, for boundary_exit; NULL: none */
    PyObject *id_object, *call_object; /* the module id and call id for the statistics hooks */
    uint64_t call_id, outer_id;
    uint32_t outer_site;   /* where the program made the outermost call in progress (updates carry it) */
} watch_t;

static void watch_clear(watch_t *watch)
{
    Py_CLEAR(watch->id_object);
    Py_CLEAR(watch->call_object);
    Py_CLEAR(watch->token);
}

/*
 * Before the call begins: the instance's path (one probe; a miss, the first call of an instance, asks
 * the model watch) into *module_id, whether this step's tensor statistics are sampled (decided when an
 * outermost module call begins; calls inside it follow), the boundary's token. 0, or -1 when a hook
 * ended the session (nothing held then).
 */
static __attribute__((noinline)) int watch_enter(const tw_wrapper_object *self, tw_thread_t *t, uint64_t gen,
                                                 uint32_t kind, PyObject *const *args, size_t nargsf, watch_t *watch,
                                                 uint32_t *module_id)
{
    tw_clock_source_t source = tw_active.clock_source;
    const tw_hooks_t *hooks = &tw_active.hooks;
    *watch = (watch_t){.subject = PyVectorcall_NARGS(nargsf) > 0 ? args[0] : NULL};
    if ((kind & (TW_KIND_MODULE_FORWARD | TW_KIND_MODULE_CALL)) && watch->subject != NULL) {
        tw_ptr_slot_t *slot = tw_ptr_find(&tw_modules, watch->subject);
        if (slot == NULL && hooks->resolve != NULL) {
            resolve_module(t, watch->subject, innermost_module(t));
            if (TW_UNLIKELY(tw_active.gen != gen))
                return -1;
            slot = tw_ptr_find(&tw_modules, watch->subject);
        }
        if (slot != NULL) {
            *module_id = slot->value;
            if (self->kind & TW_KIND_MODULE_FORWARD)
                slot->count++;
        }
    }
    if ((kind & TW_KIND_MODULE_CALL) && *module_id != TW_MODULE_NONE && hooks->module_enter != NULL) {
        tw_thread_cache_t *cache = caller_cache();
        if (cache->module_depth == 0) {
            PyObject *answer = run_hook(t, source, hooks->module_enter, &watch->subject, 1);
            /* outside the steps the schedule (or a capture) records, no statistics are taken */
            cache->sampling = answer == Py_True && tw_active.step_recorded;
            Py_XDECREF(answer);
            if (TW_UNLIKELY(tw_active.gen != gen))
                return -1;
        }
        watch->sampled = cache->sampling; /* this thread's own memory, whoever ran during the hook */
        watch->module_call = 1;
    }
    if ((kind & TW_KIND_BOUNDARY) && hooks->boundary_enter != NULL) {
        PyObject *api = PyLong_FromUnsignedLong(self->api_id);
        if (api != NULL) {
            PyObject *hook_args[2] = {watch->subject != NULL ? watch->subject : Py_None, api};
            watch->token = run_hook(t, source, hooks->boundary_enter, hook_args, 2);
            Py_DECREF(api);
        } else {
            PyErr_Clear();
        }
        if (TW_UNLIKELY(tw_active.gen != gen)) {
            watch_clear(watch);
            return -1;
        }
    }
    return 0;
}

/*
 * Once the call's frame began (frame NULL: too deep), before its clock starts: the ids the hooks
 * carry, and the inputs' statistics when sampled (before the call: an in-place module,
 * ReLU(inplace=True), changes them). 0, or -1 when a hook ended the session (nothing held then).
 */
static __attribute__((noinline)) int watch_begun(tw_thread_t *t, uint64_t gen, PyObject *const *args,
                                                 size_t nargsf, PyObject *kwnames, tw_frame_t *frame,
                                                 uint32_t module_id, watch_t *watch)
{
    if (frame != NULL) {
        watch->call_id = frame->call_id;
        watch->outer_id = t->stack[0].call_id;
        watch->outer_site = t->stack[0].site;
    }
    if (watch->sampled) {
        watch->id_object = PyLong_FromUnsignedLong(module_id);
        watch->call_object = PyLong_FromUnsignedLongLong(watch->call_id);
        if (watch->id_object == NULL || watch->call_object == NULL) {
            PyErr_Clear();
            Py_CLEAR(watch->id_object);
            Py_CLEAR(watch->call_object);
            watch->sampled = 0;
        }
    }
    const tw_hooks_t *hooks = &tw_active.hooks;
    if (watch->sampled && hooks->module_pre != NULL) {
        PyObject *call_args, *call_kwargs;
        if (call_arguments(args, PyVectorcall_NARGS(nargsf), kwnames, &call_args, &call_kwargs) == 0) {
            PyObject *hook_args[5] = {watch->subject, watch->id_object, watch->call_object, call_args, call_kwargs};
            Py_XDECREF(run_hook(t, tw_active.clock_source, hooks->module_pre, hook_args, 5));
            Py_DECREF(call_args);
            Py_DECREF(call_kwargs);
        }
        if (frame != NULL) /* the hook ran inside this call's frame, before its clock started */
            frame->excluded_at_begin = t->excluded_ticks;
        if (TW_UNLIKELY(tw_active.gen != gen)) {
            watch_clear(watch);
            return -1;
        }
    }
    if (watch->module_call)
        caller_cache()->module_depth++;
    return 0;
}

/* Once the call returned result (NULL: it raised), its record made when recorded (the session still
 * the one it began in): the outputs' statistics, an in-place update of a tracked tensor, the
 * boundary's exit. Drops what the model watch held. */
static __attribute__((noinline)) void watch_exit(const tw_wrapper_object *self, tw_thread_t *t, uint64_t gen,
                                                 uint32_t kind, PyObject *result, int recorded, watch_t *watch)
{
    if (watch->module_call)
        caller_cache()->module_depth--;
    if (recorded) {
        tw_clock_source_t source = tw_active.clock_source;
        const tw_hooks_t *hooks = &tw_active.hooks;
        if (watch->sampled && result != NULL && hooks->module_exit != NULL) {
            PyObject *hook_args[4] = {watch->subject, watch->id_object, watch->call_object, result};
            Py_XDECREF(run_hook(t, source, hooks->module_exit, hook_args, 4));
        }
        Py_CLEAR(watch->id_object);
        Py_CLEAR(watch->call_object);
        if ((kind & TW_KIND_INPLACE) && watch->subject != NULL && hooks->update != NULL && tw_tracked.used > 0 &&
            touches_tracked(watch->subject))
            run_hook_ids(t, source, hooks->update, watch->subject, self->api_id, watch->call_id, watch->outer_id,
                         watch->outer_site);
        if (watch->token != NULL && watch->token != Py_None && hooks->boundary_exit != NULL && tw_active.gen == gen)
            run_hook_ids(t, source, hooks->boundary_exit, watch->token, self->api_id, watch->call_id, watch->outer_id,
                         watch->outer_site);
    }
    watch_clear(watch);
}

/*
 * The recorded call. Always inlined, and called with constants for what the common path does not do
 * (gpu NULL, module_id TW_MODULE_NONE, flops 0, watched 0), so that path carries no GPU, FLOP or
 * model watch code at all: with GPU timing off, the GPU costs the hot path one load and one predictable
 * branch (in tw_wrapper_vectorcall). watched: the watch kinds this call has (self->kind & the
 * session's hooks' kinds, TW_KIND_*), each with its hooks around the call (watch_enter, watch_begun,
 * watch_exit).
 */
static inline __attribute__((always_inline)) PyObject *
record_call(tw_wrapper_object *self, PyThreadState *tstate, tw_thread_t *t, uint64_t gen, PyObject *const *args,
            size_t nargsf, PyObject *kwnames, const tw_gpu_hooks_t *gpu, uint32_t module_id, int flops,
            uint32_t watched)
{
    watch_t watch;
    if (watched != 0 && watch_enter(self, t, gen, watched, args, nargsf, &watch, &module_id) != 0)
        return call_original(self, args, nargsf, kwnames);
    tw_clock_source_t source = tw_active.clock_source;
    uint32_t args_len = 0;
    char args_text[TW_ARGS_MAX]; /* filled before the call: the arguments as they were passed */
    if (tw_active.args_mode != TW_ARGS_NONE) {
        t->paused++; /* the summary's own attribute reads are not the user's calls */
        args_len = tw_summarize_args(args_text, sizeof args_text, args, nargsf, kwnames, tw_active.args_mode);
        t->paused--;
    }
    tw_frame_t *frame = tw_call_begin(t);
    if (frame != NULL) {
        frame->api_id = self->api_id;
        if (TW_UNLIKELY(tw_active.seq_peek != NULL)) /* aten "backward": where the call's nodes begin */
            frame->seq_begin = tw_active.seq_peek();
    }
    if (module_id != TW_MODULE_NONE && frame != NULL) /* a constant TW_MODULE_NONE on the common path */
        frame->module_id = module_id;
    if (tw_active.sites_mode != TW_SITES_OFF && frame != NULL)
        frame->site = call_site(self, tstate, t, frame);
    if (watched != 0 && watch_begun(t, gen, args, nargsf, kwnames, frame, module_id, &watch) != 0)
        return call_original(self, args, nargsf, kwnames);
    int pushed = 0;
    if (gpu != NULL) {
        /* Kernels launched inside are attributed to this call (gpu.h). Past TW_MAX_DEPTH there is
         * no frame: the work still counts for the API. Outside the timed interval, so that CPU
         * times are the same with GPU timing on or off. */
        uint64_t call_id = frame != NULL ? frame->call_id : 0;
        pushed = gpu->push(gpu->kind, tw_gpu_external_id(call_id, self->api_id)) == 0;
    }
    uint64_t start = tw_clock_ticks(source);
    PyObject *result = call_original_in(self, tstate, args, nargsf, kwnames);
    uint64_t end = tw_clock_ticks(source);
    if (pushed) /* always, even if the session ended meanwhile: CUPTI's stack is per thread */
        gpu->pop(gpu->kind, NULL);
    if (gpu != NULL && tw_backward_gpu_ended != NULL) /* a backward node ran on this thread inside */
        tw_backward_gpu_settle();
    /* The call may have ended the session (stop() from inside a profiled call, or from another
     * thread while this one waited for the GIL): then t belongs to a dead session. */
    int recorded = TW_LIKELY(tw_active.gen == gen);
    if (recorded) {
        const tw_torch_flops_node_t *nodes = NULL;
        unsigned n_nodes = 0;
        if (flops && frame != NULL && result != NULL) /* a constant 0 on the common path */
            n_nodes = tw_flops_measure(self->flops_kind, frame, args, nargsf, kwnames, result, tw_active.seq_peek,
                                       &nodes);
        if (TW_UNLIKELY(tw_active.seq_peek != NULL) && frame != NULL)
            tw_backward_link_call(t, frame, nodes, n_nodes); /* the autograd nodes this call created are its own */
        tw_call_end_args(t, frame, self->api_id, start, end, result == NULL ? TW_RECORD_ERROR : 0, args_text,
                         args_len);
    }
    if (watched != 0)
        watch_exit(self, t, gen, watched, result, recorded, &watch);
    return result;
}

/* A call with the model watch's hooks around it: noinline, so that the common path stays small; flatten: its
 * own copy of tw_call_end_args (see record_call_gpu). FLOPs measured when the kinds say so. */
static __attribute__((noinline, flatten)) PyObject *
watched_vectorcall(tw_wrapper_object *self, PyThreadState *tstate, tw_thread_t *t, uint64_t gen,
                   PyObject *const *args, size_t nargsf, PyObject *kwnames, uint32_t kind)
{
    return record_call(self, tstate, t, gen, args, nargsf, kwnames, tw_active.gpu, TW_MODULE_NONE,
                       (kind & TW_KIND_FLOPS) != 0, kind);
}

/* flatten: this copy inlines its own tw_call_end_args early, which leaves the GPU-off path the only
 * remaining caller, so GCC inlines it there as before (a second caller made it an out-of-line call:
 * +32 instructions per call, measured with callgrind). */
static __attribute__((noinline, flatten)) PyObject *
record_call_gpu(tw_wrapper_object *self, PyThreadState *tstate, tw_thread_t *t, uint64_t gen, PyObject *const *args,
                size_t nargsf, PyObject *kwnames, const tw_gpu_hooks_t *gpu)
{
    return record_call(self, tstate, t, gen, args, nargsf, kwnames, gpu, TW_MODULE_NONE, 0, 0);
}

/* A call of an API with a FLOP formula while the session counts FLOPs (flops.h): its own copy of the
 * recorded call, so that the common path carries no FLOP code. */
static __attribute__((noinline, flatten)) PyObject *
record_flops_call(tw_wrapper_object *self, PyThreadState *tstate, tw_thread_t *t, uint64_t gen, PyObject *const *args,
                  size_t nargsf, PyObject *kwnames)
{
    return record_call(self, tstate, t, gen, args, nargsf, kwnames, tw_active.gpu, TW_MODULE_NONE, 1, 0);
}

/*
 * A module forward when module paths are all that the model watch asks for: one probe of the instance
 * table (a miss, the instance's first call: a transient of a kind seen, else the model watch is asked),
 * then the plain recorded call.
 */
static __attribute__((noinline, flatten)) PyObject *
record_module_forward(tw_wrapper_object *self, PyThreadState *tstate, tw_thread_t *t, uint64_t gen,
                      PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    uint32_t module_id = TW_MODULE_NONE;
    if (PyVectorcall_NARGS(nargsf) > 0) {
        tw_ptr_slot_t *slot = tw_ptr_find(&tw_modules, args[0]);
        if (TW_UNLIKELY(slot == NULL) && tw_active.hooks.resolve != NULL) {
            PyObject *subject = args[0];
            uint32_t parent = innermost_module(t);
            if (tw_transients_used > 0 && parent != TW_MODULE_NONE) /* a transient of a kind seen: no Python */
                module_id = tw_transient_find(subject, parent);
            if (module_id == TW_MODULE_NONE) {
                resolve_module(t, subject, parent);
                if (TW_UNLIKELY(tw_active.gen != gen))
                    return call_original(self, args, nargsf, kwnames);
                slot = tw_ptr_find(&tw_modules, subject);
            }
        }
        if (slot != NULL) {
            module_id = slot->value;
            slot->count++;
        }
    }
    const tw_gpu_hooks_t *gpu = tw_active.gpu;
    if (TW_UNLIKELY(gpu != NULL))
        return record_call(self, tstate, t, gen, args, nargsf, kwnames, gpu, module_id, 0, 0);
    return record_call(self, tstate, t, gen, args, nargsf, kwnames, NULL, module_id, 0, 0);
}

/* Optimizer steps in progress on this thread (recorded or not): the outermost one ends a step. */
static _Thread_local uint32_t optimizer_depth;

/*
 * An optimizer's step while steps end at optimizer steps: recorded as usual (t NULL: not recorded,
 * outside the schedule's steps), and the end of an outermost one ends the step (active.c), after its
 * record is made, so that it belongs to the step it ends.
 */
static __attribute__((noinline)) PyObject *
optimizer_step(tw_wrapper_object *self, PyThreadState *tstate, tw_thread_t *t, uint64_t gen, PyObject *const *args,
               size_t nargsf, PyObject *kwnames)
{
    optimizer_depth++;
    uint32_t kind = self->kind & tw_active.hooks.kinds & ~(uint32_t)TW_KIND_STEP;
    PyObject *result;
    if (t == NULL)
        result = call_original(self, args, nargsf, kwnames);
    else if (kind != 0)
        result = watched_vectorcall(self, tstate, t, gen, args, nargsf, kwnames, kind);
    else
        result = record_call_gpu(self, tstate, t, gen, args, nargsf, kwnames, tw_active.gpu);
    if (--optimizer_depth == 0 && tw_active.gen == gen && !tw_active.manual_steps)
        tw_step_end();
    return result;
}

/* A call outside the schedule's steps (tw_active.idle): nothing recorded, optimizer steps watched. */
static __attribute__((noinline)) PyObject *idle_call(tw_wrapper_object *self, uint64_t gen, PyObject *const *args,
                                                    size_t nargsf, PyObject *kwnames)
{
    if ((self->kind & TW_KIND_STEP) && !tw_active.manual_steps)
        return optimizer_step(self, _PyThreadState_UncheckedGet(), NULL, gen, args, nargsf, kwnames);
    return call_original(self, args, nargsf, kwnames);
}

/* A recorded call, by the kinds its wrapper has in this session. */
static inline __attribute__((always_inline)) PyObject *
recorded_vectorcall(tw_wrapper_object *self, PyThreadState *tstate, tw_thread_t *t, uint64_t gen,
                    PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    uint32_t kind = self->kind & tw_active.hooks.kinds;
    if (TW_UNLIKELY(kind != 0)) {
        if (kind == TW_KIND_MODULE_FORWARD)
            return record_module_forward(self, tstate, t, gen, args, nargsf, kwnames);
        if (kind == TW_KIND_FLOPS)
            return record_flops_call(self, tstate, t, gen, args, nargsf, kwnames);
        if (kind & TW_KIND_STEP)
            return optimizer_step(self, tstate, t, gen, args, nargsf, kwnames);
        return watched_vectorcall(self, tstate, t, gen, args, nargsf, kwnames, kind);
    }
    const tw_gpu_hooks_t *gpu = tw_active.gpu;
    if (TW_UNLIKELY(gpu != NULL))
        return record_call_gpu(self, tstate, t, gen, args, nargsf, kwnames, gpu);
    return record_call(self, tstate, t, gen, args, nargsf, kwnames, NULL, TW_MODULE_NONE, 0, 0);
}

/*
 * One recorded call in TW_OWN_PERIOD: the same, with the clock read at its entry and exit, so that
 * the profiler's own time in it is known (own_cost.h). flatten: its own copy of what it calls (see
 * record_call_gpu), so that the common path keeps its inlining.
 */
static __attribute__((noinline, flatten)) PyObject *
measured_vectorcall(tw_wrapper_object *self, PyThreadState *tstate, tw_thread_t *t, uint64_t gen,
                    PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    tw_clock_source_t source = tw_active.clock_source;
    int kind = tw_active.detail ? TW_OWN_DETAIL : TW_OWN_PLAIN;
    uint64_t id = t->next_id != t->id_end ? t->next_id : 0; /* the id the call takes (0: a new block's) */
    uint64_t excluded = t->excluded_ticks;
    uint64_t entry = tw_clock_ticks(source);
    PyObject *result = recorded_vectorcall(self, tstate, t, gen, args, nargsf, kwnames);
    uint64_t exit = tw_clock_ticks(source);
    if (TW_LIKELY(tw_active.gen == gen)) /* else t belongs to an ended session */
        tw_own_sample(t, kind, id, entry, exit, excluded);
    return result;
}

PyObject *tw_wrapper_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    tw_wrapper_object *self = (tw_wrapper_object *)callable;
    uint64_t gen = tw_active.gen;
    if (gen == 0)
        return call_original(self, args, nargsf, kwnames);
    if (TW_UNLIKELY(tw_active.idle)) /* outside the schedule's steps: the one check it costs */
        return idle_call(self, gen, args, nargsf, kwnames);
    PyThreadState *tstate = _PyThreadState_UncheckedGet(); /* read once: the call site's frame is its */
    tw_thread_cache_t *cache = caller_cache_of(tstate);
    tw_thread_t *t = TW_LIKELY(cache->gen == gen) ? cache->thread : attach_thread(cache, gen);
    if (TW_UNLIKELY(t == NULL || t->paused)) /* not recorded; an optimizer step still ends a step */
        return idle_call(self, gen, args, nargsf, kwnames);
    if (TW_UNLIKELY(--cache->own_countdown == 0)) { /* the profiler's own cost, measured */
        cache->own_countdown = TW_OWN_PERIOD;
        return measured_vectorcall(self, tstate, t, gen, args, nargsf, kwnames);
    }
    return recorded_vectorcall(self, tstate, t, gen, args, nargsf, kwnames);
}
