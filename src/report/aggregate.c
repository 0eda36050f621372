/* SPDX-License-Identifier: MIT */
/*
 * tw-report's aggregate: the sink of the table. Per-group totals of the kept rows in a group table
 * (groups.c), grouped by --by; --by parent's children waiting for their parent's row; --by site's
 * groups named after their site and the APIs called there. table.c prints them.
 */
#include "config.h"
#include "aggregate.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"
#include "torchwrapper/reader.h"
#include "torchwrapper/stats.h"
#include "../stats_internal.h"

#include "flame.h"
#include "own_cost_report.h"
#include "table.h"

#define SITE_APIS_SHOWN 4 /* APIs listed per site in --by site; more are counted as "+N more" */

/*
 * --by parent: a call's row is written when it returns, after the rows of the calls inside it, so
 * a child waits in the pass's index (index.h), keyed by (pid, parent call id), until its parent's
 * row names the parent's API. Memory is what the calls still open at that point of the files have
 * below them.
 */
typedef struct pending_child {
    group_t *api;   /* the child's own API (a group of the api table: its interned name) */
    uint64_t cost_ns, self_ns;
    int error;
} pending_child_t;

typedef struct aggregate {
    report_sink_t sink;
    const options_t *o;
    const report_sites_t *sites;  /* --by site */
    const report_sink_t *trace;   /* for the footer's count of its calls; NULL: no --trace */
    int have_gpu_files;
    /* With GPU files, the GPU time each call launched (groups.h), for the groups its GPU records
     * cannot name (every --by but api's own time, pid and parent); gpu_of is where calls look it up:
     * this table, or with -j the first thread's, which then holds every thread's (aggregate_gpu_read). */
    int join_gpu;
    call_gpu_table_t call_gpu;
    const call_gpu_table_t *gpu_of;
    group_table_t groups;
    group_table_t api_names; /* --by parent: the child's API, interned */
    report_index_t *index;   /* the pass's: --by parent's children wait there for their parent
                              * (REPORT_WAIT_PARENT_CHILDREN; ptr: an array of pending_child_t, a:
                              * how many, b: its capacity) */
    /* --by module, for records whose model's path is "" (the C API's TW_MODULE_ROOT, files written
     * before every model was named by its class): the model's label (its forward's API, see
     * report_module_label: the least such name seen) and what the backward nodes charged to it, or
     * to any module in it, add to it; added to its group once the rows are all in (settle). A model
     * named by its class needs none of this: its path is the first part of its modules'. */
    char root_label[256];
    uint64_t root_bwd_flops, root_bwd_mem, root_node_bwd_ns, root_node_bwd_gpu_ns;
} aggregate_t;

/* ---- --by parent's children waiting for their parent --------------------------------------------- */

/* Adds child to those waiting for (pid, parent_id); 0, or TW_ENOMEM (out of memory, or the index's
 * bound: the child is not counted). */
static int pending_add(aggregate_t *a, int64_t pid, uint64_t parent_id, const pending_child_t *child)
{
    report_wait_t *p = report_index_waiting(a->index, pid, parent_id, REPORT_WAIT_PARENT_CHILDREN);
    if (p == NULL && (p = report_index_wait(a->index, pid, parent_id, REPORT_WAIT_PARENT_CHILDREN)) == NULL)
        return TW_ENOMEM;
    if (p->a == p->b) {
        size_t capacity = p->b ? p->b * 2 : 8;
        pending_child_t *children = realloc(p->ptr, capacity * sizeof *children);
        if (children == NULL)
            return TW_ENOMEM;
        p->ptr = children;
        p->b = capacity;
    }
    ((pending_child_t *)p->ptr)[p->a++] = *child;
    return 0;
}

/* ---- --by site ---------------------------------------------------------------------------------- */

/* The row's group key ("(no site)" for calls torch's own code made). */
static int site_key(const aggregate_t *a, const tw_row_t *row, char *key, size_t size)
{
    if (row->site == 0)
        return snprintf(key, size, "(no site: called by torch)");
    const char *text = report_site_text(a->sites, row->pid, row->site);
    if (text != NULL)
        return snprintf(key, size, "%s", text);
    return snprintf(key, size, "(site %" PRIu64 " of pid %" PRId64 ": not in a sites file, or past the cap)",
                    row->site, row->pid);
}

