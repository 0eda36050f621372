/* SPDX-License-Identifier: MIT */
/*
 * torchwrapper._core's record reader: the C reader (src/read/reader.c) handing Python batches of rows,
 * a list or bytes per column, rather than an object per field per call; the kind of a file
 * (record_kind) and the sites files (read_sites). Python's readers (_files.py) are built on it, so
 * kind detection, torn lines and the root module are decided in one place, tw-report's.
 *
 * A batch is parsed with the GIL released into C arrays (numbers as int64, strings copied into an
 * arena: the reader's buffer is valid during its callback only), then turned into Python objects
 * with the GIL held. Repeated strings (API names, module paths, input shapes) are made once per reader: a small
 * cache by content, which also makes pandas' categorical of the API cheap (equal strings are one
 * object).
 */
#include "record_reader.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/reader.h"
#include "torchwrapper/sites.h"

#define BATCH_ROWS_DEFAULT 16384 /* 16 bytes a field: 4.5 MB of arrays a reader */
#define CACHE_SLOTS 4096 /* strings remembered per reader (direct-mapped by content hash) */

typedef enum { F_INT, F_BOOL, F_STR, F_MODULE } field_type_t;

typedef struct {
    const char *name;
    field_type_t type;
    size_t offset; /* in tw_row_t: an 8-byte integer, int error, or a tw_str_t */
} field_t;

#define INT(name, member) {name, F_INT, offsetof(tw_row_t, member)}
#define STR(name, member) {name, F_STR, offsetof(tw_row_t, member)}

/* The columns of each kind, in the schema's order (_schema.py; test_reader_binding checks it). */
static const field_t call_fields[] = {
    INT("call_id", call_id), STR("api", api),       INT("start_ns", start_ns), INT("cost_ns", cost_ns),
    INT("self_ns", self_ns), INT("gpu_ns", gpu_ns), INT("pid", pid),           INT("tid", tid),
    INT("depth", depth),     INT("parent_id", parent_id), {"error", F_BOOL, offsetof(tw_row_t, error)},
    STR("args", args),       {"module", F_MODULE, offsetof(tw_row_t, module)}, INT("step", step),
    INT("site", site),       INT("fwd_call_id", fwd_call_id), STR("fwd_api", fwd_api),
    INT("flops", flops),     INT("flops_total", flops_total), INT("mem_alloc", mem_alloc),
    INT("mem_self", mem_self), INT("mem_freed", mem_freed), INT("mem_peak", mem_peak),
};
static const field_t gpu_fields[] = {
    INT("call_id", call_id), STR("api", api),   STR("kind", gpu_kind),   STR("name", name),
    INT("start_ns", start_ns), INT("end_ns", end_ns), INT("device", device), INT("stream", stream),
    INT("correlation_id", correlation_id), INT("pid", pid), INT("launch_start_ns", launch_start_ns),
    INT("launch_end_ns", launch_end_ns), STR("launch", launch),
};
#define MAX_FIELDS (sizeof call_fields / sizeof call_fields[0])

static const field_t *fields_of(tw_file_kind_t kind, size_t *n)
{
    if (kind == TW_FILE_GPU) {
        *n = sizeof gpu_fields / sizeof gpu_fields[0];
        return gpu_fields;
    }
    *n = sizeof call_fields / sizeof call_fields[0];
    return call_fields;
}

static const char *kind_name(tw_file_kind_t kind)
{
    switch (kind) {
    case TW_FILE_CALLS: return "calls";
    case TW_FILE_GPU: return "gpu";
    case TW_FILE_STATS: return "stats";
    case TW_FILE_UPDATES: return "updates";
    default: return NULL;
    }
}

/* A string of a batch: arena[offset .. offset + len); state 1: text, 0: none (no module), -1: a
 * file without the column. */
typedef struct {
    size_t offset;
    uint32_t len;
    int32_t state;
} text_t;

typedef struct {
    PyObject_HEAD
    PyObject *paths;     /* tuple of the paths as given (str, bytes or os.PathLike) */
    Py_ssize_t next;     /* the index of the file to open after the current one */
    PyObject *path;      /* the current file's path (a new reference), or NULL */
    tw_reader_t *reader; /* the current file, or NULL */
    PyObject *module_missing; /* the module of rows of files without the column */
    size_t batch_rows;
    int input_shapes;    /* call batches get an input_shapes column (shapes_list) */
    int busy;            /* a batch is being read (the GIL released): no second one meanwhile */
    tw_read_stats_t stats;
    /* The batch being read: n rows of one file's kind, each column an array of batch_rows. */
    tw_file_kind_t kind;
    size_t n;
    void *columns[MAX_FIELDS]; /* int64_t[], uint8_t[] or text_t[] by the kind's field types */
    char *arena;
    size_t arena_used, arena_size;
    int failed;          /* the callback ran out of memory */
    struct {
        uint64_t hash;
        PyObject *text;
    } cache[CACHE_SLOTS];
    /* input shapes by argument text object (both held): equal texts are one object while the cache
     * above holds them, so most rows find their shapes without reading their text again */
    struct {
        PyObject *args, *shapes;
    } shapes_cache[CACHE_SLOTS];
} reader_object;

