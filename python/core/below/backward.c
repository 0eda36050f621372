/* SPDX-License-Identifier: MIT */
/*
 * Backward nodes as records (config aten "backward"): each autograd node evaluated in a backward
 * pass (AddmmBackward0, ..., torch::autograd::AccumulateGrad) becomes a record of its own, charged
 * to the forward call that created it.
 *
 * The links: every profiled call notes this thread's autograd sequence number when it begins
 * (tw_torch_sequence_peek, through tw_active.seq_peek); when it ends, the nodes created meanwhile
 * have the numbers in between, and each of those not already claimed by a call inside it (which
 * ended first) is noted as the call's, under (torch's thread id, sequence number): the call id, API,
 * the innermost module forward around it and the nearest call site. A ring per forward thread,
 * indexed by sequence number: bounded, no lock. No per-operator callback is needed (one would make
 * torch build a RecordFunction for every operator: about 1 us per node, measured).
 *
 * The libtorch layer (libtorch/tw_torch.h, loaded by layer.c from the package's _torch.so) calls
 * node_begin(name, seq, forward_thread) / node_end() on whatever thread runs a node, with or
 * without the GIL: the node is recorded like a profiled call on this thread's recorder state (so
 * that on the CPU, where backward runs on the calling thread, nodes nest under
 * torch.autograd.backward and take their time out of its self time). Its record carries the link
 * found under (forward_thread, seq): module and site in the record's own fields, the forward call
 * id and API as 12 bytes in place of the argument text (TW_RECORD_BACKWARD).
 *
 * Threading contract. Hooks run without the GIL, while stop() runs with it on another thread. Each
 * hook marks its thread busy (a sequentially consistent store) and then checks that the session it
 * belongs to still records (a sequentially consistent load); stop() first ends recording (a
 * sequentially consistent store) and then waits for every thread's busy mark to clear. Either the
 * hook sees recording ended, or stop() sees it busy and waits: no hook touches a recorder, or a
 * ring, after stop() has collected and freed them (Dekker's handshake). Checked under
 * ThreadSanitizer (make check-tsan).
 */
#include "backward.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/api.h"

#include "atfork.h"
#include "layer.h"
#include "memory.h"


/* ---- forward links: (forward thread, sequence number) -> the call that created the node ---------- */

#define LINK_RINGS 64          /* forward threads told apart (torch's thread ids modulo this) */
/* nodes between a forward op and its backward, per forward thread: a recurrent network makes ~14 a
 * step per layer and direction (a 2-layer bidirectional GRU over 300 steps: ~17,000 in its forward,
 * past the 16,384 this once was); 40 bytes each, 5 MB a ring, touched as it fills */
#define LINK_SLOTS (1u << 17)

typedef struct {
    /* tag: 0 while being written, else ((thread << 40) ^ (seq + 1)) of what the other fields hold */
    _Atomic uint64_t tag;
    _Atomic uint64_t call_id;
    _Atomic uint64_t api_module; /* api_id << 32 | module_id */
    _Atomic uint32_t site;
    _Atomic uint64_t flops;      /* the node's backward FLOPs, known when the call ended (flops.h) */
} link_slot_t;

static _Atomic(link_slot_t *) rings[LINK_RINGS];

static uint64_t link_tag(uint64_t thread, int64_t seq)
{
    return (thread << 40) ^ ((uint64_t)seq + 1);
}

/* ---- per-thread state --------------------------------------------------------------------------- */

#define NODE_DEPTH 64      /* nodes open at once on one thread (reentrant backward) */
#define NAME_CACHE 256     /* node names -> API ids, per thread */
#define MAX_THREADS 1024   /* threads that ever ran a hook while recording */
#define NODE_OWN_PERIOD 64 /* the hooks' own time is measured around one node in this many */

typedef struct {
    int begun;             /* tw_call_begin() was called (its frame may still be NULL: too deep) */
    int is_op;             /* an operator's (aten "all"), not a node's */
    int measured;          /* the hooks' own time is measured around this node (one in NODE_OWN_PERIOD) */
    uint64_t begin_ticks;  /* measured: its begin hook's own ticks, counted with its end hook's */
    tw_frame_t *frame;
    uint64_t start;
    uint32_t api_id;
    uint64_t fwd_call_id;
    uint32_t fwd_api;
} node_open_t;

