/* SPDX-License-Identifier: MIT */
/*
 * tw-report --ranks, the sink: which rank is slow, in which steps, and because of which API
 * (ranks_analysis.c says how it decides, ranks_output.c prints it).
 *
 * What is kept is one sum per (process, API, step): the self time of the calls, held densely per
 * process and API (memory grows with ranks x APIs x steps, 8 bytes each, never with records), and
 * per (process, step) the span of its calls. Sums of integers, so a reading on -j threads merges to
 * exactly what one pass gives.
 */
#include "config.h"
#include "ranks.h"

#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "groups.h"
#include "ranks_analysis.h"
#include "ranks_output.h"
#include "ranks_tables.h"

/* ---- the tables ----------------------------------------------------------------------------------- */

/* The value of step in s, made room for (zero); NULL when out of memory or beyond MAX_STEPS. */
static uint64_t *series_at(series_t *s, int64_t step)
{
    if (s->len > 0 && step >= s->first && step < s->first + (int64_t)s->len)
        return &s->v[step - s->first];
    int64_t first = s->len == 0 || step < s->first ? step : s->first;
    int64_t end = s->len == 0 ? step + 1 : s->first + (int64_t)s->len;
    if (step + 1 > end)
        end = step + 1;
    size_t len = (size_t)(end - first);
    if (len < 2 * s->len) /* doubling: a loop's steps come one after the other */
        len = 2 * s->len;
    if (len < 16)
        len = 16;
    if (len > MAX_STEPS)
        len = (size_t)(end - first);
    if (len > MAX_STEPS)
        return NULL;
    uint64_t *v = calloc(len, sizeof *v);
    if (v == NULL)
        return NULL;
    if (s->len > 0)
        memcpy(v + (s->first - first), s->v, s->len * sizeof *v);
    free(s->v);
    s->v = v;
    s->first = first;
    s->len = len;
    return &s->v[step - first];
}

static void series_free(series_t *s)
{
    free(s->v);
    *s = (series_t){0};
}

/* The index of process pid, added if new; SIZE_MAX when out of memory. */
static size_t proc_index(ranks_t *r, int64_t pid)
{
    if (r->proc_hint < r->nprocs && r->procs[r->proc_hint].pid == pid)
        return r->proc_hint;
    for (size_t i = 0; i < r->nprocs; i++)
        if (r->procs[i].pid == pid)
            return r->proc_hint = i;
    if (r->nprocs == r->procs_capacity) {
        size_t capacity = r->procs_capacity ? 2 * r->procs_capacity : 16;
        proc_t *bigger = realloc(r->procs, capacity * sizeof *bigger);
        if (bigger == NULL)
            return SIZE_MAX;
        r->procs = bigger;
        r->procs_capacity = capacity;
    }
    r->procs[r->nprocs] = (proc_t){.pid = pid, .min_step = INT64_MAX, .max_step = -1};
    return r->proc_hint = r->nprocs++;
}