/* ---- the batch: filled without the GIL ---------------------------------------------------------- */

/* Room for n more bytes in the arena; -1 when out of memory. */
static int arena_reserve(reader_object *self, size_t n)
{
    if (self->arena_used + n > self->arena_size) {
        size_t size = self->arena_size ? self->arena_size : 1 << 20;
        while (size < self->arena_used + n)
            size *= 2;
        char *bigger = realloc(self->arena, size); /* plain malloc: no GIL held here */
        if (bigger == NULL)
            return -1;
        self->arena = bigger;
        self->arena_size = size;
    }
    return 0;
}

static int store_text(reader_object *self, text_t *out, tw_str_t s, int state)
{
    if (arena_reserve(self, s.len) != 0)
        return -1;
    memcpy(self->arena + self->arena_used, s.ptr, s.len);
    *out = (text_t){self->arena_used, (uint32_t)s.len, state};
    self->arena_used += s.len;
    return 0;
}

static int on_row(void *ctx, const tw_row_t *row)
{
    reader_object *self = ctx;
    size_t nfields, i = self->n;
    const field_t *fields = fields_of(row->kind, &nfields);
    self->kind = row->kind;
    for (size_t f = 0; f < nfields; f++) {
        const char *at = (const char *)row + fields[f].offset;
        switch (fields[f].type) {
        case F_INT: memcpy((int64_t *)self->columns[f] + i, at, sizeof(int64_t)); break;
        case F_BOOL: ((uint8_t *)self->columns[f])[i] = row->error != 0; break;
        case F_STR:
        case F_MODULE: {
            int state = fields[f].type == F_MODULE ? row->has_module : 1;
            if (store_text(self, (text_t *)self->columns[f] + i, state > 0 ? *(const tw_str_t *)at : (tw_str_t){"", 0},
                           state) != 0) {
                self->failed = 1;
                return TW_ENOMEM;
            }
            break;
        }
        }
    }
    self->n++;
    return 0;
}

/* ---- the batch as Python objects (the GIL held) ------------------------------------------------- */

