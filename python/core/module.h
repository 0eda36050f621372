/* SPDX-License-Identifier: MIT */
/* Shared declarations of the torchwrapper._core extension module. */
#ifndef TW_PY_MODULE_H
#define TW_PY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchwrapper/torchwrapper.h"

#include "hooks.h"

typedef struct {
    PyTypeObject *wrapper_type;        /* Wrapper: calls never bind (builtins, partials, ...) */
    PyTypeObject *method_wrapper_type; /* MethodWrapper: binds like a function (x.f(...)) */
    PyTypeObject *session_type;
    PyTypeObject *record_reader_type;  /* RecordReader (record_reader.c) */
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

/* ---- Session's arguments (session_config.c) ---- */

/* The config keys Session takes as keyword arguments, in its keyword order. */
#define TW_SESSION_CONFIG_KEYWORDS 19
extern const char *const tw_session_config_keywords[TW_SESSION_CONFIG_KEYWORDS];

/* The given config arguments (values[i] for tw_session_config_keywords[i], NULL when not given)
 * through the library's validator with a bare Session's defaults, typed into *out (tw_config_free()
 * it). Returns 0, or -1 with ValueError naming the key, the value and what is accepted. */
int tw_session_config(PyObject *const *values, tw_config_t *out);

/* Copies that outlive the Python objects (PyMem_Raw; NULL with MemoryError). */
char *tw_dup_cstr(const char *s);
char *tw_dup_utf8(PyObject *text);

/* cupti_paths (a sequence of str) as a NULL-terminated array (PyMem_Raw), or NULL with an exception;
 * freed by tw_free_paths. */
char **tw_cupti_paths_of(PyObject *paths);
void tw_free_paths(char **paths);

/* tw_args_mode_t, tw_sites_mode_t: config.h (the typed configuration). */

/* TW_KIND_*, tw_hooks_t: hooks.h (what tracing hooks around calls). */

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


int tw_wrapper_add_types(PyObject *module, tw_module_state *state);
int tw_session_add_type(PyObject *module, tw_module_state *state);
PyObject *tw_wrap(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *tw_wrap_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_install(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_restore(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *tw_scan_modules(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

int tw_trace_add_functions(PyObject *module);

/* The record reader (record_reader.c): RecordReader, record_kind(), read_sites(). */
int tw_reader_add_functions(PyObject *module, tw_module_state *state);
void tw_ptr_table_clear(tw_ptr_table_t *table);

/* The innermost recorded call in progress on this thread, the outermost one and its site: 1, or 0 if none. */
int tw_current_call(uint64_t *call_id, uint64_t *outer_id, uint32_t *outer_site);

/* module.attribute of a module already imported (the extension never imports torch itself): a new
 * reference, or NULL without an error when the module is not imported or lacks it. */
PyObject *tw_imported_attribute(const char *module, const char *attribute);


/* Named ranges (ranges.c): _core.range_begin(name) and _core.range_end(). */
PyObject *tw_range_begin(PyObject *module, PyObject *name);
PyObject *tw_range_end(PyObject *module, PyObject *unused);

/* Suspends recording on the calling thread while the profiler runs its own Python code. */
void tw_pause_thread(void);
void tw_resume_thread(void);

/* The state of the active session, the frame mirror and call sites, each in a header of its own. */
#include "active.h"
#include "frame_mirror.h"
#include "call_sites.h"

#endif
