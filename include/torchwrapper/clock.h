/* SPDX-License-Identifier: MIT */
/*
 * The profiler's clock. The hot path reads raw ticks (tw_clock_ticks); conversion to nanoseconds
 * happens off the hot path with a tw_clock_t calibration, so one read costs what rdtsc costs (~10 ns)
 * rather than what clock_gettime costs (~21 ns on these machines).
 *
 * Ticks are the invariant TSC on x86-64 CPUs that advertise constant_tsc and nonstop_tsc (and when
 * TW_CLOCK is not "monotonic"); everywhere else they are CLOCK_MONOTONIC nanoseconds.
 */
#ifndef TORCHWRAPPER_CLOCK_H
#define TORCHWRAPPER_CLOCK_H

#include <time.h>
#include "torchwrapper/common.h"
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TW_CLOCK_MONOTONIC = 0, /* ticks are CLOCK_MONOTONIC nanoseconds */
    TW_CLOCK_TSC = 1,       /* ticks are invariant-TSC cycles */
} tw_clock_source_t;

/* Conversion from ticks to nanoseconds: ns = epoch_ns_base + ((ticks - ticks_base) * mult) >> shift,
 * computed in 128 bits and rounded. */
typedef struct tw_clock {
    tw_clock_source_t source;
    uint64_t ticks_base;    /* ticks at the anchor */
    int64_t epoch_ns_base;  /* CLOCK_REALTIME nanoseconds at the anchor */
    uint64_t mult;          /* ns per tick, fixed point */
    uint32_t shift;
    double ticks_per_ns;    /* informative: the calibrated frequency in GHz */
} tw_clock_t;

/* Decides the tick source once per process (CPU flags, TW_CLOCK) and returns it. Thread-safe. */
TW_API tw_clock_source_t tw_clock_source(void);

/*
 * Fills *clock with a conversion for the current tick source, anchored now. The first call in a
 * process spins ~5 ms to measure the TSC frequency; later calls refine it over the longer interval
 * since that first measurement, so a long-running process gets an ever more exact frequency.
 * Returns 0 or TW_EINVAL.
 */
TW_API int tw_clock_calibrate(tw_clock_t *clock);

/* A conversion for a given source and frequency, for tests and readers of raw ticks. */
TW_API void tw_clock_init_manual(tw_clock_t *clock, tw_clock_source_t source, uint64_t ticks_base,
                                 int64_t epoch_ns_base, double ticks_per_ns);

static inline uint64_t tw_clock_ticks(tw_clock_source_t source)
{
#if defined(__x86_64__) || defined(__i386__)
    if (TW_LIKELY(source == TW_CLOCK_TSC))
        return __rdtsc();
#else
    (void)source;
#endif
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A duration in ticks, in nanoseconds, rounded to the nearest. */
static inline uint64_t tw_clock_duration_ns(const tw_clock_t *clock, uint64_t ticks)
{
    unsigned __int128 half = (unsigned __int128)1 << (clock->shift - 1);
    return (uint64_t)(((unsigned __int128)ticks * clock->mult + half) >> clock->shift);
}

/* A tick reading, in nanoseconds since the Unix epoch. Monotonic in ticks for a given clock. */
static inline int64_t tw_clock_epoch_ns(const tw_clock_t *clock, uint64_t ticks)
{
    if (ticks >= clock->ticks_base)
        return clock->epoch_ns_base + (int64_t)tw_clock_duration_ns(clock, ticks - clock->ticks_base);
    return clock->epoch_ns_base - (int64_t)tw_clock_duration_ns(clock, clock->ticks_base - ticks);
}

#ifdef __cplusplus
}
#endif
#endif