/* The index of the API name[0..len), added if new; SIZE_MAX when out of memory. */
static size_t api_index(ranks_t *r, const char *name, size_t len)
{
    uint64_t h = report_hash_bytes(name, len, 0x72616e6b73ull);
    if (r->api_capacity > 0)
        for (size_t j = h & (r->api_capacity - 1); r->api_slots[j] != 0; j = (j + 1) & (r->api_capacity - 1)) {
            const api_t *a = &r->apis[r->api_slots[j] - 1];
            if (a->hash == h && a->len == len && memcmp(a->name, name, len) == 0)
                return r->api_slots[j] - 1;
        }
    if ((r->napis + 1) * 2 > r->api_capacity) {
        size_t capacity = r->api_capacity ? r->api_capacity * 2 : 256;
        uint32_t *slots = calloc(capacity, sizeof *slots);
        if (slots == NULL)
            return SIZE_MAX;
        for (size_t i = 0; i < r->napis; i++) {
            size_t j = r->apis[i].hash & (capacity - 1);
            while (slots[j] != 0)
                j = (j + 1) & (capacity - 1);
            slots[j] = (uint32_t)i + 1;
        }
        free(r->api_slots);
        r->api_slots = slots;
        r->api_capacity = capacity;
    }
    if (r->napis == r->apis_capacity) {
        size_t capacity = r->apis_capacity ? 2 * r->apis_capacity : 256;
        api_t *bigger = realloc(r->apis, capacity * sizeof *bigger);
        if (bigger == NULL)
            return SIZE_MAX;
        r->apis = bigger;
        r->apis_capacity = capacity;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return SIZE_MAX;
    memcpy(copy, name, len);
    copy[len] = '\0';
    r->apis[r->napis] = (api_t){copy, len, h};
    size_t j = h & (r->api_capacity - 1);
    while (r->api_slots[j] != 0)
        j = (j + 1) & (r->api_capacity - 1);
    r->api_slots[j] = (uint32_t)r->napis + 1;
    return r->napis++;
}

/* Adds self time (and the span of the calls: 0 for none) of process proc, API api, step step. */
static int add(ranks_t *r, size_t proc, size_t api, int64_t step, uint64_t self_ns, uint64_t first_ns,
               uint64_t end_ns)
{
    proc_t *p = &r->procs[proc];
    if (api >= p->napis) {
        size_t n = api + 1 > 2 * p->napis ? api + 1 : 2 * p->napis;
        series_t *bigger = realloc(p->apis, n * sizeof *bigger);
        if (bigger == NULL)
            return TW_ENOMEM;
        memset(bigger + p->napis, 0, (n - p->napis) * sizeof *bigger);
        p->apis = bigger;
        p->napis = n;
    }
    uint64_t *self = series_at(&p->apis[api], step);
    uint64_t *first = first_ns != 0 ? series_at(&p->first_ns, step) : NULL;
    uint64_t *last = end_ns != 0 ? series_at(&p->end_ns, step) : NULL;
    if (self == NULL || (first_ns != 0 && first == NULL) || (end_ns != 0 && last == NULL)) {
        if (step >= MAX_STEPS) { /* no memory asked for: a step number no loop reaches */
            r->beyond++;
            return 0;
        }
        return TW_ENOMEM;
    }
    *self += self_ns;
    if (first != NULL && (*first == 0 || first_ns < *first))
        *first = first_ns;
    if (last != NULL && end_ns > *last)
        *last = end_ns;
    if (step < p->min_step)
        p->min_step = step;
    if (step > p->max_step)
        p->max_step = step;
    return 0;
}

/* ---- the sink ------------------------------------------------------------------------------------- */

static int ranks_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    (void)kept;
    ranks_t *r = (ranks_t *)sink;
    if (row->kind != TW_FILE_CALLS)
        return 0; /* GPU records carry no step */
    if (row->step < 0) {
        r->no_step++;
        return 0;
    }
    size_t proc = proc_index(r, row->pid), api = proc == SIZE_MAX ? SIZE_MAX : api_index(r, row->api.ptr, row->api.len);
    if (api == SIZE_MAX)
        return TW_ENOMEM;
    proc_t *p = &r->procs[proc];
    if (!p->ddp && memmem(row->api.ptr, row->api.len, "DistributedDataParallel", 23) != NULL)
        p->ddp = 1;
    if (!p->nodes && (row->fwd_call_id != 0 || (row->api.len == 31 && memcmp(row->api.ptr, "torch::autograd::AccumulateGrad", 31) == 0)))
        p->nodes = 1;
    return add(r, proc, api, row->step, row->self_ns, row->start_ns, row->start_ns + row->cost_ns);
}