static uint64_t text_hash(const char *p, size_t len)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ len, k;
    for (; len >= 8; p += 8, len -= 8) {
        memcpy(&k, p, 8);
        h = (h ^ k) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    k = 0;
    memcpy(&k, p, len);
    h = (h ^ k) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

/* The str of arena text, the same object for the same text while the cache holds it. */
static PyObject *text_object(reader_object *self, const char *p, size_t len)
{
    uint64_t h = text_hash(p, len);
    size_t slot = (size_t)h & (CACHE_SLOTS - 1);
    PyObject *cached = self->cache[slot].text;
    if (cached != NULL && self->cache[slot].hash == h) {
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(cached, &n);
        if (utf8 != NULL && (size_t)n == len && memcmp(utf8, p, len) == 0)
            return Py_NewRef(cached);
        PyErr_Clear();
    }
    /* "replace": a record never fails to read for a byte that is not UTF-8 */
    PyObject *text = PyUnicode_DecodeUTF8(p, (Py_ssize_t)len, "replace");
    if (text == NULL)
        return NULL;
    Py_XSETREF(self->cache[slot].text, Py_NewRef(text));
    self->cache[slot].hash = h;
    return text;
}

static PyObject *text_list(reader_object *self, const text_t *texts, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *item;
        if (texts[i].state > 0)
            item = text_object(self, self->arena + texts[i].offset, texts[i].len);
        else
            item = Py_NewRef(texts[i].state < 0 ? self->module_missing : Py_None);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* The input shapes of an argument summary (a str of the args column), the same object for the same
 * args object; a new reference, or NULL with an exception. */
static PyObject *shapes_of(reader_object *self, PyObject *args)
{
    size_t slot = ((uintptr_t)args >> 4) * 0x9E3779B97F4A7C15ull >> 52; /* 12 bits: CACHE_SLOTS */
    if (self->shapes_cache[slot].args == args)
        return Py_NewRef(self->shapes_cache[slot].shapes);
    Py_ssize_t len;
    const char *text = PyUnicode_AsUTF8AndSize(args, &len);
    if (text == NULL)
        return NULL;
    size_t room = 2 * (size_t)len + 2; /* always enough (reader.h) */
    char small[2 * 512 + 2], *out = room <= sizeof small ? small : PyMem_Malloc(room);
    if (out == NULL)
        return PyErr_NoMemory();
    int n = tw_args_shapes(text, (size_t)len, out, room);
    PyObject *shapes = text_object(self, out, n > 0 ? (size_t)n : 0);
    if (out != small)
        PyMem_Free(out);
    if (shapes == NULL)
        return NULL;
    Py_XSETREF(self->shapes_cache[slot].args, Py_NewRef(args));
    Py_XSETREF(self->shapes_cache[slot].shapes, Py_NewRef(shapes));
    return shapes;
}

/* The input_shapes column from the batch's args column (a list of str). */
static PyObject *shapes_list(reader_object *self, PyObject *args_list)
{
    Py_ssize_t n = PyList_GET_SIZE(args_list);
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *shapes = shapes_of(self, PyList_GET_ITEM(args_list, i));
        if (shapes == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, shapes);
    }
    return list;
}

/* {column: values} of the batch: int64 columns as bytes (native int64: numpy.frombuffer, or
 * memoryview.cast("q")), error as bytes of 0/1 (cast "?"), text as a list of str (None: no module). */
static PyObject *batch_dict(reader_object *self)
{
    size_t nfields;
    const field_t *fields = fields_of(self->kind, &nfields);
    PyObject *dict = PyDict_New();
    if (dict == NULL)
        return NULL;
    for (size_t f = 0; f < nfields; f++) {
        PyObject *values;
        if (fields[f].type == F_INT)
            values = PyBytes_FromStringAndSize(self->columns[f], (Py_ssize_t)(self->n * sizeof(int64_t)));
        else if (fields[f].type == F_BOOL)
            values = PyBytes_FromStringAndSize(self->columns[f], (Py_ssize_t)self->n);
        else
            values = text_list(self, self->columns[f], self->n);
        if (values == NULL || PyDict_SetItemString(dict, fields[f].name, values) < 0) {
            Py_XDECREF(values);
            Py_DECREF(dict);
            return NULL;
        }
        Py_DECREF(values);
    }
    PyObject *args_list = self->input_shapes && self->kind == TW_FILE_CALLS ? PyDict_GetItemString(dict, "args") : NULL;
    if (args_list != NULL) { /* borrowed from dict */
        PyObject *values = shapes_list(self, args_list);
        if (values == NULL || PyDict_SetItemString(dict, "input_shapes", values) < 0) {
            Py_XDECREF(values);
            Py_DECREF(dict);
            return NULL;
        }
        Py_DECREF(values);
    }
    return dict;
}

/* ---- the reader type ---------------------------------------------------------------------------- */

/* Raises for a reader error: OSError by errno for a file that cannot be opened (FileNotFoundError
 * naming the path), else by code, with the reader's message (which names the file). */
static void raise_read_error(int rc, int saved_errno, PyObject *path, const char *message)
{
    if (rc == TW_ENOMEM) {
        PyErr_NoMemory();
    } else if (rc == TW_EIO && saved_errno != 0) {
        errno = saved_errno;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    } else {
        PyErr_SetString(rc == TW_EIO ? PyExc_OSError : PyExc_ValueError, message);
    }
}

static int alloc_columns(reader_object *self)
{
    for (size_t f = 0; f < MAX_FIELDS; f++) {
        /* the largest of a column's element types, so that any kind's field f fits */
        self->columns[f] = PyMem_RawCalloc(self->batch_rows, sizeof(text_t));
        if (self->columns[f] == NULL) {
            for (size_t g = 0; g < f; g++) { /* all or none: the next call tries again */
                PyMem_RawFree(self->columns[g]);
                self->columns[g] = NULL;
            }
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static void close_file(reader_object *self)
{
    tw_reader_close(self->reader);
    self->reader = NULL;
}

static PyObject *reader_next(reader_object *self)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this RecordReader is reading in another thread");
        return NULL;
    }
    if (self->columns[0] == NULL && alloc_columns(self) < 0)
        return NULL;
    for (;;) {
        char err[1024] = "";
        if (self->reader == NULL) {
            if (self->next >= PyTuple_GET_SIZE(self->paths))
                return NULL; /* StopIteration */
            PyObject *path = PyTuple_GET_ITEM(self->paths, self->next), *encoded;
            if (!PyUnicode_FSConverter(path, &encoded))
                return NULL;
            self->next++;
            Py_XSETREF(self->path, Py_NewRef(path));
            errno = 0;
            int rc = tw_reader_open(PyBytes_AS_STRING(encoded), &self->stats, &self->reader, err, sizeof err);
            int saved = errno;
            Py_DECREF(encoded);
            if (rc != 0) {
                raise_read_error(rc, saved, path, err);
                return NULL;
            }
        }
        self->n = 0;
        self->arena_used = 0;
        self->failed = 0;
        self->busy = 1;
        int more = 0, rc;
        /* Pure C: the file's bytes into the batch's arrays (other threads run meanwhile). */
        Py_BEGIN_ALLOW_THREADS
        rc = tw_reader_next(self->reader, on_row, self, self->batch_rows, &more, err, sizeof err);
        Py_END_ALLOW_THREADS
        self->busy = 0;
        if (rc != 0) {
            close_file(self);
            if (self->failed)
                PyErr_NoMemory();
            else
                raise_read_error(rc, 0, self->path, err);
            return NULL;
        }
        if (!more)
            close_file(self);
        if (self->n == 0)
            continue; /* an empty file, or one whose rows were all torn or malformed */
        PyObject *columns = batch_dict(self);
        if (columns == NULL)
            return NULL;
        return Py_BuildValue("(OsN)", self->path, kind_name(self->kind), columns);
    }
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"paths", "batch_rows", "module_missing", "input_shapes", NULL};
    PyObject *paths, *module_missing = Py_None;
    Py_ssize_t batch_rows = BATCH_ROWS_DEFAULT;
    int input_shapes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$nOp:RecordReader", keywords, &paths, &batch_rows,
                                     &module_missing, &input_shapes))
        return NULL;
    if (batch_rows < 1 || (size_t)batch_rows > SIZE_MAX / sizeof(text_t)) {
        PyErr_Format(PyExc_ValueError, "batch_rows=%zd is not accepted: give a positive number of rows", batch_rows);
        return NULL;
    }
    PyObject *tuple;
    if (PyUnicode_Check(paths) || PyBytes_Check(paths) || PyObject_HasAttrString(paths, "__fspath__"))
        tuple = PyTuple_Pack(1, paths);
    else
        tuple = PySequence_Tuple(paths);
    if (tuple == NULL)
        return NULL;
    reader_object *self = (reader_object *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(tuple);
        return NULL;
    }
    self->paths = tuple;
    self->module_missing = Py_NewRef(module_missing);
    self->batch_rows = (size_t)batch_rows;
    self->input_shapes = input_shapes;
    return (PyObject *)self;
}

