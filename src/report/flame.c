/* SPDX-License-Identifier: MIT */
/*
 * tw-report, --folded and --flamegraph: the calls' stacks (root..leaf API names, or module paths
 * with --by module) and the self time spent in each, gathered in one streaming pass, written as
 * Brendan Gregg's folded stacks or as a self-contained interactive SVG flame graph.
 *
 * A call's row is written when it returns, after the rows of the calls inside it, so a row cannot
 * know its stack. Instead each call's subtree is built bottom-up: a row becomes a node, takes the
 * nodes its children left waiting for it (keyed by (pid, call id)), and waits in turn for its
 * parent's row; an outermost call's node joins the finished tree. Children of the same name are
 * merged as they arrive, so a waiting subtree holds one node per distinct stack below it, and the
 * memory is what the calls still open at that point of the files have below them, plus one node per
 * distinct stack of the run, not one per record.
 *
 * Backward nodes (rows with a forward call) are charged by default: a node's frame goes under the
 * frame of the forward call that created it (nn.Linear.forward;torch.nn.functional.linear;
 * AddmmBackward0), so that a module's frame holds its forward and its backward. The forward call
 * returned before its nodes ran, so its stack is known by then: the pass's index (index.h) keeps
 * the last calls read with their parent, and each one's frame, and a node's stack is rebuilt from
 * there, top-down, merged by name into the frames already built; a node read
 * before its forward call waits for it. With --backward timeline a node stays where it ran, under
 * the backward call. The output (folded stacks, the SVG) is flame_output.c's.
 */
#include "config.h"
#include "flame.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "flame_output.h"
#include "flame_stacks.h"
#include "groups.h"


/* ---- names ------------------------------------------------------------------------------------- */