/* Notes api among the APIs called at group g's site (the first SITE_APIS_SHOWN, then a count). */
static void site_note_api(group_t *g, const char *api, size_t api_len)
{
    char *list = g->detail;
    size_t len = list != NULL ? strlen(list) : 0;
    for (const char *p = list; p != NULL && *p;) { /* ", "-separated */
        const char *end = strstr(p, ", ");
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == api_len && memcmp(p, api, api_len) == 0)
            return;
        p = end != NULL ? end + 2 : p + n;
    }
    if (g->detail_count++ >= SITE_APIS_SHOWN)
        return;
    char *bigger = realloc(list, len + api_len + 3);
    if (bigger == NULL)
        return;
    sprintf(bigger + len, "%s%.*s", len ? ", " : "", (int)api_len, api);
    g->detail = bigger;
}

/* After the pass: each site's key gets the APIs called there ("train.py:42 step: torch.relu, ..."). */
static void site_keys_finish(aggregate_t *a)
{
    for (size_t i = 0; i < a->groups.capacity; i++) {
        group_t *g = a->groups.slots[i];
        if (g == NULL || g->detail == NULL)
            continue;
        char more[48] = "";
        if (g->detail_count > SITE_APIS_SHOWN)
            snprintf(more, sizeof more, ", +%zu more", g->detail_count - SITE_APIS_SHOWN);
        size_t n = g->key_len + strlen(g->detail) + strlen(more) + 4;
        char *key = malloc(n);
        if (key == NULL)
            continue;
        g->key_len = (size_t)snprintf(key, n, "%s: %s%s", g->key, g->detail, more);
        free(g->key);
        g->key = key; /* the table is not probed again: only printed */
    }
}

/* ---- the sink ----------------------------------------------------------------------------------- */

