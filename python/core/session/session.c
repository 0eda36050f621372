/* SPDX-License-Identifier: MIT */
/*
 * Session: one profiling session. start() makes its recorder the one every wrapper records into
 * (active.c); stop() ends that and gathers the threads' partial chunks. What it gives back,
 * records(), stats() and its streams, is in session_output.c; what start() starts and stop() stops,
 * feature by feature, in session_features.c. One session records at a time in a process.
 */
#include "session.h"

#include <string.h>

#include "call/active.h"
#include "session_config.h"
#include "session_features.h"
#include "session_object.h"
#include "session_output.h"
#include "call/wrapper.h"

/*
 * Session(**config keys, rank, manifest, per_process_names, gpu_device, cupti_paths, model_watch,
 * torch_layer): the config keys (tw_session_config_keywords) go through the library's validator and
 * come back typed; the others are the Python layer's.
 */
static PyObject *session_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"rank", "manifest", "per_process_names", "gpu_device", "cupti_paths", "model_watch",
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
    PyObject *manifest = Py_None, *cupti_paths = Py_None, *watch = Py_None;
    const char *torch_layer = NULL, *torch_version = NULL;
    long long rank = -1;
    int per_process_names = 0, gpu_device = 0;
    int parsed = PyArg_ParseTupleAndKeywords(args, rest, "|$LOppOO(zz):Session", keywords, &rank, &manifest,
                                             &per_process_names, &gpu_device, &cupti_paths, &watch, &torch_layer,
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
    self->model_watch = Py_NewRef(watch);
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

/* The model watch refers back to its Profile, which holds this session: a cycle the collector must see. */
static int session_traverse(PyObject *op, visitproc visit, void *arg)
{
    tw_session_object *self = (tw_session_object *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->tensor_type);
    Py_VISIT(self->model_watch);
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
    tw_session_clear_hooks(&self->hooks);
    Py_CLEAR(self->model_watch);
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
    tw_session_clear_hooks(&self->hooks);
    Py_XDECREF(self->model_watch);
    tw_config_free(&self->settings);
    PyMem_RawFree(self->manifest_json);
    PyMem_RawFree(self->torch_layer);
    PyMem_RawFree(self->torch_version);
    type->tp_free(op);
    Py_DECREF(type);
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
    if (tw_session_features_start(self) < 0)
        return NULL;
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
    tw_session_features_stop(self);
    /* Not needed once stopped; dropped now so that the model watch (and its Profile) go with refcounts. */
    Py_CLEAR(self->model_watch);
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

int tw_session_add_type(PyObject *core, PyTypeObject **type)
{
    *type = (PyTypeObject *)PyType_FromModuleAndSpec(core, &session_spec, NULL);
    if (*type == NULL || PyModule_AddType(core, *type) < 0)
        return -1;
    /* The names of records()' tuple fields, in the order append_chunk_records builds them, so that
     * Python reads each by name (torchwrapper.records) and a field added here cannot shift another. */
    PyObject *fields = Py_BuildValue("(ssssssssssssssssssssss)", "call_id", "api", "start_ns", "cost_ns", "self_ns",
                                     "gpu_ns", "tid", "depth", "parent_id", "error", "args", "module", "step", "site",
                                     "fwd_call_id", "fwd_api", "flops", "flops_total", "mem_alloc", "mem_self",
                                     "mem_freed", "mem_peak");
    if (fields == NULL)
        return -1;
    int rc = PyModule_AddObjectRef(core, "RECORD_FIELDS", fields);
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
    if (rc < 0 || keys == NULL || PyModule_AddObjectRef(core, "SESSION_CONFIG_KEYS", keys) < 0)
        rc = -1;
    Py_XDECREF(keys);
    return rc;
}
