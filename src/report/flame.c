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
 * returned before its nodes ran, so its stack is known by then: every row's parent and frame are
 * kept in a direct-mapped table of the last CHARGE_RECENT calls read, and a node's stack is rebuilt
 * from there, top-down, merged by name into the frames already built. With --timeline (or a forward
 * call not found there) a node stays where it ran, under the backward call.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_internal.h"

/* A frame's name, interned: nodes compare names by pointer. */
typedef struct frame_name {
    char *text;
    size_t len;
    uint64_t hash;
    int package; /* package_t, for the colour */
} frame_name_t;

typedef struct flame_node {
    const frame_name_t *name; /* NULL: waiting for its own row; or (--by module) a call that is no frame */
    uint64_t self_ns, calls, total_ns;
    struct flame_node *child, *next; /* first child, next sibling */
} flame_node_t;

typedef struct waiting {
    int64_t pid;
    uint64_t call_id; /* 0: an empty slot */
    flame_node_t *node;
} waiting_t;

/* A call read lately: its parent and frame (NULL: none of its own), for the charged view. */
typedef struct recent_frame {
    int64_t pid;
    uint64_t call_id; /* 0: an empty slot */
    uint64_t parent_id;
    const struct frame_name *name;
    uint32_t site;
} recent_frame_t;

enum { CHARGE_RECENT = 1 << 16 };

struct flame {
    int by_module;
    int timeline;                /* backward nodes under the backward call that ran them */
    recent_frame_t *recent;      /* 2 * CHARGE_RECENT slots, made on the first row */
    struct recent_key {
        int64_t pid;
        uint64_t call_id;
    } *recent_order;             /* the keys in recent, a ring, oldest at recent_next */
    size_t recent_next;
    const report_sites_t *sites; /* call sites as frames (NULL, or no sites files: none) */
    int oom;
    uint64_t self_ns; /* all the self time counted: what the stacks sum to */
    uint64_t calls;   /* all the calls counted */
    flame_node_t root;
    /* interned names, open addressing */
    frame_name_t **names;
    size_t name_capacity, name_count;
    /* calls whose children arrived before them, keyed by (pid, call id) */
    waiting_t *waiting;
    size_t waiting_capacity, waiting_count;
    /* nodes come from chunks; freed ones are reused through a free list */
    flame_node_t **chunks;
    size_t nchunks, chunk_used;
    flame_node_t *free_nodes;
    size_t live_nodes;
};

enum { NODES_PER_CHUNK = 4096 };
enum { FRAME_NAME_MAX = 1000 }; /* bytes of a frame's name kept (cut at a character boundary) */

typedef enum { PKG_NN, PKG_OPTIM, PKG_TENSOR, PKG_TORCH, PKG_USER, PKG_NONE } package_t;

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

/* ---- calls waiting for their parent's row ---------------------------------------------------- */

static size_t waiting_slot(const flame_t *f, int64_t pid, uint64_t call_id)
{
    size_t j = report_pid_id_hash(pid, call_id) & (f->waiting_capacity - 1);
    while (f->waiting[j].call_id != 0 && !(f->waiting[j].call_id == call_id && f->waiting[j].pid == pid))
        j = (j + 1) & (f->waiting_capacity - 1);
    return j;
}

/* The node the children of (pid, call_id) wait in, taken out of the table; NULL when none came. */
static flame_node_t *waiting_take(flame_t *f, int64_t pid, uint64_t call_id)
{
    if (f->waiting_count == 0)
        return NULL;
    size_t i = waiting_slot(f, pid, call_id);
    flame_node_t *node = f->waiting[i].node;
    if (f->waiting[i].call_id == 0)
        return NULL;
    /* Backward shift keeps the linear probe chains intact. */
    f->waiting[i] = (waiting_t){0};
    f->waiting_count--;
    for (size_t j = (i + 1) & (f->waiting_capacity - 1); f->waiting[j].call_id != 0;
         j = (j + 1) & (f->waiting_capacity - 1)) {
        waiting_t moved = f->waiting[j];
        f->waiting[j] = (waiting_t){0};
        f->waiting[waiting_slot(f, moved.pid, moved.call_id)] = moved;
    }
    return node;
}

