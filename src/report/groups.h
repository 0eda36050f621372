/* SPDX-License-Identifier: MIT */
/*
 * Hashing and the group tables (groups.c): totals per key (an API, a pid, a step, a module...) in an
 * open-addressing table. The aggregate (the table's groups) and --html's modules keep theirs here;
 * the (pid, call id) tables of the other parts use report_pid_id_hash.
 */
#ifndef TW_REPORT_GROUPS_H
#define TW_REPORT_GROUPS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "torchwrapper/stats.h"

typedef struct group {
    char *key;
    size_t key_len;
    uint64_t hash;
    tw_api_stats_t stats;
    uint64_t bwd_ns;     /* the autograd nodes charged to this group's calls (--by api, site; modules) */
    uint64_t bwd_gpu_ns; /* their GPU time (the work each node launched: call_gpu_table_t) */
    uint64_t flops;      /* its records' own FLOPs (config flops); modules: their forwards' flops_total */
    uint64_t bwd_flops;  /* those of the autograd nodes charged to its calls (as bwd_ns) */
    uint64_t node_flops; /* of flops, the autograd nodes' among its own records (--by api, step, ...) */
    uint64_t nodes;      /* of its calls, autograd nodes' records (--by step: the profiler's own cost) */
    /* config memory: bytes its records' allocators reported (modules: their forwards'), summed; the
     * peak is the highest of theirs; bwd_mem: allocated by the autograd nodes charged to its calls */
    uint64_t mem_alloc, mem_self, mem_freed, mem_peak, bwd_mem;
    char *detail;        /* --by site: the APIs called there (aggregate.c) */
    size_t detail_count;
} group_t;

typedef struct group_table {
    group_t **slots;
    size_t capacity; /* a power of two */
    size_t count;
} group_table_t;

/*
 * GPU time per call, (pid, call id) -> ns: what the GPU records charge to each call (the work it
 * launched itself, not that of the calls inside it). The GPU files are read first, so a call's row
 * finds its GPU time here and takes it to the groups a GPU record cannot name (aggregate.c: the
 * call's step or thread, the modules around it, the forward API its autograd node is charged to).
 * One entry per call that launched GPU work: the memory of this join grows with the run.
 */
typedef struct call_gpu {
    int64_t pid;
    uint64_t call_id; /* 0: an empty slot */
    uint64_t ns;
} call_gpu_t;

typedef struct call_gpu_table {
    call_gpu_t *slots;
    size_t capacity; /* a power of two */
    size_t count;
} call_gpu_table_t;

/* A hash of len bytes of s (seed: to keep apart names of different kinds). Inline, as the next: each
 * row is hashed a few times, by every sink that keeps a table. */
static inline uint64_t report_hash_bytes(const char *s, size_t len, uint64_t seed)
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

/* The hash of a (process, call id) pair: call ids are unique per process only. */
static inline uint64_t report_pid_id_hash(int64_t pid, uint64_t id)
{
    uint64_t h = id * 0x9E3779B97F4A7C15ull ^ (uint64_t)pid * 0xC2B2AE3D27D4EB4Full;
    return h ^ (h >> 31);
}

/* The group with this key (len bytes, copied), created if missing; NULL when out of memory. */
group_t *report_group_get(group_table_t *t, const char *key, size_t len);

/* The groups of t in a new array (NULL when out of memory), in no order; *count their number. */
group_t **report_group_list(const group_table_t *t, size_t *count);

/* Adds ns to call (pid, call_id)'s GPU time (call_id 0: none, the work no call launched); 0 or
 * TW_ENOMEM. */
int report_call_gpu_add(call_gpu_table_t *t, int64_t pid, uint64_t call_id, uint64_t ns);

/* The GPU time of call (pid, call_id): 0 when it launched none, or t is NULL. */
uint64_t report_call_gpu_of(const call_gpu_table_t *t, int64_t pid, uint64_t call_id);

/* Adds from's times to into's; 0 or TW_ENOMEM (some not added). */
int report_call_gpu_merge(call_gpu_table_t *into, const call_gpu_table_t *from);

void report_call_gpu_free(call_gpu_table_t *t);

/* Frees the groups and the table's slots; t is left empty and can be used again. */
void report_group_table_free(group_table_t *t);

#endif
