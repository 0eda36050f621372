/* SPDX-License-Identifier: MIT */
/* torchwrapper._core: the extension's definition (multi-phase init, its state: core_state.h). */
#include "core.h"

#include <stdlib.h>
#include <string.h>

#include "call/active.h"
#include "call/args.h"
#include "below/backward.h"
#include "core_state.h"
#include "below/flops.h"
#include "below/memory.h"
#include "watch/model_watch.h"
#include "patch.h"
#include "call/ranges.h"
#include "call/wrapper.h"
#include "record_reader.h"
#include "scan.h"
#include "session/session.h"
#include "wrap.h"


static PyObject *core_clock_source(PyObject *core, PyObject *unused)
{
    return PyUnicode_FromString(tw_clock_source() == TW_CLOCK_TSC ? "tsc" : "monotonic");
}

static PyObject *core_api_name(PyObject *core, PyObject *arg)
{
    unsigned long id = PyLong_AsUnsignedLong(arg);
    if (id == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    const char *name = id <= UINT32_MAX ? tw_api_name((uint32_t)id) : NULL;
    if (name == NULL) {
        PyErr_Format(PyExc_KeyError, "no API has id %lu (ids run from 0 to %u)", id, tw_api_count());
        return NULL;
    }
    return PyUnicode_FromString(name);
}

static PyObject *core_has_flops_formula(PyObject *core, PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "has_flops_formula() takes an API name (str), not '%.200s'",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    return PyBool_FromLong(tw_flops_kind_of(name) != TW_FLOPS_NONE);
}

static PyObject *core_normalize_config(PyObject *core, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"json_text", "from_strings", "defaults", NULL};
    static const char *const names[TW_CONFIG_DEFAULTS_COUNT] = {"torchwrapper", "profile", "session"};
    const char *json_in, *defaults = "torchwrapper";
    int from_strings = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|p$s:normalize_config", keywords, &json_in, &from_strings,
                                     &defaults))
        return NULL;
    int which = 0;
    while (which < TW_CONFIG_DEFAULTS_COUNT && strcmp(names[which], defaults) != 0)
        which++;
    if (which == TW_CONFIG_DEFAULTS_COUNT) {
        PyErr_Format(PyExc_ValueError, "defaults='%s': give \"torchwrapper\", \"profile\" or \"session\"", defaults);
        return NULL;
    }
    char *json_out = NULL, err[1024] = "";
    int rc = tw_config_normalize_for((tw_config_defaults_t)which, json_in, from_strings, &json_out, err, sizeof err);
    if (rc != 0) {
        PyErr_SetString(rc == TW_ENOMEM ? PyExc_MemoryError : PyExc_ValueError, err);
        return NULL;
    }
    PyObject *result = PyUnicode_FromString(json_out);
    free(json_out);
    return result;
}

/* argv for tw_report_main from a sequence of str: borrowed UTF-8 buffers, alive as long as *seq (a new
 * reference) holds the strings. NULL with an exception set. */
static char **report_argv(PyObject *arg, PyObject **seq, Py_ssize_t *n)
{
    *seq = PySequence_Fast(arg, "report() takes a list of strings, e.g. ['tw-report', 'output']");
    if (*seq == NULL)
        return NULL;
    *n = PySequence_Fast_GET_SIZE(*seq);
    char **argv = PyMem_Calloc((size_t)*n + 1, sizeof *argv);
    if (argv == NULL) {
        Py_CLEAR(*seq);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        const char *s = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(*seq, i));
        if (s == NULL) {
            PyMem_Free(argv);
            Py_CLEAR(*seq);
            return NULL;
        }
        argv[i] = (char *)s;
    }
    return argv;
}