typedef struct {
    _Atomic int busy;      /* inside a hook (see the threading contract) */
    uint64_t gen;          /* the session the fields below belong to */
    tw_thread_t *t;        /* its recorder state for this thread */
    uint32_t open;         /* nodes begun and not ended on this thread */
    /* The hooks' own cost in this session (tw_backward_own_cost): nodes recorded, and the ticks of
     * the hooks' own work around one node in NODE_OWN_PERIOD (from the begin hook's entry to the
     * node's start, from its end to the end hook's exit); read once the hooks stopped */
    uint64_t nodes_recorded;
    uint64_t own_samples;
    uint64_t own_ticks;
    uint64_t own_outliers;
    uint32_t own_countdown;
    node_open_t nodes[NODE_DEPTH];
    struct {
        uint64_t hash;
        char name[48];
        uint32_t api_id;
    } names[NAME_CACHE];
} node_thread_t;

static _Atomic(node_thread_t *) threads[MAX_THREADS];
static _Atomic unsigned thread_count;
static _Thread_local node_thread_t *self;

/* What a session gives the hooks: its generation (0: none records), recorder and clock. */
static _Atomic uint64_t recording_gen;
static tw_recorder_t *recording_recorder;
static tw_clock_source_t recording_clock;
/* CUPTI's push/pop while GPU timing is on, else NULL: kernels launched inside a node are then
 * attributed to the node's record, as those launched inside a profiled call are to the call's */
static const tw_gpu_hooks_t *recording_gpu;
static uint64_t dropped_links;         /* nodes whose forward call was overwritten in its ring */
/* hooks called while no session records: between a stop's end of recording and the removal of the
 * callbacks, or never once they are removed (the tests check that stop leaves none in libtorch) */
static _Atomic uint64_t stray_hooks;

/* tw_active.idle, for hooks on threads without the GIL (relaxed: a node at a step boundary may go
 * either way, as a call on another thread would) */
static _Atomic int hooks_idle;

/* measured nodes past this are left out (own_cost.h TW_OWN_SAMPLE_MAX_NS); set before a session records,
 * read by the hooks after they see its generation */
static uint64_t own_max_ticks = UINT64_MAX;

void tw_backward_set_idle(int idle)
{
    atomic_store_explicit(&hooks_idle, idle, memory_order_relaxed);
}

/* Whether the current step has the detail, and whether libtorch calls the hooks now (GIL held) */
static int detail_wanted = 1, observing;

void tw_backward_set_detail(int on)
{
    detail_wanted = on;
    if (observing != on && atomic_load(&recording_gen) != 0) {
        tw_layer.observe(on);
        observing = on;
    }
}

uint64_t tw_backward_stray_hooks(void)
{
    return atomic_load(&stray_hooks);
}

int tw_backward_torch_callbacks(void)
{
    return tw_layer.callbacks_held != NULL ? tw_layer.callbacks_held() : -1;
}

static node_thread_t *this_thread(void)
{
    if (TW_LIKELY(self != NULL))
        return self;
    unsigned index = atomic_fetch_add(&thread_count, 1);
    if (index >= MAX_THREADS)
        return NULL; /* counted by the caller as not recorded */
    node_thread_t *st = calloc(1, sizeof *st);
    if (st == NULL)
        return NULL;
    atomic_store(&threads[index], st); /* before its first busy mark: see tw_backward_stop() */
    self = st;
    return st;
}

/* Enters a hook: the thread's state, marked busy, when a session records; else NULL. */
static node_thread_t *hook_enter(void)
{
    node_thread_t *st = this_thread();
    if (st == NULL)
        return NULL;
    atomic_store(&st->busy, 1);
    uint64_t gen = atomic_load(&recording_gen);
    if (gen == 0) {
        atomic_store_explicit(&st->busy, 0, memory_order_release);
        atomic_fetch_add_explicit(&stray_hooks, 1, memory_order_relaxed);
        return NULL;
    }
    if (st->gen != gen) {
        st->gen = gen;
        st->open = 0;
        st->nodes_recorded = st->own_samples = st->own_ticks = st->own_outliers = 0;
        st->own_countdown = NODE_OWN_PERIOD;
        st->t = tw_recorder_attach(recording_recorder);
        tw_memory_attach(st->t); /* config memory: autograd's threads inherit the reporter */
    }
    return st;
}