/* The node (pid, call_id)'s children wait in, created on the first; NULL without memory. */
static flame_node_t *waiting_get(flame_t *f, int64_t pid, uint64_t call_id)
{
    if ((f->waiting_count + 1) * 2 > f->waiting_capacity) {
        size_t capacity = f->waiting_capacity ? f->waiting_capacity * 2 : 1024;
        waiting_t *old = f->waiting;
        size_t old_capacity = f->waiting_capacity;
        if ((f->waiting = calloc(capacity, sizeof *f->waiting)) == NULL) {
            f->waiting = old;
            return NULL;
        }
        f->waiting_capacity = capacity;
        for (size_t i = 0; i < old_capacity; i++)
            if (old[i].call_id != 0)
                f->waiting[waiting_slot(f, old[i].pid, old[i].call_id)] = old[i];
        free(old);
    }
    waiting_t *w = &f->waiting[waiting_slot(f, pid, call_id)];
    if (w->call_id == 0) {
        flame_node_t *node = node_new(f);
        if (node == NULL)
            return NULL;
        *w = (waiting_t){pid, call_id, node};
        f->waiting_count++;
    }
    return w->node;
}

/* ---- the pass ---------------------------------------------------------------------------------- */

flame_t *report_flame_new(int by_module, const report_sites_t *sites, int timeline)
{
    flame_t *f = calloc(1, sizeof *f);
    if (f != NULL) {
        f->by_module = by_module;
        f->sites = sites;
        f->timeline = timeline;
    }
    return f;
}

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

static flame_node_t *site_parent(flame_t *f, flame_node_t *parent, int64_t pid, uint32_t site)
{
    const char *text = site != 0 && f->sites != NULL ? report_site_text(f->sites, pid, site) : NULL;
    if (text == NULL)
        return parent;
    const frame_name_t *name = intern(f, text, tw_utf8_cut(text, strlen(text), FRAME_NAME_MAX), 0);
    return name != NULL ? child_named(f, parent, name) : parent;
}

/* The slot of (pid, call_id) in the recent table: its own, or the empty one where it would go. */
static size_t recent_slot(const flame_t *f, int64_t pid, uint64_t call_id)
{
    size_t j = report_pid_id_hash(pid, call_id) & (2 * CHARGE_RECENT - 1);
    while (f->recent[j].call_id != 0 && !(f->recent[j].call_id == call_id && f->recent[j].pid == pid))
        j = (j + 1) & (2 * CHARGE_RECENT - 1);
    return j;
}

static const recent_frame_t *recent_find(const flame_t *f, int64_t pid, uint64_t call_id)
{
    if (f->recent == NULL)
        return NULL;
    const recent_frame_t *e = &f->recent[recent_slot(f, pid, call_id)];
    return e->call_id != 0 ? e : NULL;
}

/* Keeps e among the last CHARGE_RECENT calls read: an open-addressing table at most half full, the
 * oldest call leaving it (in the order of a ring of their keys) when a new one comes. */
static void recent_put(flame_t *f, recent_frame_t e)
{
    if (f->recent == NULL) {
        f->recent = calloc(2 * CHARGE_RECENT, sizeof *f->recent);
        f->recent_order = calloc(CHARGE_RECENT, sizeof *f->recent_order);
        if (f->recent == NULL || f->recent_order == NULL) {
            free(f->recent);
            free(f->recent_order);
            f->recent = NULL;
            f->recent_order = NULL;
            return; /* nodes stay where they ran */
        }
    }
    struct recent_key *oldest = &f->recent_order[f->recent_next];
    if (oldest->call_id != 0) { /* full: the oldest leaves, backward shift keeping probe chains whole */
        size_t i = recent_slot(f, oldest->pid, oldest->call_id);
        f->recent[i].call_id = 0;
        for (size_t j = (i + 1) & (2 * CHARGE_RECENT - 1); f->recent[j].call_id != 0;
             j = (j + 1) & (2 * CHARGE_RECENT - 1)) {
            recent_frame_t moved = f->recent[j];
            f->recent[j].call_id = 0;
            f->recent[recent_slot(f, moved.pid, moved.call_id)] = moved;
        }
    }
    size_t at = recent_slot(f, e.pid, e.call_id);
    if (f->recent[at].call_id != 0) { /* read twice (files given twice): the older key stays in the ring */
        f->recent[at] = e;
        return;
    }
    f->recent[at] = e;
    *oldest = (struct recent_key){e.pid, e.call_id};
    f->recent_next = (f->recent_next + 1) % CHARGE_RECENT;
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
    const recent_frame_t *chain[TW_MAX_DEPTH];
    size_t n = 0;
    const recent_frame_t *e = recent_find(f, pid, fwd_call_id);
    if (e == NULL)
        return NULL;
    for (; e != NULL && n < TW_MAX_DEPTH; e = e->parent_id != 0 ? recent_find(f, pid, e->parent_id) : NULL)
        chain[n++] = e;
    const recent_frame_t *top = chain[n - 1];
    flame_node_t *at = top->parent_id == 0 ? &f->root : waiting_get(f, pid, top->parent_id);
    if (at == NULL) {
        f->oom = 1;
        return NULL;
    }
    while (n-- > 0) {
        at = site_parent(f, at, pid, chain[n]->site);
        if (chain[n]->name != NULL)
            at = child_named(f, at, chain[n]->name);
    }
    return at;
}

