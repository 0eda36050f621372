/* SPDX-License-Identifier: MIT */
/*
 * tw-report, the pass over the rows: filters (--api, --pid, --tid, --window), per-group totals in
 * small hash maps, and --by parent's children waiting for their parent's row.
 */
#include "config.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

uint64_t report_hash_bytes(const char *s, size_t len, uint64_t seed)
{
    /* Eight bytes a step, multiply-xorshift mixing: API names are 10-60 bytes. */
    uint64_t h = seed ^ (len * 0x9E3779B97F4A7C15ull);
    for (; len >= 8; s += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    memcpy(&w, s, len);
    h = (h ^ w) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

static int table_grow(group_table_t *t)
{
    size_t capacity = t->capacity ? t->capacity * 2 : 256;
    group_t **slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return TW_ENOMEM;
    for (size_t i = 0; i < t->capacity; i++) {
        group_t *g = t->slots[i];
        if (g == NULL)
            continue;
        size_t j = g->hash & (capacity - 1);
        while (slots[j] != NULL)
            j = (j + 1) & (capacity - 1);
        slots[j] = g;
    }
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

/* The group with this key, created if missing; NULL without memory. */
static group_t *table_get(group_table_t *t, const char *key, size_t len)
{
    if ((t->count + 1) * 2 > t->capacity && table_grow(t) != 0)
        return NULL;
    uint64_t h = report_hash_bytes(key, len, 0);
    size_t j = h & (t->capacity - 1);
    for (group_t *g; (g = t->slots[j]) != NULL; j = (j + 1) & (t->capacity - 1))
        if (g->hash == h && g->key_len == len && memcmp(g->key, key, len) == 0)
            return g;
    group_t *g = calloc(1, sizeof *g);
    char *copy = malloc(len + 1);
    if (g == NULL || copy == NULL) {
        free(g);
        free(copy);
        return NULL;
    }
    memcpy(copy, key, len);
    copy[len] = '\0';
    *g = (group_t){.key = copy, .key_len = len, .hash = h};
    t->slots[j] = g;
    t->count++;
    return g;
}

static void table_free(group_table_t *t)
{
    for (size_t i = 0; i < t->capacity; i++) {
        if (t->slots[i] != NULL) {
            free(t->slots[i]->key);
            free(t->slots[i]->detail);
            free(t->slots[i]->stats.histogram);
            free(t->slots[i]);
        }
    }
    free(t->slots);
    memset(t, 0, sizeof *t);
}

/* For --html's own tables (html.c). */
group_t *report_group_get(group_table_t *t, const char *key, size_t len)
{
    return table_get(t, key, len);
}

void report_group_table_free(group_table_t *t)
{
    table_free(t);
}

/* The hash of a (process, call id) pair: call ids are unique per process only. */
uint64_t report_pid_id_hash(int64_t pid, uint64_t id)
{
    uint64_t h = id * 0x9E3779B97F4A7C15ull ^ (uint64_t)pid * 0xC2B2AE3D27D4EB4Full;
    return h ^ (h >> 31);
}

static size_t pending_slot(const pending_table_t *t, int64_t pid, uint64_t parent_id)
{
    size_t j = report_pid_id_hash(pid, parent_id) & (t->capacity - 1);
    while (t->slots[j].parent_id != 0 && !(t->slots[j].parent_id == parent_id && t->slots[j].pid == pid))
        j = (j + 1) & (t->capacity - 1);
    return j;
}

static pending_t *pending_find(pending_table_t *t, int64_t pid, uint64_t parent_id)
{
    if (t->capacity == 0)
        return NULL;
    pending_t *p = &t->slots[pending_slot(t, pid, parent_id)];
    return p->parent_id ? p : NULL;
}

/* Removes p, keeping the linear probe chains intact (backward shift). */
static void pending_remove(pending_table_t *t, pending_t *p)
{
    free(p->children);
    size_t i = (size_t)(p - t->slots);
    t->slots[i] = (pending_t){0};
    t->count--;
    for (size_t j = (i + 1) & (t->capacity - 1); t->slots[j].parent_id != 0; j = (j + 1) & (t->capacity - 1)) {
        pending_t moved = t->slots[j];
        t->slots[j] = (pending_t){0};
        t->slots[pending_slot(t, moved.pid, moved.parent_id)] = moved;
    }
}

static int pending_add(pending_table_t *t, int64_t pid, uint64_t parent_id, const pending_child_t *child)
{
    if ((t->count + 1) * 2 > t->capacity) {
        size_t capacity = t->capacity ? t->capacity * 2 : 1024;
        pending_t *old = t->slots;
        size_t old_capacity = t->capacity;
        if ((t->slots = calloc(capacity, sizeof *t->slots)) == NULL) {
            t->slots = old;
            return TW_ENOMEM;
        }
        t->capacity = capacity;
        for (size_t i = 0; i < old_capacity; i++)
            if (old[i].parent_id != 0)
                t->slots[pending_slot(t, old[i].pid, old[i].parent_id)] = old[i];
        free(old);
    }
    pending_t *p = &t->slots[pending_slot(t, pid, parent_id)];
    if (p->parent_id == 0) {
        *p = (pending_t){.pid = pid, .parent_id = parent_id};
        t->count++;
    }
    if (p->count == p->capacity) {
        size_t capacity = p->capacity ? p->capacity * 2 : 8;
        pending_child_t *children = realloc(p->children, capacity * sizeof *children);
        if (children == NULL)
            return TW_ENOMEM;
        p->children = children;
        p->capacity = capacity;
    }
    p->children[p->count++] = *child;
    return 0;
}


/* ---- the pass over the rows ------------------------------------------------------------------ */

static int keep_row(report_t *r, const tw_row_t *row)
{
    const options_t *o = r->o;
    if (o->npids) {
        size_t i = 0;
        while (i < o->npids && o->pids[i] != row->pid)
            i++;
        if (i == o->npids)
            return 0;
    }
    if (o->ntids && row->kind == TW_FILE_CALLS) {
        size_t i = 0;
        while (i < o->ntids && o->tids[i] != row->tid)
            i++;
        if (i == o->ntids)
            return 0;
    }
    if (o->has_window && ((int64_t)row->start_ns < r->window_from_ns || (int64_t)row->start_ns > r->window_to_ns))
        return 0;
    /* GPU records and files older than the step column carry no step (-1): left out. */
    if (o->has_steps && (row->step < 0 || row->step < o->steps_from || (o->steps_to >= 0 && row->step > o->steps_to)))
        return 0;
    if (o->napis) {
        char api[1024];
        size_t len = row->api.len < sizeof api - 1 ? row->api.len : sizeof api - 1;
        memcpy(api, row->api.ptr, len);
        api[len] = '\0';
        size_t i = 0;
        while (i < o->napis && fnmatch(o->apis[i], api, 0) != 0)
            i++;
        if (i == o->napis)
            return 0;
    }
    return 1;
}

static group_t *group_for(report_t *r, const char *fmt, ...)
{
    char key[1200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    return table_get(&r->groups, key, (size_t)n < sizeof key ? (size_t)n : sizeof key - 1);
}

static void count_in(report_t *r, group_t *g, uint64_t cost, uint64_t self, uint64_t gpu, int error)
{
    if (g == NULL || tw_api_stats_add(&g->stats, cost, self, gpu, error) != 0)
        r->oom = 1;
}

int report_on_row(void *ctx, const tw_row_t *row)
{
    report_t *r = ctx;
    if (r->gpu_pass != (row->kind == TW_FILE_GPU))
        return 0;
    if ((int64_t)row->start_ns < r->min_start_ns && row->start_ns != 0)
        r->min_start_ns = (int64_t)row->start_ns;
    if (r->prepass)
        return 0;
    if (r->o->tree_step >= 0) {
        if (keep_row(r, row))
            report_tree_row(r, row);
        return 0;
    }
    int keep = keep_row(r, row);
    /* --folded, --flamegraph, --html: a call left out still carries its children's stacks to its
     * caller's, with no time of its own. */
    if (r->flame != NULL && row->kind == TW_FILE_CALLS)
        report_flame_row(r->flame, row, keep);
    if (!keep) {
        r->filtered++;
        return 0;
    }
    r->kept++;
    if (r->html_data != NULL)
        report_html_row(r->html_data, row);
    if (r->trace != NULL) {
        if (row->kind == TW_FILE_GPU && row->call_id != 0)
            report_launch_add(r->trace, row->pid, row->call_id);
        if (r->o->limit == 0 || r->trace->events < r->o->limit) {
            r->trace->events++;
            report_trace_event(r->trace, row, r->in);
        } else {
            r->trace->skipped++;
        }
    }
    const char *api = row->api.ptr;
    int api_len = (int)(row->api.len < 1000 ? row->api.len : 1000);
    if (row->kind == TW_FILE_GPU) {
        /* GPU time goes to the groups a GPU record can name without a join: its API and its process. */
        group_t *g = NULL;
        if (r->o->by == BY_API && api_len == 0)
            g = group_for(r, "(not attributed)");
        else if (r->o->by == BY_API)
            g = group_for(r, "%.*s", api_len, api);
        else if (r->o->by == BY_PID)
            g = group_for(r, "%" PRId64, row->pid);
        if (g != NULL)
            g->stats.gpu_ns += row->cost_ns;
        return 0;
    }
    /* The gpu_ns column of call records counts only when no GPU files give the same time. */
    uint64_t gpu = r->have_gpu_files ? 0 : row->gpu_ns;
    char key[48], *k = key;
    switch (r->o->by) {
    case BY_API:
        count_in(r, table_get(&r->groups, api, (size_t)api_len), row->cost_ns, row->self_ns, gpu, row->error);
        if (row->fwd_call_id != 0 && row->fwd_api.len > 0) { /* an autograd node: its cost is its forward API's bwd */
            group_t *f = table_get(&r->groups, row->fwd_api.ptr, row->fwd_api.len < 1000 ? row->fwd_api.len : 1000);
            if (f != NULL)
                f->bwd_ns += row->cost_ns;
            else
                r->oom = 1;
        }
        break;
    case BY_THREAD:
        k = tw_format_i64(k, row->pid);
        *k++ = '/';
        /* fall through */
    case BY_PID:
        if (r->o->by == BY_THREAD)
            k = tw_format_u64(k, row->tid);
        else
            k = tw_format_i64(k, row->pid);
        count_in(r, table_get(&r->groups, key, (size_t)(k - key)), row->cost_ns, row->self_ns, gpu, row->error);
        break;
    case BY_STEP:
        if (row->step < 0) {
            count_in(r, group_for(r, "(no step)"), row->cost_ns, row->self_ns, gpu, row->error);
        } else {
            k = tw_format_i64(k, row->step);
            count_in(r, table_get(&r->groups, key, (size_t)(k - key)), row->cost_ns, row->self_ns, gpu, row->error);
        }
        break;
    case BY_SITE: {
        char site[1200];
        int n = report_site_key(r, row, site, sizeof site);
        group_t *g = table_get(&r->groups, site, n < (int)sizeof site ? (size_t)n : sizeof site - 1);
        if (row->fwd_call_id != 0) { /* an autograd node charged to the site of its forward call: its bwd */
            if (g != NULL)
                g->bwd_ns += row->cost_ns;
            else
                r->oom = 1;
            break;
        }
        count_in(r, g, row->cost_ns, row->self_ns, gpu, row->error);
        if (g != NULL)
            report_site_note_api(g, api, (size_t)api_len);
        break;
    }
    case BY_PARENT: {
        group_t *self_api = table_get(&r->api_names, api, (size_t)api_len);
        if (self_api == NULL) {
            r->oom = 1;
            break;
        }
        pending_t *p = pending_find(&r->pending, row->pid, row->call_id);
        if (p != NULL) {
            for (size_t i = 0; i < p->count; i++)
                count_in(r, group_for(r, "%s > %s", self_api->key, p->children[i].api->key), p->children[i].cost_ns,
                         p->children[i].self_ns, 0, p->children[i].error);
            pending_remove(&r->pending, p);
        }
        if (row->parent_id == 0) {
            count_in(r, group_for(r, "%s", self_api->key), row->cost_ns, row->self_ns, gpu, row->error);
        } else {
            pending_child_t child = {self_api, row->cost_ns, row->self_ns, row->error};
            if (pending_add(&r->pending, row->pid, row->parent_id, &child) != 0)
                r->oom = 1;
        }
        break;
    }
    }
    return 0;
}

/* Children whose parent never came (its process was killed before the parent returned). */
void report_settle_pending(report_t *r)
{
    for (size_t i = 0; i < r->pending.capacity; i++) {
        pending_t *p = &r->pending.slots[i];
        if (p->parent_id == 0)
            continue;
        for (size_t k = 0; k < p->count; k++)
            count_in(r, group_for(r, "(not recorded) > %s", p->children[k].api->key), p->children[k].cost_ns,
                     p->children[k].self_ns, 0, p->children[k].error);
        free(p->children);
    }
    free(r->pending.slots);
    memset(&r->pending, 0, sizeof r->pending);
}

/* Frees what the pass gathered (the trace included). */
void report_free(report_t *r)
{
    report_trace_free(r->trace);
    r->trace = NULL;
    report_flame_free(r->flame);
    r->flame = NULL;
    report_html_free(r->html_data);
    r->html_data = NULL;
    report_tree_free(&r->tree);
    report_sites_free(&r->sites);
    table_free(&r->groups);
    table_free(&r->api_names);
    for (size_t i = 0; i < r->pending.capacity; i++)
        free(r->pending.slots[i].children);
    free(r->pending.slots);
}

/* The same filters (--api, --pid, --tid, --steps) for tw-report --diff's own pass (diff.c). */
int report_keep_row(report_t *r, const tw_row_t *row)
{
    return keep_row(r, row);
}
