/* SPDX-License-Identifier: MIT */
/* Per-API totals' parts (stats.h; not public API): the writer's GPU rows and tw-report's groups call
 * them, nothing outside the library does. */
#ifndef TW_STATS_INTERNAL_H
#define TW_STATS_INTERNAL_H

#include <stdint.h>

#include "torchwrapper/stats.h"

/* Adds GPU time to an API's total without counting a call: GPU records arrive on their own, after
 * the call's record (see gpu.h). Never fails, like tw_stats_add(). */
void tw_stats_add_gpu(tw_stats_t *stats, uint32_t api_id, uint64_t gpu_ns);

/* Counts one call in a: 0, or TW_ENOMEM when its histogram cannot be allocated (nothing counted). */
int tw_api_stats_add(tw_api_stats_t *a, uint64_t cost_ns, uint64_t self_ns, uint64_t gpu_ns, int error);

/* Adds from's calls to into's (counts, sums, min, max, histogram: exactly what counting them in
 * into would give, percentiles included): 0, or TW_ENOMEM when into's histogram cannot be allocated
 * (nothing added). from is left as it was. */
int tw_api_stats_merge(tw_api_stats_t *into, const tw_api_stats_t *from);

#endif