/* Nodes read before their forward call (another thread's records can reach the files first) wait
 * for it in the waiting table, under the forward call's id with this bit set: call ids never have
 * it. Those whose forward call never comes end below "(not recorded)", as orphans do. */
#define CHARGE_PENDING (UINT64_C(1) << 63)

/*
 * The module a row is the forward of: its path, for a module other than the model; the model's own
 * forward carries "" (which the reader cannot tell from no module), so it is known by its API and
 * named by its class (the API without ".forward"). Returns the label's length, 0 for no module.
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

void report_flame_row(flame_t *f, const tw_row_t *row, int counted)
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
    if (!f->timeline && row->call_id != 0) /* kept for the nodes that come later */
        recent_put(f, (recent_frame_t){row->pid, row->call_id, row->parent_id, name, row->site});
    flame_node_t *node = waiting_take(f, row->pid, row->call_id);
    if (node == NULL && (node = node_new(f)) == NULL) {
        f->oom = 1;
        return;
    }
    node->name = name;
    if (counted) {
        node->self_ns += row->self_ns;
        node->calls += name != NULL;
        f->self_ns += row->self_ns;
        f->calls++;
    }
    flame_node_t *parent = NULL;
    if (charged && (parent = charged_parent(f, row->pid, row->fwd_call_id)) == NULL &&
        (parent = waiting_get(f, row->pid, row->fwd_call_id | CHARGE_PENDING)) == NULL)
        f->oom = 1;
    if (parent == NULL) {
        parent = outermost ? &f->root : waiting_get(f, row->pid, row->parent_id);
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
    flame_node_t *pending = f->timeline ? NULL : waiting_take(f, row->pid, row->call_id | CHARGE_PENDING);
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
void report_flame_settle(flame_t *f)
{
    const frame_name_t *orphans = NULL;
    for (size_t i = 0; i < f->waiting_capacity; i++) {
        waiting_t *w = &f->waiting[i];
        if (w->call_id == 0)
            continue;
        if (orphans == NULL && (orphans = intern(f, "(not recorded)", 14, 0)) == NULL) {
            f->oom = 1;
            break;
        }
        w->node->name = orphans;
        add_child(f, &f->root, w->node);
        *w = (waiting_t){0};
    }
    free(f->waiting);
    f->waiting = NULL;
    f->waiting_capacity = f->waiting_count = 0;
    uint64_t depth = 0;
    if (finish(&f->root, &depth, 0) != 0)
        f->oom = 1;
}

uint64_t report_flame_self_ns(const flame_t *f)
{
    return f->self_ns;
}

int report_flame_oom(const flame_t *f)
{
    return f->oom;
}

void report_flame_free(flame_t *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->name_capacity; i++) {
        if (f->names[i] != NULL) {
            free(f->names[i]->text);
            free(f->names[i]);
        }
    }
    free(f->names);
    free(f->waiting);
    free(f->recent);
    free(f->recent_order);
    for (size_t i = 0; i < f->nchunks; i++)
        free(f->chunks[i]);
    free(f->chunks);
    free(f);
}

/* ---- folded stacks ------------------------------------------------------------------------------ */

typedef struct path {
    char *text;
    size_t len, capacity;
} path_t;

