/* SPDX-License-Identifier: MIT */
/*
 * Session: one profiling session. start() makes its recorder the one every wrapper records into
 * (active.c); stop() ends that and gathers the threads' partial chunks. What it gives back,
 * records(), stats() and its streams, is in session_output.c. One session records at a time in a
 * process.
 */
#include "session.h"

#include <pthread.h>
#include <string.h>

#include "active.h"
#include "atfork.h"
#include "backward.h"
#include "call_sites.h"
#include "exc.h"
#include "flops.h"
#include "imported.h"
#include "layer.h"
#include "memory.h"
#include "session_config.h"
#include "session_object.h"
#include "session_output.h"
#include "trace_tables.h"
#include "wrapper.h"



/* A forked child must not call CUPTI (gpu.h): the wrappers stop pushing correlation ids there. */
static void gpu_after_fork_in_child(void)
{
    tw_active_forget_gpu();
}

/* "GPU timing unavailable" is said once per process, whatever the number of sessions, and only where
 * there is a GPU to time: on a machine without a CUDA device it is what a user expects, and the
 * reason stays in stats()["gpu_unavailable"] and the manifest. */
static int gpu_unavailable_said;

/*
 * Starts GPU timing for a session that is starting, as its gpu mode says. Returns 0 (on, or off
 * with the reason kept, and said once under "auto" when there is a CUDA device), or -1 with an
 * exception under "on".
 */
static int start_gpu(tw_session_object *self)
{
    char *reason = self->features[TW_SESSION_GPU].reason;
    size_t reason_size = sizeof self->features[TW_SESSION_GPU].reason;
    if (self->gpu_mode == TW_GPU_OFF)
        return 0;
    int rc = TW_EUNAVAIL;
    if (!self->gpu_device) {
        /* the reason is known already (gpu_reason_known) */
    } else if (self->writer == NULL) {
        snprintf(reason, reason_size,
                 "GPU records are written to files, and this session keeps its records in memory (give out_dir)");
    } else {
        tw_atfork_register(TW_ATFORK_GPU, NULL, NULL, gpu_after_fork_in_child);
        tw_gpu_config_t config = {.candidates = (const char *const *)self->cupti_paths, .device_available = 1,
                                  .flush_interval_ns = self->config.flush_interval_ns};
        Py_BEGIN_ALLOW_THREADS /* loading CUPTI and starting it take milliseconds; nothing here needs Python */
        rc = tw_gpu_start(&config, self->writer, &self->clock, &self->gpu, reason, reason_size);
        Py_END_ALLOW_THREADS
    }
    if (rc == 0)
        return 0;
    if (self->gpu_mode == TW_GPU_ON) {
        PyErr_Format(PyExc_RuntimeError, "gpu=\"on\": GPU timing is unavailable: %s (gpu=\"auto\" profiles CPU "
                                         "time instead)", reason);
        return -1;
    }
    if (!gpu_unavailable_said && self->gpu_device) {
        gpu_unavailable_said = 1;
        PySys_FormatStderr("torchwrapper: GPU timing unavailable: %s; profiling CPU time only\n", reason);
    }
    return 0;
}

/*
 * Why GPU timing will be off, where that is known before the writer starts (no CUDA device), into
 * the GPU feature's reason and the manifest ("gpu_unavailable"), which the writer copies when it is created: on a
 * machine without a GPU nothing is said on stderr, and the manifest keeps the reason. 0, or -1 with
 * an exception (out of memory).
 */