static group_t *group_for(aggregate_t *a, const char *fmt, ...)
{
    char key[1200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    return report_group_get(&a->groups, key, (size_t)n < sizeof key ? (size_t)n : sizeof key - 1);
}

/* 0, or TW_ENOMEM when g is NULL (no memory for it) or its histogram could not grow. */
static int count_in(group_t *g, uint64_t cost, uint64_t self, uint64_t gpu, int error, uint64_t flops)
{
    if (g == NULL || tw_api_stats_add(&g->stats, cost, self, gpu, error) != 0)
        return TW_ENOMEM;
    g->flops += flops;
    return 0;
}

/* count_in() for a record, with the memory it carries (config memory). Its bytes count the calls
 * inside it: a group of whole call trees (--by thread, pid, step) takes them from the outermost
 * calls only, as nested ones would count twice; the peak is the highest of every record's. */
static int count_row(group_t *g, const tw_row_t *row, uint64_t gpu, uint64_t flops, int whole_trees)
{
    if (count_in(g, row->cost_ns, row->self_ns, gpu, row->error, flops) != 0)
        return TW_ENOMEM;
    if (row->fwd_call_id != 0)
        g->node_flops += flops;
    if (!whole_trees || row->parent_id == 0) {
        g->mem_alloc += row->mem_alloc;
        g->mem_self += row->mem_self;
        g->mem_freed += row->mem_freed;
    }
    if (row->mem_peak > g->mem_peak)
        g->mem_peak = row->mem_peak;
    return 0;
}

/* The GPU time call row launched itself: from the GPU files (read first), else its gpu_ns (a file
 * written from records in memory, torchwrapper's load(), carries it there). */
static uint64_t own_gpu(const aggregate_t *a, const tw_row_t *row)
{
    return a->have_gpu_files ? report_call_gpu_of(a->gpu_of, row->pid, row->call_id) : row->gpu_ns;
}

/* An autograd node's cost charged to g, the group of its forward call (NULL: out of memory). */
static int charge_node(group_t *g, const tw_row_t *row, uint64_t gpu)
{
    if (g == NULL)
        return TW_ENOMEM;
    g->bwd_ns += row->cost_ns;
    g->bwd_gpu_ns += gpu;
    g->bwd_flops += row->flops;
    g->bwd_mem += row->mem_alloc;
    return 0;
}

/*
 * --by module's GPU time of a call and the calls inside it, as its cost counts theirs: its own plus
 * what its children left waiting for it (they end first, so their rows come first), which it leaves
 * in turn for its parent. Only calls with some GPU work below them wait: at most the calls still
 * open, never the run's length. 0 in *gpu, or TW_ENOMEM (the index's bound: not counted).
 */
static int inclusive_gpu(aggregate_t *a, const tw_row_t *row, uint64_t *gpu)
{
    int rc = 0;
    *gpu = own_gpu(a, row);
    report_wait_t *w = report_index_waiting(a->index, row->pid, row->call_id, REPORT_WAIT_MODULE_GPU);
    if (w != NULL) {
        *gpu += w->a;
        report_index_remove(a->index, w);
    }
    if (*gpu != 0 && row->parent_id != 0) {
        w = report_index_waiting(a->index, row->pid, row->parent_id, REPORT_WAIT_MODULE_GPU);
        if (w == NULL)
            w = report_index_wait(a->index, row->pid, row->parent_id, REPORT_WAIT_MODULE_GPU);
        if (w != NULL)
            w->a += *gpu;
        else
            rc = TW_ENOMEM;
    }
    return rc;
}

/*
 * --by module: a module's forward calls count in its group (their flops_total, bytes and GPU time:
 * those of the calls inside, the modules inside included), and each backward node charged to a
 * module adds its time and GPU time to that module's bwd, and its FLOPs and bytes to that module's
 * and to every module around it (the path's prefixes: GPT2LMHeadModel.transformer.h.0 counts for
 * GPT2LMHeadModel.transformer and for the model, GPT2LMHeadModel), so that forward and backward
 * count the same calls.
 */
static int module_row(aggregate_t *a, const tw_row_t *row)
{
    const char *label;
    size_t len = report_module_label(row, &label);
    uint64_t gpu;
    int rc = inclusive_gpu(a, row, &gpu);
    if (row->fwd_call_id == 0) {
        if (len == 0) /* not a module's forward */
            return rc;
        if (row->module.len == 0 && row->has_module == 1) { /* a model whose path is "" */
            char name[sizeof a->root_label];
            snprintf(name, sizeof name, "%.*s", (int)len, label);
            if (a->root_label[0] == '\0' || strcmp(name, a->root_label) < 0)
                memcpy(a->root_label, name, sizeof name);
        }
        if (count_row(report_group_get(&a->groups, label, len), row, gpu, row->flops_total, 0) != 0)
            rc = TW_ENOMEM;
        return rc;
    }
    if (row->has_module != 1)
        return rc;
    uint64_t node_gpu = own_gpu(a, row);
    a->root_bwd_flops += row->flops; /* counted only where a model's path is "" (settle) */
    a->root_bwd_mem += row->mem_alloc;
    if (row->module.len == 0) { /* that model's own */
        a->root_node_bwd_ns += row->cost_ns;
        a->root_node_bwd_gpu_ns += node_gpu;
        return rc;
    }
    for (size_t end = 0; end < row->module.len; end++) {
        if (end + 1 != row->module.len && row->module.ptr[end + 1] != '.')
            continue;
        group_t *g = report_group_get(&a->groups, row->module.ptr, end + 1);
        if (g == NULL)
            return TW_ENOMEM;
        g->bwd_flops += row->flops;
        g->bwd_mem += row->mem_alloc;
        if (end + 1 == row->module.len) {
            g->bwd_ns += row->cost_ns;
            g->bwd_gpu_ns += node_gpu;
        }
    }
    return rc;
}

static int aggregate_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    aggregate_t *a = (aggregate_t *)sink;
    const char *api = row->api.ptr;
    int api_len = (int)(row->api.len < 1000 ? row->api.len : 1000);
    group_by_t by = a->o->by;
    if (row->kind == TW_FILE_GPU) {
        /* GPU time goes to the groups a GPU record can name without a join: its API and its process. */
        group_t *g = NULL;
        if (by == BY_API && api_len == 0)
            g = group_for(a, "(not attributed)");
        else if (by == BY_API)
            g = group_for(a, "%.*s", api_len, api);
        else if (by == BY_PID)
            g = group_for(a, "%" PRId64, row->pid);
        if (g != NULL)
            g->stats.gpu_ns += row->cost_ns;
        if (a->join_gpu && report_call_gpu_add(&a->call_gpu, row->pid, row->call_id, row->cost_ns) != 0)
            return TW_ENOMEM;
        return 0;
    }
    /* A call's own GPU time; for --by api, pid and parent only from its gpu_ns column, when no GPU
     * files give the same time (their records counted it above). */
    uint64_t gpu = by == BY_API || by == BY_PID || by == BY_PARENT ? (a->have_gpu_files ? 0 : row->gpu_ns)
                                                                   : own_gpu(a, row);
    char key[48], *k = key;
    int rc = 0;
    switch (by) {
    case BY_API:
        rc = count_row(report_group_get(&a->groups, api, (size_t)api_len), row, gpu, row->flops, 0);
        if (row->fwd_call_id != 0 && row->fwd_api.len > 0 && /* an autograd node: its cost is its forward API's bwd */
            charge_node(report_group_get(&a->groups, row->fwd_api.ptr, row->fwd_api.len < 1000 ? row->fwd_api.len : 1000),
                        row, own_gpu(a, row)) != 0)
            rc = TW_ENOMEM;
        break;
    case BY_THREAD:
        k = tw_format_i64(k, row->pid);
        *k++ = '/';
        /* fall through */
    case BY_PID:
        if (by == BY_THREAD)
            k = tw_format_u64(k, row->tid);
        else
            k = tw_format_i64(k, row->pid);
        rc = count_row(report_group_get(&a->groups, key, (size_t)(k - key)), row, gpu, row->flops, 1);
        break;
    case BY_STEP: {
        group_t *g;
        if (row->step < 0) {
            g = group_for(a, "(no step)");
        } else {
            k = tw_format_i64(k, row->step);
            g = report_group_get(&a->groups, key, (size_t)(k - key));
        }
        rc = count_row(g, row, gpu, row->flops, 1);
        if (g != NULL && report_row_is_node(row))
            g->nodes++;
        break;
    }
    case BY_SHAPE: {
        /* "torch.mm [[4, 8], [8, 16]]"; the API alone for a call recorded without a summary (args
         * "none", an autograd node) */
        char shape[1024 + 2 * TW_ARGS_MAX + 2];
        size_t n = (size_t)api_len;
        memcpy(shape, api, n);
        int len = row->args.len <= TW_ARGS_MAX
                      ? tw_args_shapes(row->args.ptr, row->args.len, shape + n + 1, sizeof shape - n - 1)
                      : 0; /* no summary is longer */
        if (len > 0) {
            shape[n] = ' ';
            n += 1 + (size_t)len;
        }
        rc = count_row(report_group_get(&a->groups, shape, n), row, gpu, row->flops, 0);
        break;
    }
    case BY_SITE: {
        char site[1200];
        int n = site_key(a, row, site, sizeof site);
        group_t *g = report_group_get(&a->groups, site, n < (int)sizeof site ? (size_t)n : sizeof site - 1);
        if (row->fwd_call_id != 0) { /* an autograd node charged to the site of its forward call: its bwd */
            rc = charge_node(g, row, gpu);
            break;
        }
        rc = count_row(g, row, gpu, row->flops, 0);
        if (g != NULL)
            site_note_api(g, api, (size_t)api_len);
        break;
    }
    case BY_MODULE:
        rc = module_row(a, row);
        break;
    case BY_PARENT: {
        group_t *self_api = report_group_get(&a->api_names, api, (size_t)api_len);
        if (self_api == NULL)
            return TW_ENOMEM;
        report_wait_t *p = report_index_waiting(a->index, row->pid, row->call_id, REPORT_WAIT_PARENT_CHILDREN);
        if (p != NULL) {
            const pending_child_t *children = p->ptr;
            for (size_t i = 0; i < p->a; i++)
                if (count_in(group_for(a, "%s > %s", self_api->key, children[i].api->key), children[i].cost_ns,
                             children[i].self_ns, 0, children[i].error, 0) != 0)
                    rc = TW_ENOMEM;
            free(p->ptr);
            report_index_remove(a->index, p);
        }
        if (row->parent_id == 0) {
            if (count_row(group_for(a, "%s", self_api->key), row, gpu, row->flops, 0) != 0)
                rc = TW_ENOMEM;
        } else {
            pending_child_t child = {self_api, row->cost_ns, row->self_ns, row->error};
            if (pending_add(a, row->pid, row->parent_id, &child) != 0)
                rc = TW_ENOMEM;
        }
        break;
    }
    }
    return rc;
}