static int starts_with(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

static package_t package_of(const char *s, size_t len, int module)
{
    if (module || starts_with(s, len, "torch.nn."))
        return PKG_NN;
    if (starts_with(s, len, "torch.optim."))
        return PKG_OPTIM;
    if (starts_with(s, len, "torch.Tensor."))
        return PKG_TENSOR;
    if (starts_with(s, len, "torch.") || (len == 5 && memcmp(s, "torch", 5) == 0))
        return PKG_TORCH;
    if (len > 0 && s[0] == '(')
        return PKG_NONE; /* (not recorded) */
    return PKG_USER;
}

static int names_grow(flame_t *f)
{
    size_t capacity = f->name_capacity ? f->name_capacity * 2 : 1024;
    frame_name_t **slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return TW_ENOMEM;
    for (size_t i = 0; i < f->name_capacity; i++) {
        frame_name_t *n = f->names[i];
        if (n == NULL)
            continue;
        size_t j = n->hash & (capacity - 1);
        while (slots[j] != NULL)
            j = (j + 1) & (capacity - 1);
        slots[j] = n;
    }
    free(f->names);
    f->names = slots;
    f->name_capacity = capacity;
    return 0;
}

/* ';' separates frames and a line end ends a stack in the folded format: neither is in API names or
 * module paths, but a name (a site's file, a ModuleDict key) is never allowed to break the format. */
static inline char frame_char(char c)
{
    return c == ';' ? ':' : (c == '\n' || c == '\r') ? ' ' : c;
}

/* Whether stored (a name as written) is raw once made safe for the format. */
static int same_name(const char *stored, const char *raw, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (stored[i] != frame_char(raw[i]))
            return 0;
    return 1;
}

/* The interned name (module: a module path, coloured as torch.nn); NULL without memory. */
static const frame_name_t *intern(flame_t *f, const char *s, size_t len, int module)
{
    if ((f->name_count + 1) * 2 > f->name_capacity && names_grow(f) != 0)
        return NULL;
    uint64_t h = report_hash_bytes(s, len, (uint64_t)module);
    size_t j = h & (f->name_capacity - 1);
    for (frame_name_t *n; (n = f->names[j]) != NULL; j = (j + 1) & (f->name_capacity - 1))
        if (n->hash == h && n->len == len && same_name(n->text, s, len))
            return n;
    frame_name_t *n = malloc(sizeof *n);
    char *text = malloc(len + 1);
    if (n == NULL || text == NULL) {
        free(n);
        free(text);
        return NULL;
    }
    for (size_t i = 0; i < len; i++)
        text[i] = frame_char(s[i]);
    text[len] = '\0';
    *n = (frame_name_t){text, len, h, (int)package_of(s, len, module)};
    f->names[j] = n;
    f->name_count++;
    return n;
}

/* ---- nodes ------------------------------------------------------------------------------------- */

static flame_node_t *node_new(flame_t *f)
{
    flame_node_t *n = f->free_nodes;
    if (n != NULL) {
        f->free_nodes = n->next;
    } else {
        if (f->nchunks == 0 || f->chunk_used == NODES_PER_CHUNK) {
            flame_node_t **chunks = realloc(f->chunks, (f->nchunks + 1) * sizeof *chunks);
            if (chunks == NULL)
                return NULL;
            f->chunks = chunks;
            if ((chunks[f->nchunks] = malloc(NODES_PER_CHUNK * sizeof **chunks)) == NULL)
                return NULL;
            f->nchunks++;
            f->chunk_used = 0;
        }
        n = &f->chunks[f->nchunks - 1][f->chunk_used++];
    }
    *n = (flame_node_t){0};
    f->live_nodes++;
    return n;
}

static void node_free(flame_t *f, flame_node_t *n)
{
    n->next = f->free_nodes;
    f->free_nodes = n;
    f->live_nodes--;
}

static void merge(flame_t *f, flame_node_t *into, flame_node_t *from);

/* Adds child below parent, merged into the child of the same name when there is one. Siblings are a
 * list, the last one found moved to its front: a parent sees the same few children over and over. */
static void add_child(flame_t *f, flame_node_t *parent, flame_node_t *child)
{
    for (flame_node_t **at = &parent->child; *at != NULL; at = &(*at)->next) {
        flame_node_t *same = *at;
        if (same->name != child->name)
            continue;
        *at = same->next;
        same->next = parent->child;
        parent->child = same;
        merge(f, same, child);
        return;
    }
    child->next = parent->child;
    parent->child = child;
}

/* Moves from's time and children into into, then frees from. */
static void merge(flame_t *f, flame_node_t *into, flame_node_t *from)
{
    into->self_ns += from->self_ns;
    into->calls += from->calls;
    while (from->child != NULL) {
        flame_node_t *c = from->child;
        from->child = c->next;
        add_child(f, into, c);
    }
    node_free(f, from);
}

/* ---- nodes waiting for a row (the pass's index) ---------------------------------------------- */

/* The node waiting under (pid, id, tag) (REPORT_WAIT_FLAME_CHILDREN: a parent's children, _FORWARD:
 * a forward call's nodes), taken out of the index; NULL when none waits. */
static flame_node_t *waiting_take(flame_t *f, int64_t pid, uint64_t id, uint32_t tag)
{
    report_wait_t *w = report_index_waiting(f->index, pid, id, tag);
    if (w == NULL)
        return NULL;
    flame_node_t *node = w->ptr;
    report_index_remove(f->index, w);
    return node;
}

/* The node waiting under (pid, id, tag), created on the first; NULL without memory or at the index's
 * bound (then the caller counts the call as an outermost one, and says so: out of memory). */
static flame_node_t *waiting_get(flame_t *f, int64_t pid, uint64_t id, uint32_t tag)
{
    report_wait_t *w = report_index_waiting(f->index, pid, id, tag);
    if (w != NULL)
        return w->ptr;
    flame_node_t *node = node_new(f);
    if (node == NULL)
        return NULL;
    if ((w = report_index_wait(f->index, pid, id, tag)) == NULL) {
        node_free(f, node);
        return NULL;
    }
    w->ptr = node;
    return node;
}

/* ---- the pass ---------------------------------------------------------------------------------- */

/*
 * Where the program made the call (config sites), as a frame of its own above the call
 * ("train.py:42 train_step"), or the call's parent itself when the call names no site (or the run
 * has no sites files). A site frame has no time of its own: stacks still sum to the self times.
 */
/* parent's child frame of that name, made (with no time of its own) when there is none */
static flame_node_t *child_named(flame_t *f, flame_node_t *parent, const frame_name_t *name)
{
    for (flame_node_t *c = parent->child; c != NULL; c = c->next)
        if (c->name == name)
            return c;
    flame_node_t *child = node_new(f);
    if (child == NULL) {
        f->oom = 1;
        return parent;
    }
    child->name = name;
    child->next = parent->child;
    parent->child = child;
    return child;
}

/* The frame name of a site, or NULL (no site, no sites files, out of memory). */
static const frame_name_t *site_name(flame_t *f, int64_t pid, uint32_t site)
{
    const char *text = site != 0 && f->sites != NULL ? report_site_text(f->sites, pid, site) : NULL;
    return text != NULL ? intern(f, text, tw_utf8_cut(text, strlen(text), FRAME_NAME_MAX), 0) : NULL;
}

static flame_node_t *site_parent(flame_t *f, flame_node_t *parent, int64_t pid, uint32_t site)
{
    const frame_name_t *name = site_name(f, pid, site);
    return name != NULL ? child_named(f, parent, name) : parent;
}

/*
 * A call that torch's code made inside another carries the site of the call around it (the line
 * that entered torch), which is already a frame above both: its children's frames of that site,
 * made before the call's own row was read, are folded into the call's frame.
 */
static void fold_inherited_sites(flame_t *f, flame_node_t *node, int64_t pid, uint32_t site)
{
    const frame_name_t *name = node->child != NULL ? site_name(f, pid, site) : NULL;
    if (name == NULL)
        return;
    for (flame_node_t **at = &node->child; *at != NULL; at = &(*at)->next) {
        flame_node_t *same = *at;
        if (same->name != name)
            continue;
        *at = same->next;
        merge(f, node, same);
        return;
    }
}

/* A call read lately, as the charged view sees it: its parent, its site, and its frame (the value
 * this sink set on it; NULL: none of its own). NULL: not among the calls the index holds. */
static const report_call_t *recent_find(const flame_t *f, int64_t pid, uint64_t call_id)
{
    return report_index_call_of(f->index, pid, call_id, REPORT_USE_FLAME);
}

static const frame_name_t *recent_name(const report_call_t *c)
{
    return (const frame_name_t *)(uintptr_t)c->value[REPORT_USE_FLAME];
}

/*
 * Where a backward node's frame goes in the charged view: below the frame of the forward call that
 * created it, its stack rebuilt from the calls read lately (a forward call's ancestors, and their
 * call sites, in the order the forward had them). An ancestor not read yet (one still running, as
 * an outer call around both forward and backward) is waited for like any parent. NULL: the forward
 * call is not among the calls read lately; the node stays where it ran.
 */
static flame_node_t *charged_parent(flame_t *f, int64_t pid, uint64_t fwd_call_id)
{
    const report_call_t *chain[TW_MAX_DEPTH];
    size_t n = 0;
    const report_call_t *e = recent_find(f, pid, fwd_call_id);
    if (e == NULL)
        return NULL;
    for (; e != NULL && n < TW_MAX_DEPTH; e = e->parent_id != 0 ? recent_find(f, pid, e->parent_id) : NULL)
        chain[n++] = e;
    const report_call_t *top = chain[n - 1];
    flame_node_t *at = top->parent_id == 0 ? &f->root : waiting_get(f, pid, top->parent_id, REPORT_WAIT_FLAME_CHILDREN);
    if (at == NULL) {
        f->oom = 1;
        return NULL;
    }
    for (uint32_t above = 0; n-- > 0; above = chain[n]->site) {
        if (chain[n]->site != above) /* an inherited site is the frame above already */
            at = site_parent(f, at, pid, chain[n]->site);
        if (recent_name(chain[n]) != NULL)
            at = child_named(f, at, recent_name(chain[n]));
    }
    return at;
}

/*
 * The module a row is the forward of: its path (the model's own forward: its class, as every path
 * starts, GPT2LMHeadModel.transformer.h.0). A path "" (the C API's TW_MODULE_ROOT, and files written
 * before every model was named by its class, for their first model) cannot be told from no module
 * by the reader, so it is known by its API and named by it (the API without ".forward"). Returns
 * the label's length, 0 for no module.
 */
size_t report_module_label(const tw_row_t *row, const char **label)
{
    if (row->module.len > 0) {
        *label = row->module.ptr;
        return tw_utf8_cut(row->module.ptr, row->module.len, FRAME_NAME_MAX);
    }
    const char *a = row->api.ptr;
    size_t n = tw_utf8_cut(a, row->api.len, FRAME_NAME_MAX);
    *label = a;
    if (n > 8 && memcmp(a + n - 8, ".forward", 8) == 0)
        return n - 8;
    return n == 24 && memcmp(a, "torch.nn.Module.__call__", 24) == 0 ? n : 0;
}

static void flame_row(flame_t *f, const tw_row_t *row, int counted)
{
    const frame_name_t *name = NULL;
    int outermost = row->parent_id == 0;
    int charged = !f->timeline && row->fwd_call_id != 0;
    size_t api_len = tw_utf8_cut(row->api.ptr, row->api.len, FRAME_NAME_MAX);
    const char *label = NULL;
    /* --by module: a call outside every module keeps its API as its frame (optimizer steps,
     * backward); one inside a module has no frame of its own, nor has a charged node: its time is
     * its module's, as its forward's is. */
    size_t label_len = f->by_module && !charged ? report_module_label(row, &label) : 0;
    if (!f->by_module || label_len > 0 || (outermost && !charged)) {
        name = label_len > 0 ? intern(f, label, label_len, 1) : intern(f, row->api.ptr, api_len, 0);
        if (name == NULL) {
            f->oom = 1;
            return;
        }
    }
    report_call_t *seen = f->timeline ? NULL : report_index_call(f->index, row->pid, row->call_id);
    if (seen != NULL) /* the pass noted it: its frame, for the nodes that come later */
        report_index_set(seen, REPORT_USE_FLAME, (uint64_t)(uintptr_t)name);
    flame_node_t *node = waiting_take(f, row->pid, row->call_id, REPORT_WAIT_FLAME_CHILDREN);
    if (node == NULL && (node = node_new(f)) == NULL) {
        f->oom = 1;
        return;
    }
    node->name = name;
    if (name != NULL && row->site != 0)
        fold_inherited_sites(f, node, row->pid, row->site);
    if (counted) {
        node->self_ns += row->self_ns;
        node->calls += name != NULL;
        f->self_ns += row->self_ns;
        f->calls++;
    }
    flame_node_t *parent = NULL;
    if (charged && (parent = charged_parent(f, row->pid, row->fwd_call_id)) == NULL &&
        (parent = waiting_get(f, row->pid, row->fwd_call_id, REPORT_WAIT_FLAME_FORWARD)) == NULL)
        f->oom = 1;
    if (parent == NULL) {
        parent = outermost ? &f->root : waiting_get(f, row->pid, row->parent_id, REPORT_WAIT_FLAME_CHILDREN);
        if (parent == NULL) {
            f->oom = 1;
            parent = &f->root; /* its time still counts, as an outermost call */
        }
        if (name != NULL)
            parent = site_parent(f, parent, row->pid, row->site);
    }
    if (name != NULL) {
        add_child(f, parent, node);
    } else { /* no frame of its own: its time and its children's frames belong to its parent's frame */
        node->calls = 0;
        merge(f, parent, node);
    }
    flame_node_t *pending = f->timeline ? NULL : waiting_take(f, row->pid, row->call_id, REPORT_WAIT_FLAME_FORWARD);
    if (pending != NULL) { /* nodes that came before this, their forward call */
        flame_node_t *at = charged_parent(f, row->pid, row->call_id);
        merge(f, at != NULL ? at : &f->root, pending);
    }
}

static int compare_nodes(const void *a, const void *b)
{
    const flame_node_t *x = *(flame_node_t *const *)a, *y = *(flame_node_t *const *)b;
    return strcmp(x->name->text, y->name->text);
}

/* Totals from the leaves up, and children in name order (flamegraph.pl's order: the same stack
 * lands in the same place in every graph). Returns 0 or TW_ENOMEM. */
static int finish(flame_node_t *n, uint64_t *depth_out, uint64_t depth)
{
    n->total_ns = n->self_ns;
    size_t count = 0;
    for (flame_node_t *c = n->child; c != NULL; c = c->next) {
        if (finish(c, depth_out, depth + 1) != 0)
            return TW_ENOMEM;
        n->total_ns += c->total_ns;
        count++;
    }
    if (depth > *depth_out)
        *depth_out = depth;
    if (count < 2)
        return 0;
    flame_node_t *small[64], **order = count <= 64 ? small : malloc(count * sizeof *order);
    if (order == NULL)
        return TW_ENOMEM;
    size_t i = 0;
    for (flame_node_t *c = n->child; c != NULL; c = c->next)
        order[i++] = c;
    qsort(order, count, sizeof *order, compare_nodes);
    for (i = 0; i + 1 < count; i++)
        order[i]->next = order[i + 1];
    order[count - 1]->next = NULL;
    n->child = order[0];
    if (order != small)
        free(order);
    return 0;
}

/* After the last row: calls whose parent's row never came (a process killed before its outer calls
 * returned) go below a "(not recorded)" frame; then totals and order. */
static void flame_settle(flame_t *f)
{
    const frame_name_t *orphans = NULL;
    static const uint32_t tags[] = {REPORT_WAIT_FLAME_CHILDREN, REPORT_WAIT_FLAME_FORWARD};
    int no_name = 0;
    for (size_t t = 0; t < 2 && !no_name; t++) {
        size_t at = 0;
        for (report_wait_t *w; (w = report_index_next(f->index, tags[t], &at)) != NULL;) {
            if (orphans == NULL && (orphans = intern(f, "(not recorded)", 14, 0)) == NULL) {
                f->oom = no_name = 1;
                break;
            }
            flame_node_t *node = w->ptr;
            report_index_remove(f->index, w);
            node->name = orphans;
            add_child(f, &f->root, node);
        }
    }
    uint64_t depth = 0;
    if (finish(&f->root, &depth, 0) != 0)
        f->oom = 1;
}

uint64_t report_flame_self_ns(const flame_t *f)
{
    return f->self_ns;
}

/* ---- the sink ----------------------------------------------------------------------------------- */

static int flame_sink_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    if (row->kind == TW_FILE_CALLS)
        flame_row((flame_t *)sink, row, kept);
    return 0; /* out of memory is said once, at settle */
}

