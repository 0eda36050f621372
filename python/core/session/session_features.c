/* SPDX-License-Identifier: MIT */
/*
 * What a session starts and stops (session.c's start() and stop()): the model watch's hooks, the writer,
 * GPU timing, call sites, on-demand capture, memory, the recording itself, backward nodes, FLOPs and
 * tensor summaries, in one table, started in order and stopped in reverse.
 */
#include "session_features.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/active.h"
#include "atfork.h"
#include "below/backward.h"
#include "call/call_sites.h"
#include "call/exc.h"
#include "below/flops.h"
#include "call/imported.h"
#include "below/layer.h"
#include "below/memory.h"
#include "watch/model_watch_tables.h"

#define TW_STR2(x) #x
#define TW_STR(x) TW_STR2(x)

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
        tw_gpu_rows_t rows; /* into the writer's "gpu" stream */
        tw_writer_gpu_rows(self->writer, &rows);
        Py_BEGIN_ALLOW_THREADS /* loading CUPTI and starting it take milliseconds; nothing here needs Python */
        rc = tw_gpu_start(&config, &rows, &self->clock, &self->gpu, reason, reason_size);
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

void tw_session_clear_hooks(tw_hooks_t *hooks)
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

/* watch.name, or NULL (without an error) when it is None or missing. */
static PyObject *hook_of(PyObject *watch, const char *name)
{
    PyObject *hook = PyObject_GetAttrString(watch, name);
    if (hook == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear();
    if (hook == Py_None)
        Py_CLEAR(hook);
    return hook;
}

/* The model watch's kinds (an int attribute) and hooks. Returns 0, or -1 with an exception. */
static int take_hooks(PyObject *watch, tw_hooks_t *hooks)
{
    tw_session_clear_hooks(hooks);
    if (watch == Py_None)
        return 0;
    PyObject *kinds = PyObject_GetAttrString(watch, "kinds");
    if (kinds == NULL)
        return -1;
    unsigned long value = PyLong_AsUnsignedLong(kinds);
    Py_DECREF(kinds);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    hooks->resolve = hook_of(watch, "resolve");
    hooks->module_enter = hook_of(watch, "module_enter");
    hooks->module_pre = hook_of(watch, "module_pre");
    hooks->module_exit = hook_of(watch, "module_exit");
    hooks->update = hook_of(watch, "update");
    hooks->boundary_enter = hook_of(watch, "boundary_enter");
    hooks->boundary_exit = hook_of(watch, "boundary_exit");
    if (PyErr_Occurred()) {
        tw_session_clear_hooks(hooks);
        return -1;
    }
    hooks->kinds = (uint32_t)(value & TW_KIND_ALL);
    return 0;
}
/* ---- what a session starts ------------------------------------------------------------------------
 * One function each to start and to stop, in the table below: start() starts them in its order, stop()
 * stops those started in reverse, and a start that fails (an exception) stops those it started before,
 * so that the session is as new. A start returns 1 when started (its stop will undo it), 0 when off
 * (its reason kept in features[].reason, said to the user through stats(), or not asked for), or -1
 * with an exception. A stop undoes what its start changed; with discard (undoing a failed start) it
 * also drops what a stopped session keeps for its stats().
 */

static int model_watch_start(tw_session_object *self)
{
    if (take_hooks(self->model_watch, &self->hooks) < 0)
        return -1;
    if (self->hooks.kinds != 0) {
        /* Addresses left by an earlier model watch that was not closed could belong to new objects now. */
        tw_ptr_table_clear(&tw_modules);
        tw_ptr_table_clear(&tw_tracked);
        tw_transients_clear();
    }
    return 1;
}

static void model_watch_stop(tw_session_object *self, int discard)
{
    tw_session_clear_hooks(&self->hooks);
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
                                 &self->schedule, self->settings.detail_sampled, tw_gpu_hooks(self->gpu), self->gpu,
                                 (PyObject *)self};
    if (self->writer != NULL) /* the steps with detail, for the reports (tables, findings, --by step) */
        (void)tw_writer_set_manifest_key(self->writer, "detail", self->settings.detail_sampled
                                         ? "{\"sampled\":true,\"first\":" TW_STR(TW_DETAIL_FIRST) ",\"every\":"
                                           TW_STR(TW_DETAIL_EVERY) "}" : "{\"sampled\":false}");
    tw_own_begin(&self->clock);
    self->own_known = 0;
    self->started_ticks = tw_clock_ticks(self->clock.source);
    self->gen = tw_active_begin(&active);
    self->state = SESSION_ACTIVE;
    return 1;
}

static void recording_stop(tw_session_object *self, int discard)
{
    /* What the profiler cost, now that no call and no node hook records (those stopped first): in the
     * manifest the writer writes at its close, which comes after, and in stats(). */
    tw_own_figures(&self->clock, self->gen, 1, tw_clock_ticks(self->clock.source) - self->started_ticks, &self->own);
    self->own_known = 1;
    char own[512];
    if (self->writer != NULL && tw_own_json(&self->own, own, sizeof own) > 0)
        (void)tw_writer_set_manifest_key(self->writer, "own_cost", own); /* out of memory: the manifest goes without */
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
    [TW_SESSION_MODEL_WATCH] = {model_watch_start, model_watch_stop},
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

int tw_session_features_start(tw_session_object *self)
{
    if (gpu_reason_known(self) < 0) /* before the writer, which copies the manifest */
        return -1;
    for (int i = 0; i < TW_SESSION_FEATURES; i++) {
        if (i != TW_SESSION_GPU) /* gpu_reason_known's, when known already */
            self->features[i].reason[0] = '\0';
        int rc = features[i].start(self);
        if (rc < 0) {
            tw_saved_exc_t saved;
            tw_exc_save(&saved);
            stop_features(self, 1);
            tw_exc_restore(&saved);
            return -1;
        }
        self->features[i].on = rc;
    }
    return 0;
}

void tw_session_features_stop(tw_session_object *self)
{
    stop_features(self, 0);
}
