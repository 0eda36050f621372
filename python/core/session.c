/* SPDX-License-Identifier: MIT */
/*
 * Session: one profiling session. start() makes its recorder the one every wrapper records into;
 * stop() ends that and gathers the threads' partial chunks; records() reads the records back.
 * One session records at a time in a process.
 */
#include "module.h"
#include "atfork.h"
#include "backward.h"

#include <pthread.h>
#include <string.h>

typedef enum { SESSION_NEW, SESSION_ACTIVE, SESSION_STOPPED } session_state_t;

typedef struct {
    PyObject_HEAD
    tw_recorder_t *recorder;
    tw_clock_t clock;
    session_state_t state;
    tw_config_t settings;  /* the validated configuration, typed (config.h) */
    /* file output; out_dir == NULL keeps records in memory for records() */
    tw_writer_config_t config;
    const char *out_dir;   /* settings.out_dir */
    char *manifest_json;
    tw_writer_t *writer;
    tw_args_mode_t args_mode;
    tw_schedule_t schedule; /* the steps whose records are kept (also in config, for the writer) */
    int summary_only;       /* records "summary": no per-call records kept */
    uint64_t ondemand_steps; /* on_demand: steps of a capture asked without a number; 0: off */
    const char *ondemand_dir; /* on_demand's dir (settings'), NULL: out_dir/capture-N */
    tw_ondemand_t *ondemand; /* while recording */
    PyObject *tensor_type; /* torch._C.TensorBase, found at start, when args are summarized */
    PyObject *tracer;      /* torchwrapper._trace.Tracer or None */
    tw_hooks_t hooks;      /* the tracer's bound methods (strong references), taken at start */
    /* extra record streams of the writer (tracing: "stats", "updates"), owned by the writer */
    struct {
        char kind[TW_STREAM_KIND_MAX + 1];
        tw_writer_stream_t *stream;
    } streams[4];
    int stream_count;
    /* GPU timing */
    tw_gpu_mode_t gpu_mode;
    int gpu_device;        /* the caller found a CUDA device */
    char **cupti_paths;    /* NULL-terminated, PyMem_Raw; candidates for the CUPTI library */
    tw_gpu_t *gpu;         /* while GPU timing runs, and after stop for its counters */
    char gpu_reason[1024]; /* why GPU timing is off, "" when on or not asked for */
    tw_sites_mode_t sites_mode;
    tw_sites_t *sites;     /* call sites (sites.h), NULL with sites "off"; the writer writes it */
    /* backward nodes (config aten "backward", backward.h) */
    int aten_backward;       /* asked for (aten "backward" or "all") */
    int aten_operators;      /* aten "all": every operator a record too */
    char *torch_layer;       /* the libtorch layer's path, NULL when it was not built */
    char *torch_version;     /* torch.__version__ of the running torch */
    int backward_on;         /* recording them */
    char backward_reason[512]; /* why not, "" when on or not asked for */
    uint64_t backward_unlinked; /* nodes whose forward call was not found */
} tw_session_object;


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
    if (self->gpu_mode == TW_GPU_OFF)
        return 0;
    int rc = TW_EUNAVAIL;
    if (!self->gpu_device) {
        /* the reason is in gpu_reason already (gpu_reason_known) */
    } else if (self->writer == NULL) {
        snprintf(self->gpu_reason, sizeof self->gpu_reason,
                 "GPU records are written to files, and this session keeps its records in memory (give out_dir)");
    } else {
        tw_atfork_register(TW_ATFORK_GPU, NULL, NULL, gpu_after_fork_in_child);
        tw_gpu_config_t config = {.candidates = (const char *const *)self->cupti_paths, .device_available = 1,
                                  .flush_interval_ns = self->config.flush_interval_ns};
        Py_BEGIN_ALLOW_THREADS /* loading CUPTI and starting it take milliseconds; nothing here needs Python */
        rc = tw_gpu_start(&config, self->writer, &self->clock, &self->gpu, self->gpu_reason, sizeof self->gpu_reason);
        Py_END_ALLOW_THREADS
    }
    if (rc == 0)
        return 0;
    if (self->gpu_mode == TW_GPU_ON) {
        PyErr_Format(PyExc_RuntimeError, "gpu=\"on\": GPU timing is unavailable: %s (gpu=\"auto\" profiles CPU "
                                         "time instead)", self->gpu_reason);
        return -1;
    }
    if (!gpu_unavailable_said && self->gpu_device) {
        gpu_unavailable_said = 1;
        PySys_FormatStderr("torchwrapper: GPU timing unavailable: %s; profiling CPU time only\n", self->gpu_reason);
    }
    return 0;
}