static int folded_node(FILE *out, const flame_node_t *n, path_t *p)
{
    size_t before = p->len;
    size_t need = p->len + n->name->len + 2;
    if (need > p->capacity) {
        size_t capacity = need * 2;
        char *text = realloc(p->text, capacity);
        if (text == NULL)
            return TW_ENOMEM;
        p->text = text;
        p->capacity = capacity;
    }
    if (p->len > 0)
        p->text[p->len++] = ';';
    memcpy(p->text + p->len, n->name->text, n->name->len);
    p->len += n->name->len;
    if (n->self_ns > 0) {
        fwrite(p->text, 1, p->len, out);
        fprintf(out, " %" PRIu64 "\n", n->self_ns);
    }
    for (const flame_node_t *c = n->child; c != NULL; c = c->next)
        if (folded_node(out, c, p) != 0)
            return TW_ENOMEM;
    p->len = before;
    return 0;
}

int report_flame_write_folded(const flame_t *f, const char *path, FILE *err)
{
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        fprintf(err, "tw-report: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    path_t p = {0};
    int rc = 0;
    for (const flame_node_t *c = f->root.child; rc == 0 && c != NULL; c = c->next)
        rc = folded_node(out, c, &p);
    free(p.text);
    return report_close_output(out, path, rc, err);
}

/* ---- the SVG flame graph ----------------------------------------------------------------------- */

#define SVG_WIDTH 1200.0
#define SVG_PAD 10.0
#define FRAME_HEIGHT 16.0
#define SVG_TOP 56.0    /* title, legend, search and reset */
#define SVG_BOTTOM 30.0 /* the details line */
#define FONT_SIZE 12.0
#define FRAME_CHAR_WIDTH 7.3 /* of FONT_SIZE monospace: how many characters fit in a frame */
#define MIN_WIDTH 0.1   /* frames narrower than this many pixels are left out, as flamegraph.pl does */

static void xml_text(FILE *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        switch (c) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default:
            /* Control characters are not allowed in XML 1.0 */
            fputc((unsigned char)c < 0x20 ? ' ' : c, out);
        }
    }
}

static void package_colour(char *out, size_t size, const frame_name_t *name)
{
    /* One hue per package; the name's hash varies its shade, so that neighbours stand apart. */
    double v = name != NULL ? (double)(name->hash % 1000) / 1000.0 : 0.5;
    int r, g, b;
    switch (name != NULL ? (package_t)name->package : PKG_NONE) {
    case PKG_NN: r = 240; g = 150 + (int)(60 * v); b = 40 + (int)(30 * v); break;       /* orange */
    case PKG_OPTIM: r = 70 + (int)(60 * v); g = 185 + (int)(45 * v); b = 80 + (int)(40 * v); break; /* green */
    case PKG_TENSOR: r = 80 + (int)(50 * v); g = 145 + (int)(55 * v); b = 235; break;   /* blue */
    case PKG_TORCH: r = 225 + (int)(25 * v); g = 75 + (int)(60 * v); b = 70 + (int)(35 * v); break; /* red */
    case PKG_USER: r = 165 + (int)(40 * v); g = 120 + (int)(40 * v); b = 225; break;    /* purple */
    default: r = g = b = 190; break;                                                    /* grey */
    }
    snprintf(out, size, "#%02x%02x%02x", r, g, b);
}

static const char *const legend[][2] = {
    {"torch.nn", "#f0b44e"}, {"torch.optim", "#64cf78"}, {"torch.Tensor", "#69aeeb"},
    {"other torch", "#eb6e58"}, {"user code", "#b98ce1"},
};

static void print_ms_text(FILE *out, uint64_t ns)
{
    double ms = (double)ns / 1e6;
    if (ms >= 100)
        fprintf(out, "%.0f ms", ms);
    else if (ms >= 1)
        fprintf(out, "%.2f ms", ms);
    else
        fprintf(out, "%.1f us", (double)ns / 1e3);
}

static void frame_label(FILE *out, const char *name, size_t len, double width)
{
    long fit = (long)((width - 6) / FRAME_CHAR_WIDTH);
    if (fit < 3)
        return;
    if ((size_t)fit >= len) {
        xml_text(out, name, len);
    } else {
        xml_text(out, name, tw_utf8_cut(name, len, (size_t)fit - 2)); /* whole characters: the SVG stays XML */
        fputs("..", out);
    }
}