static void hook_leave(node_thread_t *st)
{
    atomic_store_explicit(&st->busy, 0, memory_order_release);
}

/* ---- the hooks ---------------------------------------------------------------------------------- */

uint64_t (*tw_backward_peek_function(void))(void)
{
    return tw_layer.sequence_peek;
}

/* The external correlation ids this thread pushed for its open nodes, by nesting level: kept apart
 * from the recording state, because a node must pop what it pushed even when the session stopped
 * recording meanwhile (CUPTI's stacks are per thread and outlive sessions). Begin and end hooks
 * alternate per thread like the nodes they bracket.
 *
 * A node's id stays pushed after the node ends (tw_backward_gpu_ended), until the next node begins
 * or ends on this thread or a wrapped call ends on it: what autograd's engine does right after a node,
 * outside the node's own RecordFunction (adding its gradients into the next nodes' input buffers,
 * reducing and casting them to the inputs' shapes and dtypes: adds, sums, copies, memsets), is then
 * charged to that node, as torch.profiler charges it to the node's evaluate_function. Without this,
 * those kernels had no call (4% of a GPT-2 step's GPU time on an H200). */
static _Thread_local struct {
    uint32_t depth;
    const tw_gpu_hooks_t *pushed[NODE_DEPTH];
} gpu_nodes;
_Thread_local const tw_gpu_hooks_t *tw_backward_gpu_ended;

void tw_backward_gpu_settle(void)
{
    const tw_gpu_hooks_t *gpu = tw_backward_gpu_ended;
    if (gpu != NULL) {
        tw_backward_gpu_ended = NULL;
        gpu->pop(gpu->kind, NULL);
    }
}

/* torch's id of this thread, + 1 (0: not read yet) */
static _Thread_local uint64_t torch_thread_plus1;

void tw_backward_link_call(const tw_thread_t *t, const tw_frame_t *frame, const tw_torch_flops_node_t *flops,
                           unsigned n_flops)
{
    uint64_t end = tw_layer.sequence_peek(), begin = frame->seq_begin;
    if (end == begin || atomic_load_explicit(&hooks_idle, memory_order_relaxed))
        return;
    if (torch_thread_plus1 == 0)
        torch_thread_plus1 = tw_layer.thread_id() + 1;
    uint64_t thread = torch_thread_plus1 - 1;
    link_slot_t *ring = atomic_load_explicit(&rings[thread % LINK_RINGS], memory_order_acquire);
    if (ring == NULL) {
        link_slot_t *fresh = calloc(LINK_SLOTS, sizeof *fresh);
        if (fresh == NULL)
            return;
        if (!atomic_compare_exchange_strong(&rings[thread % LINK_RINGS], &ring, fresh))
            free(fresh); /* another thread with the same ring index made it first */
        else
            ring = fresh;
    }
    uint32_t module_id = TW_MODULE_NONE, site = 0;
    for (const tw_frame_t *f = frame; f >= t->stack && (module_id == TW_MODULE_NONE || site == 0); f--) {
        if (module_id == TW_MODULE_NONE)
            module_id = f->module_id;
        if (site == 0)
            site = f->site;
    }
    if (end - begin > LINK_SLOTS)
        begin = end - LINK_SLOTS;
    unsigned next_flops = 0; /* flops[] is in the order of sequence numbers */
    for (uint64_t seq = begin; seq < end; seq++) {
        link_slot_t *slot = &ring[seq & (LINK_SLOTS - 1)];
        uint64_t tag = link_tag(thread, (int64_t)seq);
        if (atomic_load_explicit(&slot->tag, memory_order_relaxed) == tag)
            continue; /* made inside a call within this one, which claimed it when it ended */
        atomic_store_explicit(&slot->tag, 0, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&slot->call_id, frame->call_id, memory_order_relaxed);
        atomic_store_explicit(&slot->api_module, (uint64_t)frame->api_id << 32 | module_id, memory_order_relaxed);
        atomic_store_explicit(&slot->site, site, memory_order_relaxed);
        while (next_flops < n_flops && flops[next_flops].seq < seq)
            next_flops++;
        uint64_t node_flops = next_flops < n_flops && flops[next_flops].seq == seq ? flops[next_flops].flops : 0;
        atomic_store_explicit(&slot->flops, node_flops, memory_order_relaxed);
        atomic_store_explicit(&slot->tag, tag, memory_order_release);
    }
}