/* report(argv): tw-report's main, writing to the process's stdout and stderr; returns its status. */
static PyObject *core_report(PyObject *core, PyObject *arg)
{
    PyObject *seq;
    Py_ssize_t n;
    char **argv = report_argv(arg, &seq, &n);
    if (argv == NULL)
        return NULL;
    int status;
    /* Pure C from here, minutes on a large run: let other threads run. */
    Py_BEGIN_ALLOW_THREADS
    status = tw_report_main((int)n, argv, stdout, stderr);
    Py_END_ALLOW_THREADS
    PyMem_Free(argv);
    Py_DECREF(seq);
    return PyLong_FromLong(status);
}

/* report_output(argv) -> (status, output, messages): the same report, its output and its messages
 * returned as text rather than written to the process's files (torchwrapper.diff reads tw-report's
 * CSV or JSON from here: one code path with the program). */
static PyObject *core_report_output(PyObject *core, PyObject *arg)
{
    PyObject *seq;
    Py_ssize_t n;
    char **argv = report_argv(arg, &seq, &n);
    if (argv == NULL)
        return NULL;
    char *out_text = NULL, *err_text = NULL;
    size_t out_len = 0, err_len = 0;
    FILE *out = open_memstream(&out_text, &out_len);
    FILE *err = out != NULL ? open_memstream(&err_text, &err_len) : NULL;
    PyObject *result = NULL;
    if (out == NULL || err == NULL) {
        if (out != NULL)
            fclose(out);
        free(out_text);
        PyErr_NoMemory();
        goto done;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = tw_report_main((int)n, argv, out, err);
    fclose(out);
    fclose(err);
    Py_END_ALLOW_THREADS
    PyObject *out_str = PyUnicode_DecodeUTF8(out_text, (Py_ssize_t)out_len, "replace");
    PyObject *err_str = out_str != NULL ? PyUnicode_DecodeUTF8(err_text, (Py_ssize_t)err_len, "replace") : NULL;
    if (err_str != NULL)
        result = Py_BuildValue("(iOO)", status, out_str, err_str);
    Py_XDECREF(out_str);
    Py_XDECREF(err_str);
    free(out_text);
    free(err_text);
done:
    PyMem_Free(argv);
    Py_DECREF(seq);
    return result;
}

/* Whether the current step's calls are recorded (the schedule's active steps, a capture's steps):
 * the model watch's streams write rows of those steps only. */
static PyObject *core_step_recorded(PyObject *core, PyObject *unused)
{
    return PyBool_FromLong(tw_active.gen != 0 && tw_active.step_recorded);
}

/* The active session's step (counted from 0), or None when no session records. */
static PyObject *core_current_step(PyObject *core, PyObject *unused)
{
    if (tw_active.gen == 0)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(tw_active.step);
}

static PyObject *core_active_session(PyObject *core, PyObject *unused)
{
    return Py_NewRef(tw_active.session ? tw_active.session : Py_None);
}

/* current_call() -> (call_id, outer_call_id, outer_site): the recorded calls in progress on this thread
 * and the outermost one's call site, or (0, 0, 0). */
static PyObject *core_current_call(PyObject *core, PyObject *unused)
{
    uint64_t call_id = 0, outer_id = 0;
    uint32_t outer_site = 0;
    tw_current_call(&call_id, &outer_id, &outer_site);
    return Py_BuildValue("(KKI)", (unsigned long long)call_id, (unsigned long long)outer_id, (unsigned int)outer_site);
}

/* backward_stray_hooks() -> how many libtorch hooks ran while no session recorded (backward.c). */
static PyObject *core_backward_stray_hooks(PyObject *core, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(tw_backward_stray_hooks());
}

/* torch_callbacks() -> how many of the libtorch layer's RecordFunction callbacks torch holds (None:
 * no layer loaded), for tests. */
static PyObject *core_torch_callbacks(PyObject *core, PyObject *unused)
{
    int held = tw_backward_torch_callbacks();
    if (held < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(held);
}

/* own_cost_text(manifests) -> str: tw-report's own-cost line from a run's manifests (JSON texts), for
 * `run`'s summary: one formatter for both. */
static PyObject *core_own_cost_text(PyObject *core, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "own_cost_text() takes a list of manifest texts");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **texts = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof *texts);
    if (texts == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "own_cost_text(): manifest %zd is a %.100s, not the manifest's JSON text",
                         i, Py_TYPE(item)->tp_name);
            goto done;
        }
        if ((texts[i] = PyUnicode_AsUTF8(item)) == NULL)
            goto done;
    }
    char line[2048];
    int len = tw_report_own_cost_text(texts, (size_t)n, line, sizeof line);
    result = PyUnicode_DecodeUTF8(line, len, "replace");
