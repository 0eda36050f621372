/* SPDX-License-Identifier: MIT */
/*
 * Per-API totals: calls, errors, total, self and GPU time, min, max, and a log-linear histogram of
 * call costs from which percentiles are read within 1% (64 buckets per power of two; exact below
 * 128 ns). Memory is bounded: one entry per API id, a histogram (11.5 KiB) only for APIs called.
 * Not thread-safe: the writer thread owns it.
 */
#ifndef TORCHWRAPPER_STATS_H
#define TORCHWRAPPER_STATS_H

#include "torchwrapper/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tw_api_stats {
    uint64_t calls;
    uint64_t errors;
    uint64_t total_ns;
    uint64_t self_ns;
    uint64_t gpu_ns;
    uint64_t min_ns;
    uint64_t max_ns;
    uint32_t *histogram; /* NULL until the first call */
} tw_api_stats_t;

typedef struct tw_stats {
    tw_api_stats_t *apis; /* indexed by API id */
    uint32_t capacity;
    uint64_t dropped;     /* calls not counted for lack of memory */
} tw_stats_t;

TW_API void tw_stats_init(tw_stats_t *stats);
TW_API void tw_stats_free(tw_stats_t *stats);

/* Counts one call. Never fails: a call that cannot be counted (no memory) is counted in dropped. */
TW_API void tw_stats_add(tw_stats_t *stats, uint32_t api_id, uint64_t cost_ns, uint64_t self_ns, uint64_t gpu_ns,
                         int error);

/* The cost below which a fraction q (0..1) of the API's calls fall, within 1%; 0 without calls. */
TW_API uint64_t tw_stats_percentile(const tw_api_stats_t *api, double q);

#ifdef __cplusplus
}
#endif
#endif