static void reader_dealloc(reader_object *self)
{
    PyTypeObject *type = Py_TYPE(self);
    close_file(self);
    for (size_t f = 0; f < MAX_FIELDS; f++)
        PyMem_RawFree(self->columns[f]);
    free(self->arena);
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        Py_XDECREF(self->cache[i].text);
        Py_XDECREF(self->shapes_cache[i].args);
        Py_XDECREF(self->shapes_cache[i].shapes);
    }
    Py_XDECREF(self->paths);
    Py_XDECREF(self->path);
    Py_XDECREF(self->module_missing);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *reader_close(reader_object *self, PyObject *unused)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this RecordReader is reading in another thread");
        return NULL;
    }
    close_file(self);
    self->next = PyTuple_GET_SIZE(self->paths);
    Py_RETURN_NONE;
}

static PyObject *reader_counter(reader_object *self, void *which)
{
    const uint64_t *counters[] = {&self->stats.rows, &self->stats.truncated, &self->stats.malformed,
                                  &self->stats.bytes};
    return PyLong_FromUnsignedLongLong(*counters[(intptr_t)which]);
}

static PyGetSetDef reader_getset[] = {
    {"rows", (getter)reader_counter, NULL, "rows read so far (all files)", (void *)0},
    {"truncated", (getter)reader_counter, NULL, "torn last lines skipped (a killed process)", (void *)1},
    {"malformed", (getter)reader_counter, NULL, "rows skipped because a field did not parse", (void *)2},
    {"bytes", (getter)reader_counter, NULL, "bytes read", (void *)3},
    {NULL},
};