/* The call that created the node (seq, thread), or 0: none (AccumulateGrad), or overwritten. */
static uint64_t find_link(int64_t seq, uint64_t thread, uint32_t *api_id, uint32_t *module_id, uint32_t *site,
                          uint64_t *flops)
{
    if (seq < 0)
        return 0;
    link_slot_t *ring = atomic_load_explicit(&rings[thread % LINK_RINGS], memory_order_acquire);
    if (ring == NULL)
        return 0;
    link_slot_t *slot = &ring[(uint64_t)seq & (LINK_SLOTS - 1)];
    uint64_t want = link_tag(thread, seq);
    if (atomic_load_explicit(&slot->tag, memory_order_acquire) != want)
        goto lost;
    uint64_t call_id = atomic_load_explicit(&slot->call_id, memory_order_relaxed);
    uint64_t api_module = atomic_load_explicit(&slot->api_module, memory_order_relaxed);
    uint32_t where = atomic_load_explicit(&slot->site, memory_order_relaxed);
    uint64_t node_flops = atomic_load_explicit(&slot->flops, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&slot->tag, memory_order_relaxed) != want)
        goto lost;
    *api_id = (uint32_t)(api_module >> 32);
    *module_id = (uint32_t)api_module;
    *site = where;
    *flops = node_flops;
    return call_id;
lost:
    __atomic_fetch_add(&dropped_links, 1, __ATOMIC_RELAXED);
    return 0;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The API id of a node's name: a per-thread cache in front of the (locked) name table. */
static uint32_t node_api(node_thread_t *st, const char *name)
{
    uint64_t h = hash_name(name);
    unsigned i = (unsigned)h & (NAME_CACHE - 1);
    if (st->names[i].hash == h && strcmp(st->names[i].name, name) == 0)
        return st->names[i].api_id;
    uint32_t id;
    if (tw_api_intern(name, &id) != 0)
        return UINT32_MAX;
    if (strlen(name) < sizeof st->names[i].name) {
        st->names[i].hash = h;
        strcpy(st->names[i].name, name);
        st->names[i].api_id = id;
    }
    return id;
}

/* Opens a record on this thread for a node or an operator that starts (st from hook_enter()): its
 * entry in st->nodes, with begun set and frame begun when it is recorded (name NULL: an entry that
 * is not recorded, for its end to pop). Its start is read last. */
static node_open_t *open_record(node_thread_t *st, const char *name, int is_op)
{
    if (st->open >= NODE_DEPTH) {
        st->open++;
        return NULL;
    }
    node_open_t *node = &st->nodes[st->open++];
    node->begun = 0;
    node->is_op = is_op;
    node->measured = 0;
    node->begin_ticks = 0;
    tw_thread_t *t = st->t;
    if (name == NULL || t == NULL || t->paused || atomic_load_explicit(&hooks_idle, memory_order_relaxed))
        return NULL;
    uint32_t api_id = node_api(st, name);
    if (api_id == UINT32_MAX)
        return NULL;
    /* An operator dispatching to one of the same name (aten::mean to aten::mean.dim's kernel) is one
     * record, as torch.profiler shows it: the inner one is not recorded */
    const node_open_t *outer = node - 1;
    if (is_op && node > st->nodes && outer->begun && outer->is_op && outer->api_id == api_id)
        return NULL;
    node->api_id = api_id;
    node->fwd_call_id = 0;
    node->fwd_api = 0;
    node->begun = 1;
    node->frame = tw_call_begin(t);
    return node;
}