static int ranks_merge(report_sink_t *into_sink, report_sink_t *from_sink)
{
    ranks_t *into = (ranks_t *)into_sink, *from = (ranks_t *)from_sink;
    size_t *procs = malloc((from->nprocs + 1) * sizeof *procs), *apis = malloc((from->napis + 1) * sizeof *apis);
    int rc = procs == NULL || apis == NULL ? TW_ENOMEM : 0;
    for (size_t i = 0; rc == 0 && i < from->nprocs; i++) {
        if ((procs[i] = proc_index(into, from->procs[i].pid)) == SIZE_MAX) {
            rc = TW_ENOMEM;
            break;
        }
        into->procs[procs[i]].ddp |= from->procs[i].ddp;
        into->procs[procs[i]].nodes |= from->procs[i].nodes;
    }
    for (size_t i = 0; rc == 0 && i < from->napis; i++)
        if ((apis[i] = api_index(into, from->apis[i].name, from->apis[i].len)) == SIZE_MAX)
            rc = TW_ENOMEM;
    for (size_t i = 0; rc == 0 && i < from->nprocs; i++) {
        const proc_t *p = &from->procs[i];
        for (size_t a = 0; rc == 0 && a < p->napis; a++)
            for (size_t k = 0; rc == 0 && k < p->apis[a].len; k++)
                if (p->apis[a].v[k] != 0)
                    rc = add(into, procs[i], apis[a], p->apis[a].first + (int64_t)k, p->apis[a].v[k], 0, 0);
        for (size_t k = 0; rc == 0 && k < p->first_ns.len; k++)
            if (p->first_ns.v[k] != 0)
                rc = add(into, procs[i], apis[0], p->first_ns.first + (int64_t)k, 0, p->first_ns.v[k], 0);
        for (size_t k = 0; rc == 0 && k < p->end_ns.len; k++)
            if (p->end_ns.v[k] != 0)
                rc = add(into, procs[i], apis[0], p->end_ns.first + (int64_t)k, 0, 0, p->end_ns.v[k]);
        if (rc == 0 && p->max_step >= 0) { /* steps whose calls all took 0 ns still count */
            proc_t *q = &into->procs[procs[i]];
            q->min_step = p->min_step < q->min_step ? p->min_step : q->min_step;
            q->max_step = p->max_step > q->max_step ? p->max_step : q->max_step;
        }
    }
    into->no_step += from->no_step;
    into->beyond += from->beyond;
    free(procs);
    free(apis);
    return rc;
}

static void ranks_free(report_sink_t *sink)
{
    ranks_t *r = (ranks_t *)sink;
    for (size_t i = 0; i < r->napis; i++)
        free(r->apis[i].name);
    free(r->apis);
    free(r->api_slots);
    for (size_t i = 0; i < r->nprocs; i++) {
        for (size_t a = 0; a < r->procs[i].napis; a++)
            series_free(&r->procs[i].apis[a]);
        free(r->procs[i].apis);
        series_free(&r->procs[i].first_ns);
        series_free(&r->procs[i].end_ns);
    }
    free(r->procs);
    report_ranks_result_free(r->result);
    free(r);
}

const ranks_result_t *report_ranks_result(report_sink_t *sink)
{
    ranks_t *r = (ranks_t *)sink;
    if (!r->computed) {
        r->computed = 1;
        r->result = calloc(1, sizeof *r->result);
        if (r->result != NULL && report_ranks_compute(r, r->result) != 0) {
            report_ranks_result_free(r->result);
            r->result = NULL;
        }
    }
    return r->result;
}

static int ranks_print(report_sink_t *sink, const report_pass_t *pass, FILE *out, FILE *err)
{
    if (!pass->o->ranks) /* opened for --findings' stragglers: the findings say it */
        return 0;
    const ranks_result_t *res = report_ranks_result(sink);
    if (res == NULL) {
        fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
        return TW_ENOMEM;
    }
    return report_ranks_print(res, pass->o, out, err);
}

static const report_sink_ops_t ranks_ops = {
    .name = "ranks",
    .row = ranks_row,
    .merge = ranks_merge,
    .print = ranks_print,
    .free = ranks_free,
};

int report_ranks_new(const options_t *o, const inputs_t *in, report_sink_t **sink)
{
    ranks_t *r = calloc(1, sizeof *r);
    if (r == NULL)
        return TW_ENOMEM;
    r->sink = (report_sink_t){&ranks_ops, SINK_ROWS_KEPT};
    r->o = o;
    r->in = in;
    *sink = &r->sink;
    return 0;
}