typedef struct svg_layout {
    FILE *out;
    uint64_t all_ns;
    uint64_t min_ns; /* frames with less total time are left out */
    double scale;    /* pixels per ns */
    double height;
    size_t frames;
} svg_layout_t;

static void svg_frame(svg_layout_t *l, const flame_node_t *n, const char *name, size_t len, int depth,
                      uint64_t offset_ns, const frame_name_t *colour_of)
{
    FILE *out = l->out;
    double x = SVG_PAD + (double)offset_ns * l->scale, w = (double)n->total_ns * l->scale;
    double y = l->height - SVG_BOTTOM - (depth + 1) * FRAME_HEIGHT;
    char fill[8];
    package_colour(fill, sizeof fill, colour_of);
    fputs("<g class=\"twf-f\"><title>", out);
    xml_text(out, name, len);
    fprintf(out, "\n%" PRIu64 " call%s, total ", n->calls, n->calls == 1 ? "" : "s");
    print_ms_text(out, n->total_ns);
    fprintf(out, " (%.2f%%), self ", l->all_ns ? 100.0 * (double)n->total_ns / (double)l->all_ns : 0.0);
    print_ms_text(out, n->self_ns);
    fprintf(out, " (%.2f%%)</title><rect x=\"%.3f\" y=\"%.1f\" width=\"%.3f\" height=\"%.1f\" fill=\"%s\" rx=\"2\"/>"
                 "<text x=\"%.3f\" y=\"%.1f\">",
            l->all_ns ? 100.0 * (double)n->self_ns / (double)l->all_ns : 0.0, x, y, w, FRAME_HEIGHT - 1, fill, x + 3,
            y + FRAME_HEIGHT - 4.5);
    frame_label(out, name, len, w);
    fputs("</text></g>\n", out);
    l->frames++;
    uint64_t at = offset_ns; /* children from the frame's left edge, its self time to their right */
    for (const flame_node_t *c = n->child; c != NULL; c = c->next) {
        if (c->total_ns >= l->min_ns && c->total_ns > 0)
            svg_frame(l, c, c->name->text, c->name->len, depth + 1, at, c->name);
        at += c->total_ns;
    }
}

static void collect_totals(const flame_node_t *n, uint64_t *totals, size_t *count)
{
    for (const flame_node_t *c = n->child; c != NULL; c = c->next) {
        if (c->total_ns == 0)
            continue;
        totals[(*count)++] = c->total_ns;
        collect_totals(c, totals, count);
    }
}

static int compare_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int kept_depth(const flame_node_t *n, uint64_t min_ns)
{
    int deepest = 0;
    for (const flame_node_t *c = n->child; c != NULL; c = c->next)
        if (c->total_ns >= min_ns && c->total_ns > 0) {
            int d = 1 + kept_depth(c, min_ns);
            if (d > deepest)
                deepest = d;
        }
    return deepest;
}

/* The script: hover details, click to zoom, search. It finds its graph by id, so that a page can
 * hold several graphs; the frames keep their first place in data attributes for the zoom. */