done:
    PyMem_Free(texts);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef core_methods[] = {
    {"wrap", (PyCFunction)(void (*)(void))tw_wrap, METH_FASTCALL | METH_KEYWORDS,
     "wrap(original, api_name, /, *, bind=None, kind=0)\n--\n\n"
     "A profiling wrapper around the callable `original`, recorded under `api_name`.\n"
     "bind=True makes a wrapper that binds like a function when it is a class attribute;\n"
     "None (the default) decides from the original (functions and method descriptors bind).\n"
     "kind: KIND_* flags saying what the model watch looks at around a call (0: nothing)."},
    {"wrap_many", (PyCFunction)(void (*)(void))tw_wrap_many, METH_FASTCALL,
     "wrap_many(specs, kind_mask) -> list\n--\n\n"
     "wrap(original, api_name, bind=bind, kind=kind & kind_mask) for each (original, api_name, bind,\n"
     "kind) of specs, in one call."},
    {"install", (PyCFunction)(void (*)(void))tw_install, METH_FASTCALL,
     "install(items, missing[, installed]) -> (placements, failures, stale)\n--\n\n"
     "Sets owner.attr = new for each (owner, attr, new, expected), or with installed (a list), for\n"
     "each (index, owner, attr, expected) with new = installed[index]; returns the placements\n"
     "(owner, attr, before, new) for restore(), (index, message) for each place that refused, and\n"
     "the indexes whose previous value was not `expected`."},
    {"restore", (PyCFunction)(void (*)(void))tw_restore, METH_FASTCALL,
     "restore(placements, missing) -> indexes left alone\n--\n\n"
     "Undoes install(), newest first, for (owner, attr, before, installed) placements; a place that\n"
     "no longer holds `installed` is left alone and its index returned."},
    {"normalize_config", (PyCFunction)(void (*)(void))core_normalize_config, METH_VARARGS | METH_KEYWORDS,
     "normalize_config(json_text, from_strings=False, *, defaults='torchwrapper') -> json_text\n--\n\n"
     "Validates a configuration (a JSON object) and fills in the defaults of an entry point\n"
     "('torchwrapper', 'profile' or 'session'; the table is in the C library's config_keys.c); raises\n"
     "ValueError naming the key, the value and what is accepted. from_strings accepts text for every\n"
     "value."},
    {"scan_modules", (PyCFunction)(void (*)(void))tw_scan_modules, METH_FASTCALL,
     "scan_modules(modules, roots) -> (function_places, classes, best_name)\n--\n\n"
     "Discovery's first pass (see torchwrapper._discover)."},
    {"clock_source", core_clock_source, METH_NOARGS, "The tick source: 'tsc' or 'monotonic'."},
    {"api_name", core_api_name, METH_O, "The API name interned under an id."},
    {"has_flops_formula", core_has_flops_formula, METH_O,
     "has_flops_formula(api_name) -> bool: whether calls of that API count their FLOPs (config flops)."},
    {"active_session", core_active_session, METH_NOARGS, "The Session recording now, or None."},
    {"range_begin", tw_range_begin, METH_O,
     "range_begin(name) -> recording\n--\n\nBegins a named range on this thread: a record of its own, the calls\n"
     "made until range_end() nested in it. False when no session records."},
    {"range_end", tw_range_end, METH_NOARGS,
     "range_end() -> recorded\n--\n\nEnds the range begun last on this thread (in the same function)."},
    {"current_step", core_current_step, METH_NOARGS,
     "The active session's step, counted from 0 (the schedule's), or None when none records."},
    {"step_recorded", core_step_recorded, METH_NOARGS,
     "Whether the active session records the current step's calls (schedule, capture)."},
    {"current_call", core_current_call, METH_NOARGS,
     "current_call() -> (call_id, outer_call_id, outer_site)\n--\n\nThe innermost and outermost recorded calls "
     "in progress on this thread and the outermost one's call site, or (0, 0, 0)."},
    {"backward_stray_hooks", core_backward_stray_hooks, METH_NOARGS,
     "backward_stray_hooks() -> count\n--\n\nlibtorch hooks that ran while no session recorded backward nodes."},
    {"torch_callbacks", core_torch_callbacks, METH_NOARGS,
     "torch_callbacks() -> int or None\n--\n\nHow many of the libtorch layer's RecordFunction callbacks torch "
     "holds now (None: the layer is not loaded)."},
    {"report", core_report, METH_O,
     "report(argv) -> status: runs tw-report (argv[0] is the program name) on the process's stdout/stderr."},
    {"own_cost_text", core_own_cost_text, METH_O,
     "own_cost_text(manifests) -> str\n--\n\n"
     "The line \"torchwrapper's own cost: ...\" that tw-report prints, from a run's manifests (JSON texts);\n"
     "\"\" when none says it."},
    {"report_output", core_report_output, METH_O,
     "report_output(argv) -> (status, output, messages): runs tw-report (argv[0] is the program name) and\n"
     "returns what it wrote to stdout and to stderr."},
    {NULL, NULL, 0, NULL},
};