/* --by parent: children whose parent never came (its process was killed before the parent
 * returned); --by site: the keys get their APIs. */
static int aggregate_settle(report_sink_t *sink)
{
    aggregate_t *a = (aggregate_t *)sink;
    int rc = 0;
    size_t at = 0;
    for (report_wait_t *p; (p = report_index_next(a->index, REPORT_WAIT_PARENT_CHILDREN, &at)) != NULL;) {
        const pending_child_t *children = p->ptr;
        for (size_t k = 0; k < p->a; k++)
            if (count_in(group_for(a, "(not recorded) > %s", children[k].api->key), children[k].cost_ns,
                         children[k].self_ns, 0, children[k].error, 0) != 0)
                rc = TW_ENOMEM;
        free(p->ptr);
        report_index_remove(a->index, p);
    }
    at = 0; /* GPU time of calls whose parent never came */
    for (report_wait_t *p; (p = report_index_next(a->index, REPORT_WAIT_MODULE_GPU, &at)) != NULL;)
        report_index_remove(a->index, p);
    if (a->o->by == BY_SITE)
        site_keys_finish(a);
    if (a->o->by == BY_MODULE && a->root_label[0] != '\0') {
        group_t *root = report_group_get(&a->groups, a->root_label, strlen(a->root_label));
        if (root == NULL)
            return TW_ENOMEM;
        root->bwd_ns += a->root_node_bwd_ns;
        root->bwd_gpu_ns += a->root_node_bwd_gpu_ns;
        root->bwd_flops += a->root_bwd_flops;
        root->bwd_mem += a->root_bwd_mem;
        a->root_node_bwd_ns = a->root_node_bwd_gpu_ns = a->root_bwd_flops = a->root_bwd_mem = 0;
    }
    return rc;
}

