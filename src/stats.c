/* SPDX-License-Identifier: MIT */
/* Per-API totals (calls, errors, total, self and GPU time, min, max) and percentiles from a log-linear
 * histogram of 64 buckets per power of two, in bounded memory. See stats.h. */
#include "config.h"
#include "torchwrapper/stats.h"

#include <stdlib.h>
#include <string.h>

#include "stats_internal.h"

#define SUB_BITS 6                     /* 64 buckets per power of two: width <= 1/64 of the value */
#define SUB (1u << SUB_BITS)
#define LINEAR 128                     /* values below are counted exactly */
#define MAX_EXP 50                     /* 2^51 ns is 26 days: larger values share the last bucket */
#define BUCKETS (LINEAR + (MAX_EXP - 7 + 1) * SUB)

static uint32_t bucket_of(uint64_t v)
{
    if (v < LINEAR)
        return (uint32_t)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 7 */
    if (e > MAX_EXP)
        return BUCKETS - 1;
    return LINEAR + (e - 7) * SUB + (uint32_t)((v >> (e - SUB_BITS)) & (SUB - 1));
}

/* The smallest value of bucket b, and its width. */
static void bucket_range(uint32_t b, uint64_t *low, uint64_t *width)
{
    if (b < LINEAR) {
        *low = b;
        *width = 1;
        return;
    }
    unsigned e = 7 + (b - LINEAR) / SUB;
    uint64_t sub = (b - LINEAR) % SUB;
    *width = 1ull << (e - SUB_BITS);
    *low = (1ull << e) + sub * *width;
}

void tw_stats_init(tw_stats_t *stats)
{
    memset(stats, 0, sizeof *stats);
}

void tw_stats_free(tw_stats_t *stats)
{
    for (uint32_t i = 0; i < stats->capacity; i++)
        free(stats->apis[i].histogram);
    free(stats->apis);
    memset(stats, 0, sizeof *stats);
}

/* The entry of api_id, the table grown to hold it; NULL when out of memory. */
static tw_api_stats_t *entry(tw_stats_t *stats, uint32_t api_id)
{
    if (api_id >= stats->capacity) {
        uint32_t capacity = stats->capacity ? stats->capacity : 1024;
        while (capacity <= api_id && capacity < (1u << 30))
            capacity *= 2;
        tw_api_stats_t *apis = capacity > api_id ? realloc(stats->apis, capacity * sizeof *apis) : NULL;
        if (apis == NULL)
            return NULL;
        memset(apis + stats->capacity, 0, (capacity - stats->capacity) * sizeof *apis);
        stats->apis = apis;
        stats->capacity = capacity;
    }
    return &stats->apis[api_id];
}

void tw_stats_add_gpu(tw_stats_t *stats, uint32_t api_id, uint64_t gpu_ns)
{
    tw_api_stats_t *a = entry(stats, api_id);
    if (a == NULL) {
        stats->dropped++;
        return;
    }
    a->gpu_ns += gpu_ns;
}

void tw_stats_add(tw_stats_t *stats, uint32_t api_id, uint64_t cost_ns, uint64_t self_ns, uint64_t gpu_ns, int error)
{
    tw_api_stats_t *a = entry(stats, api_id);
    if (a == NULL || tw_api_stats_add(a, cost_ns, self_ns, gpu_ns, error) != 0)
        stats->dropped++;
}

int tw_api_stats_add(tw_api_stats_t *a, uint64_t cost_ns, uint64_t self_ns, uint64_t gpu_ns, int error)
{
    if (a->histogram == NULL && (a->histogram = calloc(BUCKETS, sizeof *a->histogram)) == NULL)
        return TW_ENOMEM;
    if (a->calls == 0 || cost_ns < a->min_ns)
        a->min_ns = cost_ns;
    if (cost_ns > a->max_ns)
        a->max_ns = cost_ns;
    a->calls++;
    a->errors += error != 0;
    a->total_ns += cost_ns;
    a->self_ns += self_ns;
    a->gpu_ns += gpu_ns;
    uint32_t *slot = &a->histogram[bucket_of(cost_ns)];
    if (*slot != UINT32_MAX) /* saturate rather than wrap */
        (*slot)++;
    return 0;
}

int tw_api_stats_merge(tw_api_stats_t *into, const tw_api_stats_t *from)
{
    if (from->histogram != NULL && into->histogram == NULL &&
        (into->histogram = calloc(BUCKETS, sizeof *into->histogram)) == NULL)
        return TW_ENOMEM;
    if (from->calls > 0) {
        if (into->calls == 0 || from->min_ns < into->min_ns)
            into->min_ns = from->min_ns;
        if (from->max_ns > into->max_ns)
            into->max_ns = from->max_ns;
    }
    into->calls += from->calls;
    into->errors += from->errors;
    into->total_ns += from->total_ns;
    into->self_ns += from->self_ns;
    into->gpu_ns += from->gpu_ns;
    for (uint32_t b = 0; from->histogram != NULL && b < BUCKETS; b++) {
        /* Saturating as tw_api_stats_add does: min(a, MAX) + min(b, MAX) saturated is min(a + b, MAX). */
        uint64_t sum = (uint64_t)into->histogram[b] + from->histogram[b];
        into->histogram[b] = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
    }
    return 0;
}

uint64_t tw_stats_percentile(const tw_api_stats_t *a, double q)
{
    if (a == NULL || a->calls == 0 || a->histogram == NULL)
        return 0;
    if (q <= 0)
        return a->min_ns;
    if (q >= 1)
        return a->max_ns;
    /* Every call lies between min and max: only their buckets are read (summary.json, rewritten
     * every flush interval, reads three percentiles of every API: a few hundred buckets each
     * instead of 2,944 twice). */
    uint32_t first = bucket_of(a->min_ns), last = bucket_of(a->max_ns);
    uint64_t counted = 0;
    for (uint32_t b = first; b <= last; b++)
        counted += a->histogram[b];
    /* Nearest rank: the smallest value with at least ceil(q * n) values at or below it. */
    uint64_t rank = (uint64_t)(q * (double)counted);
    if ((double)rank < q * (double)counted)
        rank++;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (uint32_t b = first; b <= last; b++) {
        seen += a->histogram[b];
        if (seen >= rank) {
            uint64_t low, width;
            bucket_range(b, &low, &width);
            uint64_t mid = low + width / 2;
            if (mid < a->min_ns)
                mid = a->min_ns;
            if (mid > a->max_ns)
                mid = a->max_ns;
            return mid;
        }
    }
    return a->max_ns;
}