static const char flame_script[] =
    "(function(ID){\n"
    "var svg=document.getElementById(ID);if(!svg||svg.twFlame)return;\n"
    "var pad=+svg.getAttribute('data-pad'),full=+svg.getAttribute('data-width')-2*pad,\n"
    "cw=+svg.getAttribute('data-char');\n"
    "var frames=[],gs=svg.querySelectorAll('g.twf-f');\n"
    "for(var i=0;i<gs.length;i++){var g=gs[i],r=g.querySelector('rect'),t=g.querySelector('text'),"
    "info=g.querySelector('title').textContent;\n"
    "var f={g:g,r:r,t:t,x:+r.getAttribute('x'),w:+r.getAttribute('width'),y:+r.getAttribute('y'),"
    "fill:r.getAttribute('fill'),name:info.split('\\n')[0],info:info};g.twFrame=f;frames.push(f);}\n"
    "var details=svg.querySelector('.twf-details'),matched=svg.querySelector('.twf-matched'),"
    "reset=svg.querySelector('.twf-reset'),searchBtn=svg.querySelector('.twf-search'),term='',zoomed=null;\n"
    "function label(f,w){var n=Math.floor((w-6)/cw);if(n<3)return '';return f.name.length<=n?f.name:"
    "f.name.slice(0,n-2)+'..';}\n"
    "function place(f,x,w){f.r.setAttribute('x',x.toFixed(3));f.r.setAttribute('width',w.toFixed(3));"
    "f.t.setAttribute('x',(x+3).toFixed(3));f.t.textContent=label(f,w);}\n"
    "function zoom(z){var ratio=full/z.w,eps=0.002;\n"
    "frames.forEach(function(f){f.g.classList.remove('twf-hide');f.g.classList.remove('twf-parent');\n"
    "if(f.y>z.y){if(f.x<=z.x+eps&&f.x+f.w>=z.x+z.w-eps){f.g.classList.add('twf-parent');place(f,pad,full);}"
    "else f.g.classList.add('twf-hide');}\n"
    "else if(f.x>=z.x-eps&&f.x+f.w<=z.x+z.w+eps)place(f,pad+(f.x-z.x)*ratio,f.w*ratio);"
    "else f.g.classList.add('twf-hide');});\n"
    "zoomed=z;reset.classList.remove('twf-hide');search(term);}\n"
    "function unzoom(){frames.forEach(function(f){f.g.classList.remove('twf-hide');"
    "f.g.classList.remove('twf-parent');place(f,f.x,f.w);});zoomed=null;reset.classList.add('twf-hide');"
    "search(term);}\n"
    "function search(t){term=t||'';var needle=term.toLowerCase(),hits=[];\n"
    "frames.forEach(function(f){var hit=needle!==''&&f.name.toLowerCase().indexOf(needle)>=0;"
    "f.g.classList.toggle('twf-match',hit);f.r.setAttribute('fill',hit?'#e600e6':f.fill);if(hit)hits.push(f);});\n"
    "hits.sort(function(a,b){return a.x-b.x||b.w-a.w;});var sum=0,end=-1;\n"
    "hits.forEach(function(f){if(f.x>=end-0.002){sum+=f.w;end=f.x+f.w;}});\n"
    "matched.textContent=needle?'Matched: '+hits.length+' frame'+(hits.length==1?'':'s')+', '+"
    "(100*sum/full).toFixed(1)+'% of the time':'';searchBtn.textContent=needle?'Clear search':'Search';}\n"
    "svg.addEventListener('mouseover',function(e){var g=e.target.closest&&e.target.closest('g.twf-f');"
    "if(g)details.textContent=g.twFrame.info.replace('\\n',': ');});\n"
    "svg.addEventListener('mouseout',function(e){if(e.target.closest&&e.target.closest('g.twf-f'))"
    "details.textContent=' ';});\n"
    "svg.addEventListener('click',function(e){var g=e.target.closest&&e.target.closest('g.twf-f');"
    "if(g){if(g.twFrame.y===frames[0].y)unzoom();else zoom(g.twFrame);}});\n"
    "reset.addEventListener('click',unzoom);\n"
    "searchBtn.addEventListener('click',function(){if(term){search('');return;}"
    "var t=prompt('Search frames (part of a name, any case)','');if(t)search(t);});\n"
    "svg.twFlame={zoom:function(name){for(var i=0;i<frames.length;i++)if(frames[i].name===name){"
    "zoom(frames[i]);return frames[i].g;}return null;},reset:unzoom,search:search,"
    "matched:function(){return matched.textContent;}};\n"
    "})";