/* Adds from's groups to into's: sums, counts, min, max and the histograms the percentiles are read
 * from, so the table is the one a single pass over both sets of rows prints (table.c sorts groups
 * by value, then key: no order of arrival shows). Not for --by parent (a child waits for its parent,
 * which may be in another part of the files) nor --by site (the APIs named per site are the first
 * ones seen): their ops have no merge. 0, or TW_ENOMEM (some calls not counted). */
static int aggregate_merge(report_sink_t *into_sink, report_sink_t *from_sink)
{
    aggregate_t *into = (aggregate_t *)into_sink;
    const aggregate_t *from = (const aggregate_t *)from_sink;
    int rc = 0;
    for (size_t i = 0; i < from->groups.capacity; i++) {
        const group_t *f = from->groups.slots[i];
        if (f == NULL)
            continue;
        group_t *g = report_group_get(&into->groups, f->key, f->key_len);
        if (g == NULL || tw_api_stats_merge(&g->stats, &f->stats) != 0) {
            rc = TW_ENOMEM;
            continue;
        }
        g->bwd_ns += f->bwd_ns;
        g->bwd_gpu_ns += f->bwd_gpu_ns;
        g->flops += f->flops;
        g->bwd_flops += f->bwd_flops;
        g->node_flops += f->node_flops;
        g->nodes += f->nodes;
        g->mem_alloc += f->mem_alloc;
        g->mem_self += f->mem_self;
        g->mem_freed += f->mem_freed;
        g->bwd_mem += f->bwd_mem;
        if (f->mem_peak > g->mem_peak)
            g->mem_peak = f->mem_peak;
    }
    if (from->root_label[0] != '\0' && (into->root_label[0] == '\0' || strcmp(from->root_label, into->root_label) < 0))
        memcpy(into->root_label, from->root_label, sizeof into->root_label); /* the least: as one pass */
    into->root_node_bwd_ns += from->root_node_bwd_ns;
    into->root_node_bwd_gpu_ns += from->root_node_bwd_gpu_ns;
    into->root_bwd_flops += from->root_bwd_flops;
    into->root_bwd_mem += from->root_bwd_mem;
    return rc;
}