static int core_exec(PyObject *core)
{
    tw_core_state *state = PyModule_GetState(core);
    if (tw_wrapper_add_types(core, state) < 0 || tw_session_add_type(core, &state->session_type) < 0 || tw_args_init(tw_wrapper_vectorcall) < 0 ||
        tw_model_watch_add_functions(core) < 0 || tw_memory_add_functions(core) < 0 ||
        tw_reader_add_functions(core, state) < 0)
        return -1;
    /* tensor_stats' built-in metrics, as the validator knows them (config_keys.c: the one list) */
    if (PyModule_AddStringConstant(core, "TENSOR_STATS_METRICS", tw_config_tensor_stats_metrics()) < 0)
        return -1;
    if (PyModule_AddStringConstant(core, "version", tw_version()) < 0)
        return -1;
    if (PyModule_AddIntConstant(core, "MAX_DEPTH", TW_MAX_DEPTH) < 0)
        return -1;
    return 0;
}

static int core_traverse(PyObject *core, visitproc visit, void *arg)
{
    tw_core_state *state = PyModule_GetState(core);
    Py_VISIT(state->wrapper_type);
    Py_VISIT(state->method_wrapper_type);
    Py_VISIT(state->session_type);
    Py_VISIT(state->record_reader_type);
    return 0;
}

static int core_clear(PyObject *core)
{
    tw_core_state *state = PyModule_GetState(core);
    Py_CLEAR(state->wrapper_type);
    Py_CLEAR(state->method_wrapper_type);
    Py_CLEAR(state->session_type);
    Py_CLEAR(state->record_reader_type);
    return 0;
}

static void core_free(void *core)
{
    core_clear((PyObject *)core);
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
    {0, NULL},
};

static struct PyModuleDef core_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "torchwrapper._core",
    .m_doc = "C core of torchwrapper: the profiling wrapper type and recording sessions.",
    .m_size = sizeof(tw_core_state),
    .m_methods = core_methods,
    .m_slots = core_slots,
    .m_traverse = core_traverse,
    .m_clear = core_clear,
    .m_free = core_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&core_def);
}
