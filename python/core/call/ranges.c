/* SPDX-License-Identifier: MIT */
/*
 * Named ranges: a record for a stretch of the program that is not a call (a trainer's hook, a
 * training step's data loading), begun and ended by name on one thread (_core.range_begin(name),
 * _core.range_end()), nested with the calls inside it like a call: the torch calls made inside are
 * its children, and its self time is what they leave. Ranges nest; an end closes the range begun
 * last on its thread, and must come where the calls open at its begin are open again (the same
 * function, as a with block does): a range ended inside a call begun after it is not recorded.
 * Called with the GIL held, from Python (not the hot path).
 */
#include "ranges.h"

#include "active.h"
#include "call_sites.h"
#include "below/memory.h"

#define RANGE_DEPTH 64 /* ranges open at once on one thread; deeper ones are not recorded */

typedef struct {
    tw_frame_t *frame; /* NULL: not recorded (idle step, paused thread, too deep in calls) */
    uint64_t start;
    uint32_t api_id;
} range_open_t;

/* The open ranges of this thread, for the session they were begun in. */
static _Thread_local struct {
    uint64_t gen;
    uint32_t depth;
    range_open_t open[RANGE_DEPTH];
} ranges;

PyObject *tw_range_begin(PyObject *core, PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "range_begin(name): name must be a str, not '%.200s'", Py_TYPE(name)->tp_name);
        return NULL;
    }
    uint64_t gen = tw_active.gen;
    if (gen == 0)
        Py_RETURN_FALSE; /* no session records: nothing to begin */
    const char *text = PyUnicode_AsUTF8(name);
    if (text == NULL)
        return NULL;
    if (ranges.gen != gen) { /* ranges left open by an earlier session are forgotten */
        ranges.gen = gen;
        ranges.depth = 0;
    }
    if (ranges.depth >= RANGE_DEPTH) {
        ranges.depth++;
        Py_RETURN_TRUE;
    }
    range_open_t *r = &ranges.open[ranges.depth++];
    r->frame = NULL;
    tw_thread_t *t = tw_recorder_attach(tw_active.recorder);
    tw_memory_attach(t);
    uint32_t api_id;
    if (t == NULL || t->paused || tw_active.idle || tw_api_intern(text, &api_id) != 0)
        Py_RETURN_TRUE;
    r->api_id = api_id;
    r->frame = tw_call_begin(t);
    if (r->frame == NULL) {
        t->depth--; /* too deep: no frame was pushed to pop */
        Py_RETURN_TRUE;
    }
    r->frame->api_id = api_id;
    if (tw_active.sites_mode != TW_SITES_OFF) {
        /* the program's line around it (the range's caller is the profiler's region(), a trainer's
         * hook, torch.compile's machinery: walked out of), else the enclosing call's */
        uint32_t site = tw_caller_site(1);
        r->frame->site = site == TW_SITE_NONE && r->frame != t->stack ? r->frame[-1].site : site;
    }
    r->start = tw_clock_ticks(tw_active.clock_source);
    Py_RETURN_TRUE;
}

PyObject *tw_range_end(PyObject *core, PyObject *unused)
{
    uint64_t end = tw_clock_ticks(tw_active.clock_source);
    uint64_t gen = tw_active.gen;
    if (gen == 0 || ranges.gen != gen || ranges.depth == 0)
        Py_RETURN_FALSE; /* begun in no session, or in another */
    if (--ranges.depth >= RANGE_DEPTH)
        Py_RETURN_TRUE;
    range_open_t *r = &ranges.open[ranges.depth];
    if (r->frame == NULL)
        Py_RETURN_TRUE;
    tw_thread_t *t = tw_recorder_attach(tw_active.recorder);
    if (t == NULL || t->depth == 0 || r->frame != &t->stack[t->depth - 1])
        Py_RETURN_FALSE; /* not where it began: calls begun inside it are still open */
    tw_call_end(t, r->frame, r->api_id, r->start, end, 0);
    Py_RETURN_TRUE;
}