static int flame_sink_settle(report_sink_t *sink)
{
    flame_t *f = (flame_t *)sink;
    flame_settle(f);
    return f->oom ? TW_ENOMEM : 0;
}

static int flame_sink_write(report_sink_t *sink, const report_pass_t *pass, FILE *err)
{
    const flame_t *f = (const flame_t *)sink;
    int rc = f->folded != NULL ? report_flame_write_folded(f, f->folded, err) : 0;
    if (rc == 0 && f->flamegraph != NULL)
        rc = report_flame_write_svg_file(f, f->flamegraph, err);
    return rc;
}

static void flame_sink_free(report_sink_t *sink)
{
    flame_t *f = (flame_t *)sink;
    for (size_t i = 0; i < f->name_capacity; i++) {
        if (f->names[i] != NULL) {
            free(f->names[i]->text);
            free(f->names[i]);
        }
    }
    free(f->names);
    for (size_t i = 0; i < f->nchunks; i++)
        free(f->chunks[i]);
    free(f->chunks);
    free(f);
}

static const report_sink_ops_t flame_ops = {
    .name = "flame",
    .row = flame_sink_row,
    .settle = flame_sink_settle,
    .write = flame_sink_write,
    .free = flame_sink_free,
};

int report_flame_open(const options_t *o, const report_sites_t *sites, report_index_t *index, report_sink_t **sink)
{
    flame_t *f = calloc(1, sizeof *f);
    if (f == NULL)
        return TW_ENOMEM;
    /* a call left out by the filters still carries its children's stacks to its caller's, with no
     * time of its own */
    f->sink = (report_sink_t){&flame_ops, SINK_ROWS_KEPT | SINK_ROWS_LEFT_OUT};
    f->folded = o->folded;
    f->flamegraph = o->flamegraph;
    f->by_module = o->frames_by_module;
    f->sites = o->frames_by_module ? NULL : sites; /* module paths are frames of their own, without sites */
    f->timeline = o->backward_timeline;
    f->index = index;
    if (!f->timeline) /* charged: a node's forward call's stack, from the calls read lately */
        index->recent_wanted = 1;
    *sink = &f->sink;
    return 0;
}

const flame_t *report_flame_of(const report_sink_t *sink)
{
    return (const flame_t *)sink;
}