static int gpu_reason_known(tw_session_object *self)
{
    char *reason = self->features[TW_SESSION_GPU].reason;
    reason[0] = '\0';
    if (self->gpu_mode == TW_GPU_OFF || self->gpu_device)
        return 0;
    snprintf(reason, sizeof self->features[TW_SESSION_GPU].reason, "no CUDA device (torch.cuda.is_available() is False)");
    if (self->manifest_json == NULL || self->out_dir == NULL)
        return 0;
    size_t len = strlen(self->manifest_json);
    while (len > 0 && (self->manifest_json[len - 1] == ' ' || self->manifest_json[len - 1] == '\n'))
        len--;
    size_t start = 0;
    while (start < len && (self->manifest_json[start] == ' ' || self->manifest_json[start] == '\n'))
        start++;
    if (len - start < 2 || self->manifest_json[start] != '{' || self->manifest_json[len - 1] != '}')
        return 0; /* not an object: the writer says so */
    size_t reason_len = strlen(reason);
    char *text = PyMem_RawMalloc(len + 6 * reason_len + 32);
    if (text == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(text, self->manifest_json, len - 1); /* without its '}' */
    char *p = text + len - 1;
    const char *body = text + start + 1;
    while (body < p && (*body == ' ' || *body == '\n'))
        body++;
    p += sprintf(p, "%s\"gpu_unavailable\":", body < p ? "," : "");
    p = tw_json_escape(p, reason, reason_len);
    strcpy(p, "}");
    PyMem_RawFree(self->manifest_json);
    self->manifest_json = text;
    self->config.manifest_json = text;
    return 0;
}

/* torch._C.TensorBase when torch is imported: a new reference, or NULL (without an error). The
 * extension never imports torch itself. */
static PyObject *find_tensor_type(void)
{
    PyObject *type = tw_imported_attribute("torch._C", "TensorBase");
    if (type != NULL && !PyType_Check(type))
        Py_CLEAR(type);
    return type;
}

static void clear_hooks(tw_hooks_t *hooks)
{
    Py_CLEAR(hooks->resolve);
    Py_CLEAR(hooks->module_enter);
    Py_CLEAR(hooks->module_pre);
    Py_CLEAR(hooks->module_exit);
    Py_CLEAR(hooks->update);
    Py_CLEAR(hooks->boundary_enter);
    Py_CLEAR(hooks->boundary_exit);
    hooks->kinds = 0;
    hooks->error_reported = 0; /* each session reports its own first hook error */
}

/* tracer.name, or NULL (without an error) when it is None or missing. */
static PyObject *hook_of(PyObject *tracer, const char *name)
{
    PyObject *hook = PyObject_GetAttrString(tracer, name);
    if (hook == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear();
    if (hook == Py_None)
        Py_CLEAR(hook);
    return hook;
}

/* The tracer's kinds (an int attribute) and hooks. Returns 0, or -1 with an exception. */
static int take_hooks(PyObject *tracer, tw_hooks_t *hooks)
{
    clear_hooks(hooks);
    if (tracer == Py_None)
        return 0;
    PyObject *kinds = PyObject_GetAttrString(tracer, "kinds");
    if (kinds == NULL)
        return -1;
    unsigned long value = PyLong_AsUnsignedLong(kinds);
    Py_DECREF(kinds);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    hooks->resolve = hook_of(tracer, "resolve");
    hooks->module_enter = hook_of(tracer, "module_enter");
    hooks->module_pre = hook_of(tracer, "module_pre");
    hooks->module_exit = hook_of(tracer, "module_exit");
    hooks->update = hook_of(tracer, "update");
    hooks->boundary_enter = hook_of(tracer, "boundary_enter");
    hooks->boundary_exit = hook_of(tracer, "boundary_exit");
    if (PyErr_Occurred()) {
        clear_hooks(hooks);
        return -1;
    }
    hooks->kinds = (uint32_t)(value & TW_KIND_ALL);
    return 0;
}

/*
 * Session(**config keys, rank, manifest, per_process_names, gpu_device, cupti_paths, tracer,
 * torch_layer): the config keys (tw_session_config_keywords) go through the library's validator and
 * come back typed; the others are the Python layer's.
 */
static PyObject *session_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"rank", "manifest", "per_process_names", "gpu_device", "cupti_paths", "tracer",
                               "torch_layer", NULL};
    /* values[i]: tw_session_config_keywords[i], NULL when not given (the validator's default applies) */
    PyObject *values[TW_SESSION_CONFIG_KEYWORDS] = {NULL};
    PyObject *rest = kwargs != NULL ? PyDict_Copy(kwargs) : PyDict_New();
    if (rest == NULL)
        return NULL;
    for (size_t i = 0; i < TW_SESSION_CONFIG_KEYWORDS; i++) {
        values[i] = PyDict_GetItemString(rest, tw_session_config_keywords[i]); /* borrowed from kwargs too */
        if (values[i] != NULL && PyDict_DelItemString(rest, tw_session_config_keywords[i]) < 0) {
            Py_DECREF(rest);
            return NULL;
        }
    }
    PyObject *manifest = Py_None, *cupti_paths = Py_None, *tracer = Py_None;
    const char *torch_layer = NULL, *torch_version = NULL;
    long long rank = -1;
    int per_process_names = 0, gpu_device = 0;
    int parsed = PyArg_ParseTupleAndKeywords(args, rest, "|$LOppOO(zz):Session", keywords, &rank, &manifest,
                                             &per_process_names, &gpu_device, &cupti_paths, &tracer, &torch_layer,
                                             &torch_version);
    Py_DECREF(rest);
    if (!parsed)
        return NULL;
    if (manifest != Py_None && !PyUnicode_Check(manifest)) {
        PyErr_Format(PyExc_TypeError, "manifest must be JSON object text, not '%.200s'", Py_TYPE(manifest)->tp_name);
        return NULL;
    }
    tw_session_object *self = (tw_session_object *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    tw_config_t *settings = &self->settings;
    if (tw_session_config(values, settings) < 0)
        goto fail;
    self->schedule = settings->schedule;
    self->aten_operators = settings->aten == TW_ATEN_ALL;
    self->aten_backward = settings->aten != TW_ATEN_OFF;
    self->memory_asked = settings->memory;
    if ((torch_layer != NULL && (self->torch_layer = tw_dup_cstr(torch_layer)) == NULL) ||
        (torch_version != NULL && (self->torch_version = tw_dup_cstr(torch_version)) == NULL)) {
        PyErr_NoMemory();
        goto fail;
    }
    self->summary_only = settings->summary_only;
    self->state = SESSION_NEW;
    self->args_mode = settings->args;
    self->tracer = Py_NewRef(tracer);
    self->gpu_mode = settings->gpu;
    self->gpu_device = gpu_device;
    if (cupti_paths != Py_None && (self->cupti_paths = tw_cupti_paths_of(cupti_paths)) == NULL)
        goto fail;
    if (tw_recorder_create(&self->recorder) != 0) {
        PyErr_NoMemory();
        goto fail;
    }
    /* records "summary" writes no record to name a site in: none are looked up */
    self->sites_mode = self->summary_only ? TW_SITES_OFF : settings->sites;
    if (self->sites_mode != TW_SITES_OFF && tw_sites_create(0, &self->sites) != 0) {
        PyErr_NoMemory();
        goto fail;
    }
    self->out_dir = settings->out_dir;
    if (settings->on_demand_steps != 0) {
        if (self->out_dir == NULL) {
            PyErr_SetString(PyExc_ValueError, "config key 'on_demand' needs out_dir: captures are written to files");
            goto fail;
        }
        self->ondemand_steps = settings->on_demand_steps;
        self->ondemand_dir = settings->on_demand_dir;
    }
    if (self->out_dir == NULL) /* records in memory */
        return (PyObject *)self;
    if (manifest != Py_None && (self->manifest_json = tw_dup_utf8(manifest)) == NULL)
        goto fail;
    tw_writer_config_t *c = &self->config;
    tw_config_writer(settings, c);
    c->manifest_json = self->manifest_json;
    c->rank = rank;
    c->per_process_names = per_process_names;
    c->sites = self->sites;
    return (PyObject *)self;
fail:
    Py_XDECREF(self);
    return NULL;
}

/* The tracer refers back to its Profile, which holds this session: a cycle the collector must see. */
static int session_traverse(PyObject *op, visitproc visit, void *arg)
{
    tw_session_object *self = (tw_session_object *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->tensor_type);
    Py_VISIT(self->tracer);
    Py_VISIT(self->hooks.resolve);
    Py_VISIT(self->hooks.module_enter);
    Py_VISIT(self->hooks.module_pre);
    Py_VISIT(self->hooks.module_exit);
    Py_VISIT(self->hooks.update);
    Py_VISIT(self->hooks.boundary_enter);
    Py_VISIT(self->hooks.boundary_exit);
    return 0;
}

/* Never reached while the session records: tw_active holds a reference the collector cannot see. */
static int session_clear(PyObject *op)
{
    tw_session_object *self = (tw_session_object *)op;
    clear_hooks(&self->hooks);
    Py_CLEAR(self->tracer);
    Py_CLEAR(self->tensor_type);
    return 0;
}

static void session_dealloc(PyObject *op)
{
    tw_session_object *self = (tw_session_object *)op;
    PyTypeObject *type = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    /* An active session is referenced by tw_active, so it cannot be deallocated while recording. */
    tw_gpu_destroy(self->gpu);
    if (self->writer != NULL)
        tw_writer_destroy(self->writer);
    tw_recorder_destroy(self->recorder);
    tw_sites_destroy(self->sites); /* after the writer, which writes it at close */
    tw_free_paths(self->cupti_paths);
    Py_XDECREF(self->tensor_type);
    clear_hooks(&self->hooks);
    Py_XDECREF(self->tracer);
    tw_config_free(&self->settings);
    PyMem_RawFree(self->manifest_json);
    PyMem_RawFree(self->torch_layer);
    PyMem_RawFree(self->torch_version);
    type->tp_free(op);
    Py_DECREF(type);
}

/* ---- what a session starts ------------------------------------------------------------------------
 * One function each to start and to stop, in the table below: start() starts them in its order, stop()
 * stops those started in reverse, and a start that fails (an exception) stops those it started before,
 * so that the session is as new. A start returns 1 when started (its stop will undo it), 0 when off
 * (its reason kept in features[].reason, said to the user through stats(), or not asked for), or -1
 * with an exception. A stop undoes what its start changed; with discard (undoing a failed start) it
 * also drops what a stopped session keeps for its stats().
 */

static int tracer_start(tw_session_object *self)
{
    if (take_hooks(self->tracer, &self->hooks) < 0)
        return -1;
    if (self->hooks.kinds != 0) {
        /* Addresses left by an earlier tracer that was not closed could belong to new objects now. */
        tw_ptr_table_clear(&tw_modules);
        tw_ptr_table_clear(&tw_tracked);
    }
    return 1;
}

static void tracer_stop(tw_session_object *self, int discard)
{
    clear_hooks(&self->hooks);
}

static int writer_start(tw_session_object *self)
{
    if (self->out_dir == NULL)
        return 0; /* records in memory */
    char err[1024];
    int rc = tw_writer_create(&self->config, tw_recorder_queue(self->recorder), &self->clock, &self->writer, err,
                              sizeof err);
    if (rc != 0) {
        PyErr_SetString(rc == TW_EIO ? PyExc_OSError : PyExc_ValueError, err);
        return -1;
    }
    return 1;
}

static void writer_stop(tw_session_object *self, int discard)
{
    /* The writer drains the last chunks; it never needs the GIL, so let other threads run. A write
     * error was warned about once already, and is in stats()["write_error"]. */
    Py_BEGIN_ALLOW_THREADS
    tw_writer_close(self->writer);
    Py_END_ALLOW_THREADS
    if (discard) {
        tw_writer_destroy(self->writer);
        self->writer = NULL;
    }
}

static int gpu_start(tw_session_object *self)
{
    if (start_gpu(self) < 0)
        return -1;
    return self->gpu != NULL;
}

static void gpu_stop(tw_session_object *self, int discard)
{
    /* CUPTI's last records go to the writer before it closes. */
    Py_BEGIN_ALLOW_THREADS
    tw_gpu_stop(self->gpu);
    Py_END_ALLOW_THREADS
    if (discard) {
        tw_gpu_destroy(self->gpu);
        self->gpu = NULL;
    }
}

static int sites_start(tw_session_object *self)
{
    return tw_sites_begin(self->sites_mode, self->sites) < 0 ? -1 : 1;
}

static void sites_stop(tw_session_object *self, int discard)
{
    tw_sites_end(); /* releases the code objects the cache held */
}

/* On-demand capture, when configured: a failure (the control directory) is said and the session
 * records on without it, as the program must not fail because of the profiler. */
static int ondemand_start(tw_session_object *self)
{
    if (self->ondemand_steps == 0 || self->writer == NULL)
        return 0;
    const char *run_pid = getenv("TORCHWRAPPER_RUN_PID");
    tw_ondemand_config_t c = {self->writer, self->out_dir, self->ondemand_steps, self->ondemand_dir, NULL,
                              self->config.rank, run_pid != NULL ? strtoll(run_pid, NULL, 10) : 0};
    char err[1024];
    if (tw_ondemand_start(&c, &self->ondemand, err, sizeof err) != 0) {
        self->ondemand = NULL;
        fprintf(stderr, "torchwrapper: %s; profiling goes on without on-demand capture\n", err);
        return 0;
    }
    return 1;
}

static void ondemand_stop(tw_session_object *self, int discard)
{
    tw_ondemand_stop(self->ondemand); /* the program's SIGUSR2 handler back; the writer finishes the capture */
    self->ondemand = NULL;
}

/* Before the wrappers record, so that every thread they attach gets its counters. Refused (one
 * warning, once the session records) while another profiler holds the allocator's reports: the rest
 * of the session records. */
static int memory_start(tw_session_object *self)
{
    if (!self->memory_asked)
        return 0;
    char *why = self->features[TW_SESSION_MEMORY].reason;
    return tw_memory_start(self->torch_layer, self->torch_version, why, sizeof self->features[0].reason) == 0;
}

static void memory_stop(tw_session_object *self, int discard)
{
    /* the reporter off this thread; what it could not undo: stats()["memory_note"] */
    (void)tw_memory_stop(self->memory_note, sizeof self->memory_note);
}

static int recording_start(tw_session_object *self)
{
    if (self->args_mode != TW_ARGS_NONE && self->tensor_type == NULL)
        self->tensor_type = find_tensor_type();
    tw_active_config_t active = {self->recorder, self->clock.source, self->args_mode,
                                 (PyTypeObject *)self->tensor_type, &self->hooks, self->writer, self->ondemand,
                                 &self->schedule, tw_gpu_hooks(self->gpu), self->gpu, (PyObject *)self};
    self->gen = tw_active_begin(&active);
    self->state = SESSION_ACTIVE;
    return 1;
}

static void recording_stop(tw_session_object *self, int discard)
{
    /* tw_active's reference to this session: the caller of stop holds another */
    Py_DECREF(tw_active_end());
    /* With the GIL held and the generation changed, no thread is inside tw_call_* for this recorder
     * (backward nodes stopped first): their partial chunks go to the queue, for the writer. */
    tw_recorder_collect(self->recorder);
    self->state = discard ? SESSION_NEW : SESSION_STOPPED;
}

static int backward_start(tw_session_object *self)
{
    if (!self->aten_backward)
        return 0;
    char *why = self->features[TW_SESSION_BACKWARD].reason;
    if (tw_backward_session_start(self->torch_layer, self->torch_version, self->recorder, self->clock.source,
                                  tw_gpu_hooks(self->gpu), self->gen, self->aten_operators, why,
                                  sizeof self->features[0].reason) != 0)
        return 0;
    tw_active_set_seq_peek(tw_backward_peek_function());
    return 1;
}

static void backward_stop(tw_session_object *self, int discard)
{
    tw_active_set_seq_peek(NULL); /* no call links nodes from now on */
    /* returns once no hook of libtorch's threads is in the recorder */
    self->backward_unlinked = tw_backward_stop();
}

/* The layer reads the shapes; backward nodes carry their FLOPs when on. */
static int flops_start(tw_session_object *self)
{
    if (!self->settings.flops)
        return 0;
    char *why = self->features[TW_SESSION_FLOPS].reason;
    if (tw_layer_need(TW_LAYER_FLOPS, self->torch_layer, self->torch_version, why, sizeof self->features[0].reason))
        return 0;
    tw_active_set_flops(1);
    return 1;
}

static void flops_stop(tw_session_object *self, int discard)
{
    tw_active_set_flops(0);
}

/* The layer reads tensors' summaries (args.c); without it (not built: NULL paths), Python does. With
 * backward nodes on, the layer is loaded already. Nothing to stop: the layer stays for the process. */
static int summary_start(tw_session_object *self)
{
    if (self->args_mode != TW_ARGS_SUMMARY)
        return 0;
    char *why = self->features[TW_SESSION_SUMMARY].reason;
    return tw_layer_need(TW_LAYER_SUMMARY, self->torch_layer, self->torch_version, why,
                         sizeof self->features[0].reason) == 0;
}

static const struct {
    int (*start)(tw_session_object *self);
    void (*stop)(tw_session_object *self, int discard); /* NULL: nothing to undo */
} features[TW_SESSION_FEATURES] = {
    [TW_SESSION_TRACER] = {tracer_start, tracer_stop},
    [TW_SESSION_WRITER] = {writer_start, writer_stop},
    [TW_SESSION_GPU] = {gpu_start, gpu_stop},
    [TW_SESSION_SITES] = {sites_start, sites_stop},
    [TW_SESSION_ONDEMAND] = {ondemand_start, ondemand_stop},
    [TW_SESSION_MEMORY] = {memory_start, memory_stop},
    [TW_SESSION_RECORDING] = {recording_start, recording_stop},
    [TW_SESSION_BACKWARD] = {backward_start, backward_stop},
    [TW_SESSION_FLOPS] = {flops_start, flops_stop},
    [TW_SESSION_SUMMARY] = {summary_start, NULL},
};

/* Stops the features started, from the last one to the first. */
static void stop_features(tw_session_object *self, int discard)
{
    for (int i = TW_SESSION_FEATURES - 1; i >= 0; i--) {
        if (!self->features[i].on)
            continue;
        if (features[i].stop != NULL)
            features[i].stop(self, discard);
        if (discard)
            self->features[i].on = 0;
    }
}

static PyObject *session_start(PyObject *op, PyObject *unused)
{
    tw_session_object *self = (tw_session_object *)op;
    if (self->state != SESSION_NEW) {
        PyErr_SetString(PyExc_RuntimeError, self->state == SESSION_ACTIVE ? "this session is already recording"
                                                                          : "a stopped session cannot be restarted: create a new Session");
        return NULL;
    }
    if (tw_active.session != NULL) {
        PyErr_Format(PyExc_RuntimeError, "another session (%R) is already recording; stop it first",
                     tw_active.session);
        return NULL;
    }
    tw_clock_calibrate(&self->clock);
    if (gpu_reason_known(self) < 0) /* before the writer, which copies the manifest */
        return NULL;
    for (int i = 0; i < TW_SESSION_FEATURES; i++) {
        if (i != TW_SESSION_GPU) /* gpu_reason_known's, when known already */
            self->features[i].reason[0] = '\0';
        int rc = features[i].start(self);
        if (rc < 0) {
            tw_saved_exc_t saved;
            tw_exc_save(&saved);
            stop_features(self, 1);
            tw_exc_restore(&saved);
            return NULL;
        }
        self->features[i].on = rc;
    }
    /* Last, the session recording: a warning made an error leaves it active for the caller to stop. */
    if (self->memory_asked && !self->features[TW_SESSION_MEMORY].on &&
        PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "torchwrapper: config memory: %s",
                         self->features[TW_SESSION_MEMORY].reason) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *session_stop(PyObject *op, PyObject *unused)
{
    tw_session_object *self = (tw_session_object *)op;
    if (self->state != SESSION_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError, self->state == SESSION_NEW ? "this session was never started"
                                                                       : "this session is already stopped");
        return NULL;
    }
    Py_INCREF(op); /* tw_active's reference goes with recording's stop */
    stop_features(self, 0);
    /* Not needed once stopped; dropped now so that the tracer (and its Profile) go with refcounts. */
    Py_CLEAR(self->tracer);
    Py_DECREF(op);
    Py_RETURN_NONE;
}

static PyObject *session_get_active(PyObject *op, void *closure)
{
    return PyBool_FromLong(((tw_session_object *)op)->state == SESSION_ACTIVE);
}

static PyObject *session_pause(PyObject *op, PyObject *unused)
{
    tw_pause_thread();
    Py_RETURN_NONE;
}

static PyObject *session_step(PyObject *op, PyObject *unused)
{
    if (((tw_session_object *)op)->state != SESSION_ACTIVE || tw_active.session != op) {
        PyErr_SetString(PyExc_RuntimeError, "step() marks the end of a step of a recording session: start() it first");
        return NULL;
    }
    tw_step_mark();
    return PyLong_FromUnsignedLong(tw_active.step);
}

static PyObject *session_manual_steps(PyObject *op, PyObject *unused)
{
    if (((tw_session_object *)op)->state != SESSION_ACTIVE || tw_active.session != op) {
        PyErr_SetString(PyExc_RuntimeError, "manual_steps() is for a recording session: start() it first");
        return NULL;
    }
    tw_steps_manual();
    Py_RETURN_NONE;
}

static PyObject *session_resume(PyObject *op, PyObject *unused)
{
    tw_resume_thread();
    Py_RETURN_NONE;
}

/* The session's clock now, in the records' time (ns since the epoch, as their start_ns). */
static PyObject *session_clock_ns(PyObject *op, PyObject *unused)
{
    tw_session_object *self = (tw_session_object *)op;
    if (self->state != SESSION_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError, "clock_ns() reads the clock of a recording session: start() it first");
        return NULL;
    }
    return PyLong_FromLongLong((long long)tw_clock_epoch_ns(&self->clock, tw_clock_ticks(self->clock.source)));
}