int report_flame_write_svg(const flame_t *f, FILE *out, const char *id, const char *title, size_t max_frames,
                           int fluid)
{
    const flame_node_t *root = &f->root;
    uint64_t all = root->total_ns;
    /* Frames narrower than MIN_WIDTH pixels, and beyond the max_frames widest, are left out: a
     * frame is never narrower than what it holds, so what is kept stays one tree. */
    uint64_t min_ns = (uint64_t)((double)all * MIN_WIDTH / (SVG_WIDTH - 2 * SVG_PAD));
    size_t count = 0;
    size_t capacity = f->live_nodes + 1;
    uint64_t *totals = malloc(capacity * sizeof *totals);
    if (totals == NULL)
        return TW_ENOMEM;
    collect_totals(root, totals, &count);
    if (count > max_frames) {
        qsort(totals, count, sizeof *totals, compare_desc);
        if (totals[max_frames] + 1 > min_ns)
            min_ns = totals[max_frames] + 1;
    }
    free(totals);
    if (min_ns == 0)
        min_ns = 1;
    svg_layout_t l = {out, all, min_ns, all ? (SVG_WIDTH - 2 * SVG_PAD) / (double)all : 0, 0, 0};
    int depth = kept_depth(root, min_ns);
    l.height = SVG_TOP + (depth + 1) * FRAME_HEIGHT + SVG_BOTTOM;
    char size[64];
    if (fluid)
        snprintf(size, sizeof size, "width=\"100%%\"");
    else
        snprintf(size, sizeof size, "width=\"%.0f\" height=\"%.0f\"", SVG_WIDTH, l.height);
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"%s\" class=\"twf\" %s viewBox=\"0 0 %.0f %.0f\" "
                 "data-pad=\"%.0f\" data-width=\"%.0f\" data-char=\"%.1f\">\n",
            id, size, SVG_WIDTH, l.height, SVG_PAD, SVG_WIDTH, FRAME_CHAR_WIDTH);
    if (!fluid)
        fprintf(out, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#fdfdfd\"/>\n", SVG_WIDTH, l.height);
    fprintf(out, "<style>\n"
                 "#%s text{font:%.0fpx ui-monospace,Menlo,Consolas,'DejaVu Sans Mono',monospace;fill:#222}\n"
                 "#%s .twf-f text{pointer-events:none}\n"
                 "#%s .twf-f{cursor:pointer}\n"
                 "#%s .twf-f:hover rect{stroke:#333;stroke-width:.6}\n"
                 "#%s .twf-hide{display:none}\n"
                 "#%s .twf-parent{opacity:.55}\n"
                 "#%s .twf-button{cursor:pointer;fill:#1558b0}\n"
                 "#%s .twf-title{font-size:16px;font-weight:bold}\n"
                 "</style>\n",
            id, FONT_SIZE, id, id, id, id, id, id, id);
    fputs("<text class=\"twf-title\" x=\"600\" y=\"22\" text-anchor=\"middle\">", out);
    xml_text(out, title, strlen(title));
    fputs("</text>\n", out);
    double lx = SVG_PAD;
    for (size_t i = 0; i < sizeof legend / sizeof *legend; i++) {
        fprintf(out, "<rect x=\"%.0f\" y=\"34\" width=\"12\" height=\"12\" rx=\"2\" fill=\"%s\"/>"
                     "<text x=\"%.0f\" y=\"44\">%s</text>\n",
                lx, legend[i][1], lx + 16, legend[i][0]);
        lx += 16 + FRAME_CHAR_WIDTH * (double)strlen(legend[i][0]) + 18;
    }
    fprintf(out, "<text class=\"twf-button twf-reset twf-hide\" x=\"%.0f\" y=\"44\" text-anchor=\"end\">"
                 "Reset zoom</text>\n",
            SVG_WIDTH - SVG_PAD - 120);
    fprintf(out, "<text class=\"twf-button twf-search\" x=\"%.0f\" y=\"44\" text-anchor=\"end\">Search</text>\n",
            SVG_WIDTH - SVG_PAD);
    fprintf(out, "<text class=\"twf-matched\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\"></text>\n",
            SVG_WIDTH - SVG_PAD, l.height - 10);
    fprintf(out, "<text class=\"twf-details\" x=\"%.0f\" y=\"%.0f\"> </text>\n", SVG_PAD, l.height - 10);
    fputs("<g class=\"twf-frames\">\n", out);
    /* The whole run is the bottom frame, as in flamegraph.pl: clicking it undoes a zoom. */
    flame_node_t all_frame = *root;
    all_frame.calls = f->calls;
    svg_frame(&l, &all_frame, "all", 3, 0, 0, NULL);
    fprintf(out, "</g>\n<script type=\"text/ecmascript\"><![CDATA[\n%s('%s');\n]]></script>\n</svg>\n", flame_script,
            id);
    return 0;
}

/* --flamegraph FILE: the SVG alone. */
int report_flame_write_svg_file(const flame_t *f, const char *path, FILE *err)
{
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        fprintf(err, "tw-report: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fputs("<?xml version=\"1.0\" standalone=\"no\"?>\n", out);
    int rc = report_flame_write_svg(f, out, "tw-flame", f->by_module ? "Self time by module path"
                                                                      : "Self time by call stack", 30000, 0);
    return report_close_output(out, path, rc, err);
}
