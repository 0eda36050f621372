/* SPDX-License-Identifier: MIT */
/*
 * Session: one profiling session. start() makes its recorder the one every wrapper records into;
 * stop() ends that and gathers the threads' partial chunks; records() reads the records back.
 * One session records at a time in a process.
 */
#include "module.h"

typedef enum { SESSION_NEW, SESSION_ACTIVE, SESSION_STOPPED } session_state_t;

typedef struct {
    PyObject_HEAD
    tw_recorder_t *recorder;
    tw_clock_t clock;
    session_state_t state;
} tw_session_object;

static uint64_t last_gen;

static PyObject *session_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Session() takes no arguments");
        return NULL;
    }
    tw_session_object *self = (tw_session_object *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (tw_recorder_create(&self->recorder) != 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->state = SESSION_NEW;
    return (PyObject *)self;
}

static void session_dealloc(PyObject *op)
{
    tw_session_object *self = (tw_session_object *)op;
    PyTypeObject *type = Py_TYPE(op);
    /* An active session is referenced by tw_active, so it cannot be deallocated while recording. */
    tw_recorder_destroy(self->recorder);
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
    tw_active.recorder = self->recorder;
    tw_active.clock_source = self->clock.source;
    tw_active.session = Py_NewRef(op);
    tw_active.gen = ++last_gen;
    self->state = SESSION_ACTIVE;
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
    tw_active.gen = 0;
    tw_active.recorder = NULL;
    /* With the GIL held and the generation changed, no thread is inside tw_call_* for this recorder. */
    tw_recorder_collect(self->recorder);
    self->state = SESSION_STOPPED;
    PyObject *session = tw_active.session;
    tw_active.session = NULL;
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
        PyObject *name = api_name_object(ctx, r->api_id);
        if (name == NULL)
            return -1;
        PyObject *row = Py_BuildValue("(KNLKKKKIKO)", (unsigned long long)r->call_id, name,
                                      (long long)tw_clock_epoch_ns(clock, r->start),
                                      (unsigned long long)tw_clock_duration_ns(clock, r->cost),
                                      (unsigned long long)tw_clock_duration_ns(clock, r->self),
                                      (unsigned long long)r->gpu_ns, (unsigned long long)chunk->tid,
                                      (unsigned int)r->depth, (unsigned long long)r->parent_id,
                                      (r->flags & TW_RECORD_ERROR) ? Py_True : Py_False);
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
    records_ctx_t ctx = {self, PyList_New(0), PyDict_New()};
    if (ctx.list == NULL || ctx.names == NULL ||
        tw_recorder_foreach_chunk(self->recorder, append_chunk_records, &ctx) != 0)
        Py_CLEAR(ctx.list);
    Py_XDECREF(ctx.names);
    return ctx.list;
}

static PyObject *session_stats(PyObject *op, PyObject *unused)
{
    tw_session_object *self = (tw_session_object *)op;
    tw_recorder_stats_t stats;
    tw_recorder_stats(self->recorder, &stats);
    return Py_BuildValue("{sKsKsKsKsssd}", "records", (unsigned long long)stats.records, "dropped",
                         (unsigned long long)stats.dropped, "chunks", (unsigned long long)stats.chunks,
                         "threads", (unsigned long long)stats.threads, "clock",
                         self->clock.source == TW_CLOCK_TSC ? "tsc" : "monotonic", "ticks_per_ns",
                         self->clock.ticks_per_ns);
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

static PyObject *session_resume(PyObject *op, PyObject *unused)
{
    tw_resume_thread();
    Py_RETURN_NONE;
}

static PyMethodDef session_methods[] = {
    {"start", session_start, METH_NOARGS, "Make every wrapper record into this session."},
    {"stop", session_stop, METH_NOARGS, "Stop recording and gather every thread's records."},
    {"records", session_records, METH_NOARGS,
     "The records of a stopped session: a list of tuples (call_id, api, start_ns, cost_ns, self_ns, "
     "gpu_ns, tid, depth, parent_id, error)."},
    {"stats", session_stats, METH_NOARGS, "Counters: records, dropped, chunks, threads, clock."},
    {"pause_thread", session_pause, METH_NOARGS,
     "Stop recording calls made by this thread (nestable) until resume_thread()."},
    {"resume_thread", session_resume, METH_NOARGS, "Undo one pause_thread() on this thread."},
    {NULL},
};

static PyGetSetDef session_getset[] = {
    {"active", session_get_active, NULL, "whether this session is recording", NULL},
    {NULL},
};

static PyType_Slot session_slots[] = {
    {Py_tp_new, session_new},
    {Py_tp_dealloc, session_dealloc},
    {Py_tp_methods, session_methods},
    {Py_tp_getset, session_getset},
    {Py_tp_doc, "Session()\n--\n\nA profiling session: start(), stop(), records()."},
    {0, NULL},
};

static PyType_Spec session_spec = {
    .name = "torchwrapper._core.Session",
    .basicsize = sizeof(tw_session_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = session_slots,
};

int tw_session_add_type(PyObject *module, tw_module_state *state)
{
    state->session_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &session_spec, NULL);
    if (state->session_type == NULL || PyModule_AddType(module, state->session_type) < 0)
        return -1;
    return 0;
}