/*
 * Why GPU timing will be off, where that is known before the writer starts (no CUDA device), into
 * gpu_reason and the manifest ("gpu_unavailable"), which the writer copies when it is created: on a
 * machine without a GPU nothing is said on stderr, and the manifest keeps the reason. 0, or -1 with
 * an exception (out of memory).
 */
static int gpu_reason_known(tw_session_object *self)
{
    self->gpu_reason[0] = '\0';
    if (self->gpu_mode == TW_GPU_OFF || self->gpu_device)
        return 0;
    snprintf(self->gpu_reason, sizeof self->gpu_reason, "no CUDA device (torch.cuda.is_available() is False)");
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
    size_t reason_len = strlen(self->gpu_reason);
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
    p = tw_json_escape(p, self->gpu_reason, reason_len);
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

/* On-demand capture, when configured: a failure (the control directory) is said and the session
 * records on without it, as the program must not fail because of the profiler. */
static void start_ondemand(tw_session_object *self)
{
    if (self->ondemand_steps == 0 || self->writer == NULL)
        return;
    const char *run_pid = getenv("TORCHWRAPPER_RUN_PID");
    tw_ondemand_config_t c = {self->writer, self->out_dir, self->ondemand_steps, self->ondemand_dir, NULL,
                              self->config.rank, run_pid != NULL ? strtoll(run_pid, NULL, 10) : 0};
    char err[1024];
    if (tw_ondemand_start(&c, &self->ondemand, err, sizeof err) != 0) {
        self->ondemand = NULL;
        fprintf(stderr, "torchwrapper: %s; profiling goes on without on-demand capture\n", err);
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
    if (take_hooks(self->tracer, &self->hooks) < 0)
        return NULL;
    if (self->hooks.kinds != 0) {
        /* Addresses left by an earlier tracer that was not closed could belong to new objects now. */
        tw_ptr_table_clear(&tw_modules);
        tw_ptr_table_clear(&tw_tracked);
    }
    tw_clock_calibrate(&self->clock);
    if (gpu_reason_known(self) < 0)
        return NULL;
    if (self->out_dir != NULL) {
        char err[1024];
        int rc = tw_writer_create(&self->config, tw_recorder_queue(self->recorder), &self->clock, &self->writer, err, sizeof err);
        if (rc != 0) {
            PyErr_SetString(rc == TW_EIO ? PyExc_OSError : PyExc_ValueError, err);
            return NULL;
        }
    }
    if (start_gpu(self) < 0) {
        if (self->writer != NULL) {
            tw_writer_close(self->writer);
            tw_writer_destroy(self->writer);
            self->writer = NULL;
        }
        return NULL;
    }
    if (self->args_mode != TW_ARGS_NONE && self->tensor_type == NULL)
        self->tensor_type = find_tensor_type();
    tw_sites_begin(self->sites_mode, self->sites);
    start_ondemand(self);
    tw_active_config_t active = {self->recorder, self->clock.source, self->args_mode,
                                 (PyTypeObject *)self->tensor_type, &self->hooks, self->writer, self->ondemand,
                                 &self->schedule, tw_gpu_hooks(self->gpu), op};
    uint64_t gen = tw_active_begin(&active);
    self->state = SESSION_ACTIVE;
    if (self->aten_backward)
        self->backward_on = tw_backward_session_start(self->torch_layer, self->torch_version, self->recorder,
                                                      self->clock.source, active.gpu, gen, self->aten_operators,
                                                      self->backward_reason, sizeof self->backward_reason) == 0;
    tw_active_set_seq_peek(self->backward_on ? tw_backward_peek_function() : NULL);
    if (!self->backward_on && self->args_mode == TW_ARGS_SUMMARY && self->torch_layer != NULL &&
        self->torch_version != NULL) { /* the layer reads tensors' summaries (args.c); without it, Python does */
        char why[512];
        (void)tw_backward_load(self->torch_layer, self->torch_version, why, sizeof why);
    }
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
    tw_active_quiesce();
    if (self->backward_on) /* returns once no hook of libtorch's threads is in the recorder */
        self->backward_unlinked = tw_backward_stop();
    self->backward_on = 0;
    PyObject *session = tw_active_end(); /* dropped once stopped, below */
    tw_ondemand_stop(self->ondemand); /* the program's SIGUSR2 handler back; the writer finishes the capture */
    self->ondemand = NULL;
    /* Not needed once stopped; dropped now so that the tracer (and its Profile) go with refcounts. */
    clear_hooks(&self->hooks);
    Py_CLEAR(self->tracer);
    tw_sites_end(); /* releases the code objects the cache held */
    /* With the GIL held and the generation changed, no thread is inside tw_call_* for this recorder. */
    tw_recorder_collect(self->recorder);
    self->state = SESSION_STOPPED;
    if (self->gpu != NULL) {
        /* CUPTI's last records go to the writer before it closes. */
        Py_BEGIN_ALLOW_THREADS
        tw_gpu_stop(self->gpu);
        Py_END_ALLOW_THREADS
    }
    if (self->writer != NULL) {
        /* The writer drains the last chunks; it never needs the GIL, so let other threads run. A
         * write error was warned about once already, and is in stats()["write_error"]. */
        Py_BEGIN_ALLOW_THREADS
        tw_writer_close(self->writer);
        Py_END_ALLOW_THREADS
    }
    Py_DECREF(session);
    Py_RETURN_NONE;
}

typedef struct {
    tw_session_object *session;
    PyObject *list;
    PyObject *names; /* api id -> str, so that each name is made once */
} records_ctx_t;

static PyObject *api_name_object(records_ctx_t *ctx, uint32_t api_id)
{
    PyObject *key = PyLong_FromUnsignedLong(api_id);
    if (key == NULL)
        return NULL;
    PyObject *name = PyDict_GetItemWithError(ctx->names, key);
    if (name != NULL) {
        Py_DECREF(key);
        return Py_NewRef(name);
    }
    const char *text = tw_api_name(api_id);
    name = PyErr_Occurred() ? NULL : PyUnicode_FromString(text != NULL ? text : "?");
    if (name != NULL && PyDict_SetItem(ctx->names, key, name) < 0)
        Py_CLEAR(name);
    Py_DECREF(key);
    return name;
}

static int append_chunk_records(const tw_chunk_t *chunk, void *arg)
{
    records_ctx_t *ctx = arg;
    const tw_clock_t *clock = &ctx->session->clock;
    for (uint32_t i = 0; i < chunk->count; i++) {
        const tw_record_t *r = &chunk->records[i];
        if (!(tw_schedule_keeps(&ctx->session->schedule, ctx->session->summary_only, r->step) & TW_KEEP_RECORD))
            continue;
        PyObject *name = api_name_object(ctx, r->api_id);
        if (name == NULL)
            return -1;
        uint64_t fwd_call_id = 0;
        uint32_t fwd_api_id = 0, args_len = r->args_len;
        if ((r->flags & TW_RECORD_BACKWARD) && args_len == TW_BACKWARD_LINK_SIZE) { /* a node's link */
            tw_backward_link_unpack(chunk->text + r->args_offset, &fwd_call_id, &fwd_api_id);
            args_len = 0;
        }
        PyObject *args = PyUnicode_DecodeUTF8(chunk->text + r->args_offset, args_len, "replace");
        if (args == NULL) {
            Py_DECREF(name);
            return -1;
        }
        PyObject *fwd_api = fwd_call_id != 0 ? api_name_object(ctx, fwd_api_id) : PyUnicode_FromString("");
        if (fwd_api == NULL) {
            Py_DECREF(name);
            Py_DECREF(args);
            return -1;
        }
        const char *module_path = tw_module_path(r->module_id);
        PyObject *module = module_path != NULL ? PyUnicode_FromString(module_path) : Py_NewRef(Py_None);
        if (module == NULL) {
            Py_DECREF(name);
            Py_DECREF(args);
            Py_DECREF(fwd_api);
            return -1;
        }
        /* the fields in the order of RECORD_FIELDS (below): readers take them by name */
        PyObject *row = Py_BuildValue("(KNLKKKKIKONNIIKN)", (unsigned long long)r->call_id, name,
                                      (long long)tw_clock_epoch_ns(clock, r->start),
                                      (unsigned long long)tw_clock_duration_ns(clock, r->cost),
                                      (unsigned long long)tw_clock_duration_ns(clock, r->self), 0ull,
                                      (unsigned long long)chunk->tid, (unsigned int)r->depth,
                                      (unsigned long long)r->parent_id,
                                      (r->flags & TW_RECORD_ERROR) ? Py_True : Py_False, args, module,
                                      (unsigned int)r->step, (unsigned int)r->site,
                                      (unsigned long long)fwd_call_id, fwd_api);
        if (row == NULL)
            return -1;
        int err = PyList_Append(ctx->list, row);
        Py_DECREF(row);
        if (err < 0)
            return -1;
    }
    return 0;
}

static PyObject *session_records(PyObject *op, PyObject *unused)
{
    tw_session_object *self = (tw_session_object *)op;
    if (self->state != SESSION_STOPPED) {
        PyErr_SetString(PyExc_RuntimeError, "records() reads a stopped session: call stop() first");
        return NULL;
    }
    if (self->writer != NULL) {
        PyErr_Format(PyExc_RuntimeError, "this session wrote its records to files in %s: read them from there",
                     self->out_dir);
        return NULL;
    }
    records_ctx_t ctx = {self, PyList_New(0), PyDict_New()};
    if (ctx.list == NULL || ctx.names == NULL ||
        tw_recorder_foreach_chunk(self->recorder, append_chunk_records, &ctx) != 0)
        Py_CLEAR(ctx.list);
    Py_XDECREF(ctx.names);
    return ctx.list;
}

/* stats()["gpu"]: "on" or "off"; "gpu_unavailable": why not, or None; and the GPU counters. */
static int add_gpu_stats(tw_session_object *self, PyObject *out)
{
    PyObject *extra;
    if (self->gpu != NULL) {
        tw_gpu_stats_t g;
        tw_gpu_stats(self->gpu, &g);
        extra = Py_BuildValue("{sssOsKsKsKsKsKsKsssI}", "gpu", "on", "gpu_unavailable", Py_None, "gpu_kernels",
                              (unsigned long long)g.kernels, "gpu_memcpys", (unsigned long long)g.memcpys,
                              "gpu_memsets", (unsigned long long)g.memsets, "gpu_unattributed",
                              (unsigned long long)g.unattributed, "gpu_incomplete", (unsigned long long)g.incomplete,
                              "gpu_dropped", (unsigned long long)g.dropped, "cupti_library", tw_gpu_library_path(),
                              "cupti_version", (unsigned int)g.cupti_version);
    } else {
        extra = Py_BuildValue("{ssss}", "gpu", "off", "gpu_unavailable",
                              self->gpu_reason[0] ? self->gpu_reason : NULL);
    }
    if (extra == NULL)
        return -1;
    int rc = PyDict_Update(out, extra);
    Py_DECREF(extra);
    return rc;
}

/* stats()["backward"]: "on" while backward nodes are recorded (or were, in a stopped session), else
 * "off"; "backward_unavailable": why not when asked for; "backward_unlinked": nodes whose forward
 * call was not found. */
static int add_backward_stats(tw_session_object *self, PyObject *out)
{
    int on = self->aten_backward && self->backward_reason[0] == '\0' && self->state != SESSION_NEW;
    PyObject *extra = Py_BuildValue("{sssssK}", "backward", on ? "on" : "off", "backward_unavailable",
                                    self->backward_reason[0] ? self->backward_reason : NULL, "backward_unlinked",
                                    (unsigned long long)self->backward_unlinked);
    if (extra == NULL)
        return -1;
    int rc = PyDict_Update(out, extra);
    Py_DECREF(extra);
    return rc;
}

/* stats()["sites"]: sites interned; "sites_overflow": calls attributed to the overflow id (past the cap). */
static int add_sites_stats(tw_session_object *self, PyObject *out)
{
    tw_sites_stats_t st = {0};
    if (self->sites != NULL)
        tw_sites_stats(self->sites, &st);
    /* how callers' frames are read: CPython's own frames (checked at start) or the public frame objects */
    PyObject *extra = Py_BuildValue("{sIsKsIss}", "sites", (unsigned int)st.count, "sites_overflow",
                                    (unsigned long long)st.overflow, "sites_cap", (unsigned int)st.cap, "site_frames",
                                    tw_site_frames_fast ? "interpreter" : "public");
    if (extra == NULL)
        return -1;
    int rc = PyDict_Update(out, extra);
    Py_DECREF(extra);
    return rc;
}

/* sites() -> {id: (file, line, function, text)} of the sites interned so far (empty with sites "off"). */
static PyObject *session_sites(PyObject *op, PyObject *unused)
{
    tw_session_object *self = (tw_session_object *)op;
    PyObject *out = PyDict_New();
    if (out == NULL || self->sites == NULL)
        return out;
    tw_sites_stats_t st;
    tw_sites_stats(self->sites, &st);
    char *buf = PyMem_Malloc(3 * (TW_SITE_TEXT_MAX + 1));
    if (buf == NULL) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    char *file = buf, *function = buf + TW_SITE_TEXT_MAX + 1, *text = function + TW_SITE_TEXT_MAX + 1;
    for (uint32_t id = 1; id <= st.count; id++) {
        uint32_t line;
        if (!tw_sites_get(self->sites, id, file, &line, function, text))
            continue;
        PyObject *key = PyLong_FromUnsignedLong(id);
        PyObject *value = Py_BuildValue("(sIss)", file, (unsigned int)line, function, text);
        int rc = key != NULL && value != NULL ? PyDict_SetItem(out, key, value) : -1;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (rc < 0) {
            Py_CLEAR(out);
            break;
        }
    }
    PyMem_Free(buf);
    return out;
}

static PyObject *session_stats(PyObject *op, PyObject *unused)
{
    tw_session_object *self = (tw_session_object *)op;
    tw_recorder_stats_t stats;
    tw_recorder_stats(self->recorder, &stats);
    PyObject *out = Py_BuildValue("{sKsKsKsKsssdsI}", "records", (unsigned long long)stats.records, "dropped",
                                  (unsigned long long)stats.dropped, "chunks", (unsigned long long)stats.chunks,
                                  "threads", (unsigned long long)stats.threads, "clock",
                                  self->clock.source == TW_CLOCK_TSC ? "tsc" : "monotonic", "ticks_per_ns",
                                  self->clock.ticks_per_ns, "step", (unsigned int)tw_recorder_step(self->recorder));
    if (out == NULL || add_gpu_stats(self, out) < 0 || add_sites_stats(self, out) < 0 ||
        add_backward_stats(self, out) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    if (self->writer == NULL)
        return out;
    tw_writer_stats_t ws;
    tw_writer_stats(self->writer, &ws);
    PyObject *extra = Py_BuildValue("{sKsKsKsKsssz}", "records_written", (unsigned long long)ws.records_written,
                                    "writer_dropped", (unsigned long long)ws.records_dropped, "bytes_written",
                                    (unsigned long long)ws.bytes_written, "records_truncated",
                                    (unsigned long long)ws.records_truncated, "manifest",
                                    tw_writer_manifest_path(self->writer), "write_error",
                                    ws.write_errno ? strerror(ws.write_errno) : NULL);
    if (extra == NULL || PyDict_Update(out, extra) < 0) {
        Py_XDECREF(extra);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(extra);
    /* Every record lost, wherever: hot path (no room, too deep) and writer (write errors). */
    PyObject *dropped = PyLong_FromUnsignedLongLong(stats.dropped + ws.records_dropped);
    if (dropped == NULL || PyDict_SetItemString(out, "dropped", dropped) < 0) {
        Py_XDECREF(dropped);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(dropped);
    return out;
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

/* add_stream(kind, csv_header): the writer writes rows of that kind to files of their own. */
static PyObject *session_add_stream(PyObject *op, PyObject *args)
{
    tw_session_object *self = (tw_session_object *)op;
    const char *kind, *header;
    if (!PyArg_ParseTuple(args, "ss:add_stream", &kind, &header))
        return NULL;
    if (self->writer == NULL || self->state != SESSION_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError, "add_stream() needs a recording session that writes files (out_dir)");
        return NULL;
    }
    for (int i = 0; i < self->stream_count; i++)
        if (strcmp(self->streams[i].kind, kind) == 0)
            Py_RETURN_NONE;
    if (self->stream_count == (int)(sizeof self->streams / sizeof self->streams[0])) {
        PyErr_Format(PyExc_RuntimeError, "add_stream('%s'): a session has at most %d streams", kind,
                     self->stream_count);
        return NULL;
    }
    tw_writer_stream_t *stream;
    int err = tw_writer_add_stream(self->writer, kind, header, &stream);
    if (err != 0) {
        PyErr_Format(err == TW_ENOMEM ? PyExc_MemoryError : PyExc_ValueError,
                     "add_stream('%s'): %s (a kind is 1 to %d characters of [a-z0-9_], not 'calls', and the CSV "
                     "header one line)", kind, tw_strerror(err), TW_STREAM_KIND_MAX);
        return NULL;
    }
    strcpy(self->streams[self->stream_count].kind, kind);
    self->streams[self->stream_count++].stream = stream;
    Py_RETURN_NONE;
}

/* stream_write(kind, text, step=-1) -> rows refused: text holds rows already formatted, one per line,
 * of that step (-1: the step in progress). The writer keeps them where their step says (schedule,
 * captures). */
static PyObject *session_stream_write(PyObject *op, PyObject *args)
{
    tw_session_object *self = (tw_session_object *)op;
    const char *kind, *text;
    Py_ssize_t len;
    long long step = -1;
    if (!PyArg_ParseTuple(args, "ss#|L:stream_write", &kind, &text, &len, &step))
        return NULL;
    tw_writer_stream_t *stream = NULL;
    for (int i = 0; i < self->stream_count && stream == NULL; i++)
        if (strcmp(self->streams[i].kind, kind) == 0)
            stream = self->streams[i].stream;
    if (stream == NULL) {
        PyErr_Format(PyExc_KeyError, "no stream '%s' in this session: add_stream() first", kind);
        return NULL;
    }
    unsigned long refused = 0;
    const char *end = text + len;
    while (text < end) {
        const char *newline = memchr(text, '\n', (size_t)(end - text));
        size_t row = newline != NULL ? (size_t)(newline - text) + 1 : (size_t)(end - text);
        tw_stream_row_t r = {text, row, step < 0 ? TW_STEP_NOW : (uint64_t)step, TW_API_ID_NONE, 0};
        if (row > 1 && tw_writer_stream_put(stream, &r) != 0)
            refused++; /* counted as dropped by the stream, and in the manifest */
        text += row;
    }
    return PyLong_FromUnsignedLong(refused);
}

static PyObject *session_stream_stats(PyObject *op, PyObject *arg)
{
    tw_session_object *self = (tw_session_object *)op;
    const char *kind = PyUnicode_AsUTF8(arg);
    if (kind == NULL)
        return NULL;
    for (int i = 0; i < self->stream_count; i++) {
        if (strcmp(self->streams[i].kind, kind) != 0)
            continue;
        tw_writer_stream_stats_t st;
        tw_writer_stream_stats(self->streams[i].stream, &st);
        return Py_BuildValue("{sKsKsK}", "records_written", (unsigned long long)st.records_written,
                             "records_dropped", (unsigned long long)st.records_dropped, "bytes_written",
                             (unsigned long long)st.bytes_written);
    }
    PyErr_Format(PyExc_KeyError, "no stream '%s' in this session", kind);
    return NULL;
}

static PyMethodDef session_methods[] = {
    {"start", session_start, METH_NOARGS, "Make every wrapper record into this session."},
    {"stop", session_stop, METH_NOARGS, "Stop recording and gather every thread's records."},
    {"records", session_records, METH_NOARGS,
     "The records of a stopped session: a list of tuples of the fields named by _core.RECORD_FIELDS, "
     "of the schedule's active steps."},
    {"sites", session_sites, METH_NOARGS,
     "The call sites interned so far: {id: (file, line, function, text)} (the records' site column)."},
    {"stats", session_stats, METH_NOARGS, "Counters: records, dropped, chunks, threads, clock."},
    {"pause_thread", session_pause, METH_NOARGS,
     "Stop recording calls made by this thread (nestable) until resume_thread()."},
    {"resume_thread", session_resume, METH_NOARGS, "Undo one pause_thread() on this thread."},
    {"step", session_step, METH_NOARGS,
     "End the current step; returns the number of the step that begins (steps count from 0). Once\n"
     "called, only these calls end steps (not optimizer steps)."},
    {"manual_steps", session_manual_steps, METH_NOARGS,
     "From now on only step() ends steps, not optimizer steps (a trainer that marks its own steps);\n"
     "the current step goes on."},
    {"add_stream", session_add_stream, METH_VARARGS,
     "add_stream(kind, csv_header)\n--\n\nRows of another kind go to files of their own (NAME.KIND.csv)."},
    {"stream_write", session_stream_write, METH_VARARGS,
     "stream_write(kind, text, step=-1) -> refused\n--\n\nQueues rows (one per line, in the session's format)\n"
     "of a step (-1: the step in progress); the writer keeps those of the steps it records."},
    {"stream_stats", session_stream_stats, METH_O, "stream_stats(kind) -> counters of a stream"},
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
    PyObject *fields = Py_BuildValue("(ssssssssssssssss)", "call_id", "api", "start_ns", "cost_ns", "self_ns",
                                     "gpu_ns", "tid", "depth", "parent_id", "error", "args", "module", "step", "site",
                                     "fwd_call_id", "fwd_api");
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