/* set_manifest_key(key, json_text): a key of the manifest that is known only once the session runs. */
static PyObject *session_set_manifest_key(PyObject *op, PyObject *args)
{
    tw_session_object *self = (tw_session_object *)op;
    const char *key, *value;
    if (!PyArg_ParseTuple(args, "ss:set_manifest_key", &key, &value))
        return NULL;
    if (self->state != SESSION_ACTIVE || self->writer == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_manifest_key() needs a recording session with an out_dir");
        return NULL;
    }
    int rc = tw_writer_set_manifest_key(self->writer, key, value);
    if (rc == TW_EINVAL) {
        PyErr_Format(PyExc_ValueError, "set_manifest_key(%R): the value is not JSON: %R", PyTuple_GET_ITEM(args, 0),
                     PyTuple_GET_ITEM(args, 1));
        return NULL;
    }
    if (rc != 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyMethodDef session_methods[] = {
    {"clock_ns", session_clock_ns, METH_NOARGS,
     "The session's clock now: ns since the epoch, the records' start_ns clock."},
    {"set_manifest_key", session_set_manifest_key, METH_VARARGS,
     "set_manifest_key(key, json_text)\n--\n\nSets key of the manifest (written at the next flush and at stop)."},
    {"start", session_start, METH_NOARGS, "Make every wrapper record into this session."},
    {"stop", session_stop, METH_NOARGS, "Stop recording and gather every thread's records."},
    {"records", tw_session_records, METH_NOARGS,
     "The records of a stopped session: a list of tuples of the fields named by _core.RECORD_FIELDS, "
     "of the schedule's active steps."},
    {"sites", tw_session_sites, METH_NOARGS,
     "The call sites interned so far: {id: (file, line, function, text)} (the records' site column)."},
    {"stats", tw_session_stats, METH_NOARGS, "Counters: records, dropped, chunks, threads, clock."},
    {"pause_thread", session_pause, METH_NOARGS,
     "Stop recording calls made by this thread (nestable) until resume_thread()."},
    {"resume_thread", session_resume, METH_NOARGS, "Undo one pause_thread() on this thread."},
    {"step", session_step, METH_NOARGS,
     "End the current step; returns the number of the step that begins (steps count from 0). Once\n"
     "called, only these calls end steps (not optimizer steps)."},
    {"manual_steps", session_manual_steps, METH_NOARGS,
     "From now on only step() ends steps, not optimizer steps (a trainer that marks its own steps);\n"
     "the current step goes on."},
    {"add_stream", tw_session_add_stream, METH_VARARGS,
     "add_stream(kind, csv_header)\n--\n\nRows of another kind go to files of their own (NAME.KIND.csv)."},
    {"stream_write", tw_session_stream_write, METH_VARARGS,
     "stream_write(kind, text, step=-1) -> refused\n--\n\nQueues rows (one per line, in the session's format)\n"
     "of a step (-1: the step in progress); the writer keeps those of the steps it records."},
    {"stream_stats", tw_session_stream_stats, METH_O, "stream_stats(kind) -> counters of a stream"},
    {NULL},
};

static PyGetSetDef session_getset[] = {
    {"active", session_get_active, NULL, "whether this session is recording", NULL},
    {NULL},
};

static PyType_Slot session_slots[] = {
    {Py_tp_new, session_new},
    {Py_tp_dealloc, session_dealloc},
    {Py_tp_traverse, session_traverse},
    {Py_tp_clear, session_clear},
    {Py_tp_methods, session_methods},
    {Py_tp_getset, session_getset},
    {Py_tp_doc, "Session()\n--\n\nA profiling session: start(), stop(), records()."},
    {0, NULL},
};

static PyType_Spec session_spec = {
    .name = "torchwrapper._core.Session",
    .basicsize = sizeof(tw_session_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = session_slots,
};

int tw_session_add_type(PyObject *module, tw_module_state *state)
{
    state->session_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &session_spec, NULL);
    if (state->session_type == NULL || PyModule_AddType(module, state->session_type) < 0)
        return -1;
    /* The names of records()' tuple fields, in the order append_chunk_records builds them, so that
     * Python reads each by name (torchwrapper.records) and a field added here cannot shift another. */
    PyObject *fields = Py_BuildValue("(ssssssssssssssssssssss)", "call_id", "api", "start_ns", "cost_ns", "self_ns",
                                     "gpu_ns", "tid", "depth", "parent_id", "error", "args", "module", "step", "site",
                                     "fwd_call_id", "fwd_api", "flops", "flops_total", "mem_alloc", "mem_self",
                                     "mem_freed", "mem_peak");
    if (fields == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(module, "RECORD_FIELDS", fields);
    Py_DECREF(fields);
    /* The config keys a Session takes (the one list: the Python layer passes these on). */
    PyObject *keys = PyTuple_New(TW_SESSION_CONFIG_KEYWORDS);
    for (Py_ssize_t i = 0; keys != NULL && i < TW_SESSION_CONFIG_KEYWORDS; i++) {
        PyObject *key = PyUnicode_FromString(tw_session_config_keywords[i]);
        if (key == NULL)
            Py_CLEAR(keys);
        else
            PyTuple_SET_ITEM(keys, i, key);
    }
    if (rc < 0 || keys == NULL || PyModule_AddObjectRef(module, "SESSION_CONFIG_KEYS", keys) < 0)
        rc = -1;
    Py_XDECREF(keys);
    return rc;
}