static PyMethodDef reader_methods[] = {
    {"close", (PyCFunction)reader_close, METH_NOARGS, "Closes the file being read; no more batches follow."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot reader_slots[] = {
    {Py_tp_doc, "RecordReader(paths, *, batch_rows=16384, module_missing=None, input_shapes=False)\n--\n\n"
                "The call and GPU records of a file (or a sequence of files), in batches: iterating gives\n"
                "(path, kind, columns) with kind 'calls' or 'gpu' and columns {name: values} in the schema's\n"
                "order: int64 columns as bytes of native int64, error as bytes of 0/1, text as lists of str.\n"
                "module is None for a call that is no module's forward ('' for the path '', older files'\n"
                "first model), and module_missing in a file without the column. input_shapes=True adds\n"
                "to call batches an input_shapes column (str, torch.profiler's form: [[4, 8], [8, 16]];\n"
                "'' without a summary)\n"
                "read in C from each call's argument summary. Torn last lines and rows that do not parse\n"
                "are skipped and counted (truncated, malformed); a file that is not ours is a ValueError,\n"
                "one that cannot be read an OSError, each naming the file."},
    {Py_tp_new, reader_new},
    {Py_tp_dealloc, reader_dealloc},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, reader_next},
    {Py_tp_getset, reader_getset},
    {Py_tp_methods, reader_methods},
    {0, NULL},
};

static PyType_Spec reader_spec = {
    .name = "torchwrapper._core.RecordReader",
    .basicsize = sizeof(reader_object),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = reader_slots,
};

/* ---- record_kind, read_sites -------------------------------------------------------------------- */

static PyObject *core_record_kind(PyObject *core, PyObject *path)
{
    PyObject *encoded;
    if (!PyUnicode_FSConverter(path, &encoded))
        return NULL;
    char err[1024] = "";
    tw_file_kind_t kind = 0;
    int rc, saved;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = tw_read_any_kind(PyBytes_AS_STRING(encoded), &kind, err, sizeof err);
    saved = errno;
    Py_END_ALLOW_THREADS
    Py_DECREF(encoded);
    if (rc != 0) {
        raise_read_error(rc, saved, path, err);
        return NULL;
    }
    const char *name = kind_name(kind);
    return name != NULL ? PyUnicode_FromString(name) : Py_NewRef(Py_None);
}

static int on_site(void *ctx, uint32_t id, const char *file, uint32_t line, const char *function, const char *text)
{
    PyObject *sites = ctx;
    PyObject *key = PyLong_FromUnsignedLong(id);
    PyObject *site = key != NULL ? Py_BuildValue("{s:s,s:I,s:s,s:s}", "file", file, "line", (unsigned)line,
                                                 "function", function, "text", text)
                                 : NULL;
    int rc = site != NULL ? PyDict_SetItem(sites, key, site) : -1;
    Py_XDECREF(key);
    Py_XDECREF(site);
    return rc < 0 ? 1 : 0; /* 1: a Python error is set */
}

static PyObject *core_read_sites(PyObject *core, PyObject *path)
{
    PyObject *encoded;
    if (!PyUnicode_FSConverter(path, &encoded))
        return NULL;
    PyObject *sites = PyDict_New();
    if (sites == NULL) {
        Py_DECREF(encoded);
        return NULL;
    }
    char err[1024] = "";
    int64_t pid;
    errno = 0;
    /* The GIL stays held: the callback makes the dicts (a sites file is small). */
    int rc = tw_sites_read_json(PyBytes_AS_STRING(encoded), on_site, sites, &pid, err, sizeof err);
    int saved = errno;
    Py_DECREF(encoded);
    if (rc != 0) {
        if (rc != 1)
            raise_read_error(rc, saved, path, err);
        Py_DECREF(sites);
        return NULL;
    }
    return Py_BuildValue("(LN)", (long long)pid, sites);
}

static PyMethodDef reader_functions[] = {
    {"record_kind", core_record_kind, METH_O,
     "record_kind(path) -> 'calls', 'gpu', 'stats', 'updates' or None\n--\n\n"
     "A file's kind from its first line (None: empty, or one torn line); ValueError naming the file\n"
     "when it is not one of ours, OSError when it cannot be read."},
    {"read_sites", core_read_sites, METH_O,
     "read_sites(path) -> (pid, {id: {'file', 'line', 'function', 'text'}})\n--\n\n"
     "A sites file (sites.json, sites-PID.json); pid is -1 when the file names none. ValueError naming\n"
     "the file when it is not a sites file."},
    {NULL, NULL, 0, NULL},
};

int tw_reader_add_functions(PyObject *core, tw_core_state *state)
{
    state->record_reader_type = (PyTypeObject *)PyType_FromModuleAndSpec(core, &reader_spec, NULL);
    if (state->record_reader_type == NULL || PyModule_AddType(core, state->record_reader_type) < 0)
        return -1;
    return PyModule_AddFunctions(core, reader_functions);
}