/* Closes the record open_record() opened last on this thread; a node's carries its link. Returns
 * whether the hooks' own time is measured around it, with its begin hook's part in *begin_ticks. */
static int close_record(node_thread_t *st, uint64_t end, int is_node, uint64_t *begin_ticks)
{
    if (st->open == 0) /* begun before this session recorded */
        return 0;
    if (--st->open >= NODE_DEPTH)
        return 0;
    node_open_t *node = &st->nodes[st->open];
    if (!node->begun)
        return 0;
    if (is_node) {
        char link[TW_BACKWARD_LINK_SIZE];
        tw_backward_link_pack(link, node->fwd_call_id, node->fwd_api);
        tw_call_end_args(st->t, node->frame, node->api_id, node->start, end, TW_RECORD_BACKWARD, link, sizeof link);
    } else {
        tw_call_end(st->t, node->frame, node->api_id, node->start, end, 0);
    }
    *begin_ticks = node->begin_ticks;
    return node->measured;
}

static void on_node_begin(const char *name, int64_t seq, uint64_t forward_thread)
{
    tw_backward_gpu_settle();
    uint32_t level = gpu_nodes.depth++;
    if (level < NODE_DEPTH)
        gpu_nodes.pushed[level] = NULL;
    node_thread_t *st = hook_enter();
    if (st == NULL)
        return;
    uint64_t entry = --st->own_countdown == 0 ? tw_clock_ticks(recording_clock) : 0;
    node_open_t *node = open_record(st, name, 0);
    if (node != NULL) {
        st->nodes_recorded++;
        uint32_t fwd_api = 0, module_id = TW_MODULE_NONE, site = 0;
        uint64_t flops = 0;
        node->fwd_call_id = find_link(seq, forward_thread, &fwd_api, &module_id, &site, &flops);
        node->fwd_api = fwd_api;
        if (node->frame != NULL) {
            node->frame->api_id = node->api_id;
            node->frame->module_id = module_id;
            node->frame->site = site;
            node->frame->flops = flops; /* counted again at each run, as FlopCounterMode counts */
            const tw_gpu_hooks_t *gpu = recording_gpu;
            if (gpu != NULL && level < NODE_DEPTH &&
                gpu->push(gpu->kind, tw_gpu_external_id(node->frame->call_id, node->api_id)) == 0)
                gpu_nodes.pushed[level] = gpu;
        }
        node->start = tw_clock_ticks(recording_clock);
        if (entry != 0) { /* counted with its end hook's part (on_node_end) */
            node->measured = 1;
            node->begin_ticks = node->start - entry;
        }
    }
    if (entry != 0)
        st->own_countdown = NODE_OWN_PERIOD;
    hook_leave(st);
}

static void on_node_end(void)
{
    uint64_t end = tw_clock_ticks(recording_clock);
    tw_backward_gpu_settle(); /* a nested node's (reentrant backward): it is on top of ours */
    if (gpu_nodes.depth > 0) {
        uint32_t level = --gpu_nodes.depth;
        if (level < NODE_DEPTH) {
            tw_backward_gpu_ended = gpu_nodes.pushed[level]; /* popped later: see gpu_nodes */
            gpu_nodes.pushed[level] = NULL;
        }
    }
    node_thread_t *st = hook_enter();
    if (st == NULL)
        return;
    uint64_t begin_ticks;
    if (close_record(st, end, 1, &begin_ticks)) { /* a measured node: both hooks' own time, or an outlier */
        uint64_t own = begin_ticks + (tw_clock_ticks(recording_clock) - end);
        if (own > own_max_ticks) {
            st->own_outliers++;
        } else {
            st->own_samples++;
            st->own_ticks += own;
        }
    }
    hook_leave(st);
}

/* Operators (config aten "all"): records nested under the call or node that runs them, with no link
 * and no GPU id of their own (kernels stay charged to the profiled call or node around them, whose
 * GPU time is then the whole of its operators'). */
