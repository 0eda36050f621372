/* SPDX-License-Identifier: MIT */
/*
 * What a Session gives back (session.h): its records (records()), the call sites (sites()), its
 * counters (stats()), and its row streams (add_stream, stream_write, stream_stats).
 */
#include "session_output.h"

#include <string.h>

#include "call/call_sites.h"
#include "session_object.h"

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
        tw_resources_t res;
        tw_record_resources(chunk, r, &res);
        /* the fields in the order of RECORD_FIELDS (session.c): readers take them by name */
        PyObject *row = Py_BuildValue("(KNLKKKKIKONNIIKNKKKKKK)", (unsigned long long)r->call_id, name,
                                      (long long)tw_clock_epoch_ns(clock, r->start),
                                      (unsigned long long)tw_clock_duration_ns(clock, r->cost),
                                      (unsigned long long)tw_clock_duration_ns(clock, r->self), 0ull,
                                      (unsigned long long)chunk->tid, (unsigned int)r->depth,
                                      (unsigned long long)r->parent_id,
                                      (r->flags & TW_RECORD_ERROR) ? Py_True : Py_False, args, module,
                                      (unsigned int)r->step, (unsigned int)r->site,
                                      (unsigned long long)fwd_call_id, fwd_api, (unsigned long long)res.flops,
                                      (unsigned long long)res.flops_total, (unsigned long long)res.mem_alloc,
                                      (unsigned long long)res.mem_self, (unsigned long long)res.mem_freed,
                                      (unsigned long long)res.mem_peak);
        if (row == NULL)
            return -1;
        int err = PyList_Append(ctx->list, row);
        Py_DECREF(row);
        if (err < 0)
            return -1;
    }
    return 0;
}

PyObject *tw_session_records(PyObject *op, PyObject *unused)
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

/* Why feature is off, or NULL (None) when it is on or was not asked for. */
static const char *reason_of(const tw_session_object *self, tw_session_feature_t feature)
{
    return self->features[feature].reason[0] ? self->features[feature].reason : NULL;
}

/* stats()["gpu"]: "on" or "off"; "gpu_unavailable": why not, or None; and the GPU counters. */
static int add_gpu_stats(tw_session_object *self, PyObject *out)
{
    PyObject *extra;
    if (self->gpu != NULL) {
        tw_gpu_stats_t g;
        tw_gpu_stats(self->gpu, &g);
        extra = Py_BuildValue("{sssOsKsKsKsKsKsKsssIsK}", "gpu", "on", "gpu_unavailable", Py_None, "gpu_kernels",
                              (unsigned long long)g.kernels, "gpu_memcpys", (unsigned long long)g.memcpys,
                              "gpu_memsets", (unsigned long long)g.memsets, "gpu_unattributed",
                              (unsigned long long)g.unattributed, "gpu_incomplete", (unsigned long long)g.incomplete,
                              "gpu_dropped", (unsigned long long)g.dropped, "cupti_library", tw_gpu_library_path(),
                              "cupti_version", (unsigned int)g.cupti_version, "gpu_pauses",
                              (unsigned long long)g.pauses);
    } else {
        extra = Py_BuildValue("{ssss}", "gpu", "off", "gpu_unavailable",
                              reason_of(self, TW_SESSION_GPU));
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
    int on = self->features[TW_SESSION_BACKWARD].on;
    /* "flops": "on" while FLOPs are counted (config flops), "flops_unavailable": why not when asked */
    PyObject *extra = Py_BuildValue("{sssssKssss}", "backward", on ? "on" : "off", "backward_unavailable",
                                    reason_of(self, TW_SESSION_BACKWARD), "backward_unlinked",
                                    (unsigned long long)self->backward_unlinked, "flops",
                                    self->features[TW_SESSION_FLOPS].on ? "on" : "off", "flops_unavailable",
                                    reason_of(self, TW_SESSION_FLOPS));
    if (extra == NULL)
        return -1;
    int rc = PyDict_Update(out, extra);
    Py_DECREF(extra);
    return rc;
}

/* stats()["memory"]: "on" while memory is measured (or was, in a stopped session), else "off";
 * "memory_unavailable": why not when asked for; "memory_note": what stop could not undo. */
static int add_memory_stats(tw_session_object *self, PyObject *out)
{
    PyObject *extra = Py_BuildValue("{ssssss}", "memory", self->features[TW_SESSION_MEMORY].on ? "on" : "off",
                                    "memory_unavailable", reason_of(self, TW_SESSION_MEMORY), "memory_note",
                                    self->memory_note[0] ? self->memory_note : NULL);
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
PyObject *tw_session_sites(PyObject *op, PyObject *unused)
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

/* "own_cost": the profiler's own cost (own_cost.h): the stopped session's, or so far (the node hooks'
 * part once stopped); None before it records. 0, or -1 with an exception. */
static int add_own_cost(tw_session_object *self, PyObject *out)
{
    tw_own_figures_t now;
    const tw_own_figures_t *f = &self->own;
    if (!self->own_known && self->state == SESSION_ACTIVE) {
        tw_own_figures(&self->clock, self->gen, 0, tw_clock_ticks(self->clock.source) - self->started_ticks, &now);
        f = &now;
    }
    PyObject *own = self->own_known || self->state == SESSION_ACTIVE ? tw_own_dict(f) : Py_NewRef(Py_None);
    int rc = own != NULL ? PyDict_SetItemString(out, "own_cost", own) : -1;
    Py_XDECREF(own);
    return rc;
}

PyObject *tw_session_stats(PyObject *op, PyObject *unused)
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
        add_backward_stats(self, out) < 0 || add_memory_stats(self, out) < 0 || add_own_cost(self, out) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    if (self->writer == NULL)
        return out;
    tw_writer_stats_t ws;
    tw_writer_stats(self->writer, &ws);
    PyObject *extra = Py_BuildValue("{sKsKsKsKssszsK}", "records_written", (unsigned long long)ws.records_written,
                                    "writer_dropped", (unsigned long long)ws.records_dropped, "bytes_written",
                                    (unsigned long long)ws.bytes_written, "records_truncated",
                                    (unsigned long long)ws.records_truncated, "manifest",
                                    tw_writer_manifest_path(self->writer), "write_error",
                                    ws.write_errno ? strerror(ws.write_errno) : NULL, "writer_helped",
                                    (unsigned long long)ws.helped);
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

/* add_stream(kind, csv_header): the writer writes rows of that kind to files of their own. */
PyObject *tw_session_add_stream(PyObject *op, PyObject *args)
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
PyObject *tw_session_stream_write(PyObject *op, PyObject *args)
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

PyObject *tw_session_stream_stats(PyObject *op, PyObject *arg)
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