/* -j: the threads' GPU time per call, gathered into the first thread's table for every thread's
 * call rows to look up, as the one pass's call rows find it all (the GPU files come first). The
 * driver's sink is left as it is: if the threads' reading fails, it reads everything itself. 0, or
 * TW_ENOMEM. */
static int aggregate_gpu_read(report_sink_t *sink, report_sink_t *const *threads, size_t count)
{
    (void)sink;
    aggregate_t *first = (aggregate_t *)threads[0];
    int rc = 0;
    for (size_t i = 1; i < count; i++) {
        aggregate_t *t = (aggregate_t *)threads[i];
        if (report_call_gpu_merge(&first->call_gpu, &t->call_gpu) != 0)
            rc = TW_ENOMEM;
        report_call_gpu_free(&t->call_gpu);
        t->gpu_of = &first->call_gpu;
    }
    return rc;
}

static int aggregate_print(report_sink_t *sink, const report_pass_t *pass, FILE *out, FILE *err)
{
    aggregate_t *a = (aggregate_t *)sink;
    if (a->o->ranks)
        return 0; /* kept for --html's page only: --ranks prints instead */
    return report_print_table(out, err, &a->groups, pass, a->trace);
}

static void aggregate_free(report_sink_t *sink)
{
    aggregate_t *a = (aggregate_t *)sink;
    report_group_table_free(&a->groups);
    report_group_table_free(&a->api_names);
    report_call_gpu_free(&a->call_gpu);
    size_t at = 0; /* children still waiting (the report stopped before settle) */
    for (report_wait_t *p; (p = report_index_next(a->index, REPORT_WAIT_PARENT_CHILDREN, &at)) != NULL;) {
        free(p->ptr);
        report_index_remove(a->index, p);
    }
    at = 0;
    for (report_wait_t *p; (p = report_index_next(a->index, REPORT_WAIT_MODULE_GPU, &at)) != NULL;)
        report_index_remove(a->index, p);
    free(a);
}

static const report_sink_ops_t aggregate_ops = {
    .name = "aggregate",
    .row = aggregate_row,
    .settle = aggregate_settle,
    .merge = aggregate_merge,
    .gpu_read = aggregate_gpu_read,
    .print = aggregate_print,
    .free = aggregate_free,
};

/* --by parent and --by site, and --by module (a call's GPU time waits for its parent's row, which
 * another thread may read): read in file order, on one thread (see aggregate_merge). */
static const report_sink_ops_t aggregate_ordered_ops = {
    .name = "aggregate",
    .row = aggregate_row,
    .settle = aggregate_settle,
    .print = aggregate_print,
    .free = aggregate_free,
};

int report_aggregate_new(const options_t *o, const report_sites_t *sites, report_index_t *index, int have_gpu_files,
                         const report_sink_t *trace, report_sink_t **sink)
{
    aggregate_t *a = calloc(1, sizeof *a);
    if (a == NULL)
        return TW_ENOMEM;
    int ordered = o->by == BY_PARENT || o->by == BY_SITE || o->by == BY_MODULE;
    a->sink = (report_sink_t){ordered ? &aggregate_ordered_ops : &aggregate_ops, SINK_ROWS_KEPT};
    a->o = o;
    a->sites = sites;
    a->trace = trace;
    a->index = index;
    a->have_gpu_files = have_gpu_files;
    /* The table holds an entry a launching call (it grows with the run): only where a group needs it.
     * --by api's own GPU time comes from the GPU records' API, and the table's text has no column
     * for the nodes' (bwd_gpu_ns, in CSV and JSON): the default report stays flat on GPU runs. */
    a->join_gpu = have_gpu_files && o->by != BY_PID && o->by != BY_PARENT &&
                  (o->by != BY_API || o->format == OUT_CSV || o->format == OUT_JSON);
    a->gpu_of = &a->call_gpu;
    *sink = &a->sink;
    return 0;
}

const group_table_t *report_aggregate_groups(const report_sink_t *sink)
{
    return &((const aggregate_t *)sink)->groups;
}