static void on_op_begin(const char *name)
{
    node_thread_t *st = hook_enter();
    if (st == NULL)
        return;
    /* torch's own wrapper of each node: the node inside is a record already */
    static const char engine[] = "autograd::engine::evaluate_function: ";
    node_open_t *op = open_record(st, strncmp(name, engine, sizeof engine - 1) == 0 ? NULL : name, 1);
    if (op != NULL) {
        if (op->frame != NULL)
            op->frame->api_id = op->api_id;
        op->start = tw_clock_ticks(recording_clock);
    }
    hook_leave(st);
}

static void on_op_end(void)
{
    uint64_t end = tw_clock_ticks(recording_clock);
    node_thread_t *st = hook_enter();
    if (st == NULL)
        return;
    uint64_t unused;
    (void)close_record(st, end, 0, &unused); /* (operators are not measured) */
    hook_leave(st);
}

static const tw_torch_hooks_t hooks = {on_node_begin, on_node_end, on_op_begin, on_op_end};

/* ---- sessions ------------------------------------------------------------------------------------ */

/* In a forked child only the forking thread exists: a busy mark another thread left there would make
 * the child's stop() wait forever. (The forking thread is not inside a hook: fork is called from
 * Python code, and hooks never call out.) */
static void after_fork_in_child(void)
{
    /* CUPTI is not usable in a forked child (gpu.h): its nodes push nothing, and what the forking
     * thread left pushed is forgotten */
    recording_gpu = NULL;
    memset(&gpu_nodes, 0, sizeof gpu_nodes);
    tw_backward_gpu_ended = NULL;
    unsigned n = atomic_load(&thread_count);
    for (unsigned i = 0; i < n && i < MAX_THREADS; i++) {
        node_thread_t *st = atomic_load(&threads[i]);
        if (st != NULL)
            atomic_store(&st->busy, 0);
    }
}

int tw_backward_session_start(const char *layer_path, const char *torch_version, tw_recorder_t *recorder,
                              tw_clock_source_t clock, const tw_gpu_hooks_t *gpu, uint64_t gen, int operators,
                              char *why, size_t why_size)
{
    tw_atfork_register(TW_ATFORK_BACKWARD, NULL, NULL, after_fork_in_child);
    if (tw_layer_need(TW_LAYER_BACKWARD, layer_path, torch_version, why, why_size) != 0)
        return -1;
    recording_recorder = recorder;
    recording_clock = clock;
    recording_gpu = gpu; /* published with recording_gen below */
    atomic_store(&recording_gen, gen);
    int rc = tw_layer.start(&hooks, operators);
    if (rc != 0) {
        atomic_store(&recording_gen, 0);
        snprintf(why, why_size, "the libtorch layer cannot register its callbacks: %s", tw_strerror(rc));
        return -1;
    }
    observing = 1; /* registered enabled: as the step that began has it */
    tw_backward_set_detail(detail_wanted);
    return 0;
}

void tw_backward_own_bound(uint64_t max_ticks)
{
    own_max_ticks = max_ticks;
}

void tw_backward_own_cost(uint64_t gen, tw_backward_own_t *out)
{
    *out = (tw_backward_own_t){0};
    unsigned n = atomic_load(&thread_count);
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    for (unsigned i = 0; i < n; i++) {
        node_thread_t *st = atomic_load(&threads[i]);
        if (st == NULL || st->gen != gen)
            continue;
        out->nodes += st->nodes_recorded;
        out->samples += st->own_samples;
        out->ticks += st->own_ticks;
        out->outliers += st->own_outliers;
    }
}

uint64_t tw_backward_stop(void)
{
    if (atomic_load(&recording_gen) == 0)
        return 0;
    atomic_store(&recording_gen, 0);
    unsigned n = atomic_load(&thread_count);
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    for (unsigned i = 0; i < n; i++) {
        node_thread_t *st = atomic_load(&threads[i]);
        while (st != NULL && atomic_load(&st->busy))
            sched_yield(); /* a hook finishing its record: one append at most */
    }
    tw_layer.stop();
    observing = 0;
    /* No hook touches a ring now (busy marks are clear and recording has ended): free them, so that
     * a next session starts with no link from this one. */
    for (unsigned i = 0; i < LINK_RINGS; i++)
        free(atomic_exchange(&rings[i], NULL));
    return __atomic_exchange_n(&dropped_links, 0, __ATOMIC_RELAXED);
}
