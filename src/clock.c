/* SPDX-License-Identifier: MIT */
/*
 * Tick source selection and calibration. The TSC frequency is measured against CLOCK_MONOTONIC (the
 * kernel's own TSC-derived clock, NTP-disciplined) and anchored to CLOCK_REALTIME, so converted
 * timestamps are nanoseconds since the epoch that agree with other processes on the machine.
 */
#include "config.h"
#include "torchwrapper/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ns = (ticks * mult) >> shift in 128 bits: a large shift keeps mult's rounding error near 1e-16. */
#define TW_CLOCK_SHIFT_FINE 62
#define TW_CLOCK_SHIFT_COARSE 32 /* for clocks slower than 0.5 tick per ns, so that mult fits */
#define TW_CALIBRATION_NS 5000000ull /* first measurement of the TSC frequency: 5 ms */

static pthread_once_t source_once = PTHREAD_ONCE_INIT;
static tw_clock_source_t source_chosen = TW_CLOCK_MONOTONIC;

/* First frequency anchor of the process (ticks, CLOCK_MONOTONIC ns), for later refinement. */
static pthread_mutex_t calibration_lock = PTHREAD_MUTEX_INITIALIZER;
static int have_first_anchor;
static uint64_t first_anchor_ticks;
static uint64_t first_anchor_ns;
static double first_ticks_per_ns;

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__) || defined(__i386__)
/* Invariant TSC: the kernel says so with both flags (it also checks cross-CPU sync before using it). */
static int cpu_has_invariant_tsc(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return 0;
    char line[8192];
    int found = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "flags", 5) == 0) {
            found = strstr(line, " constant_tsc") != NULL && strstr(line, " nonstop_tsc") != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}
#endif

static void choose_source(void)
{
    const char *env = getenv("TW_CLOCK");
    if (env != NULL && strcmp(env, "monotonic") == 0) {
        source_chosen = TW_CLOCK_MONOTONIC;
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    if ((env != NULL && strcmp(env, "tsc") == 0) || cpu_has_invariant_tsc())
        source_chosen = TW_CLOCK_TSC;
#endif
}

tw_clock_source_t tw_clock_source(void)
{
    pthread_once(&source_once, choose_source);
    return source_chosen;
}

/*
 * Reads ticks and another clock as close together as possible: the pair from the tightest of a few
 * tries, with the other clock taken as the midpoint of the two reads around the tick read.
 */
static void read_pair(tw_clock_source_t source, clockid_t other, uint64_t *ticks, uint64_t *ns)
{
    uint64_t best_gap = UINT64_MAX;
    for (int i = 0; i < 7; i++) {
        uint64_t before = clock_ns(other);
        uint64_t t = tw_clock_ticks(source);
        uint64_t after = clock_ns(other);
        if (after - before < best_gap) {
            best_gap = after - before;
            *ticks = t;
            *ns = before + (after - before) / 2;
        }
    }
}

void tw_clock_init_manual(tw_clock_t *clock, tw_clock_source_t source, uint64_t ticks_base,
                          int64_t epoch_ns_base, double ticks_per_ns)
{
    clock->source = source;
    clock->ticks_base = ticks_base;
    clock->epoch_ns_base = epoch_ns_base;
    clock->ticks_per_ns = ticks_per_ns;
    clock->shift = ticks_per_ns >= 0.5 ? TW_CLOCK_SHIFT_FINE : TW_CLOCK_SHIFT_COARSE;
    clock->mult = (uint64_t)((double)(1ull << clock->shift) / ticks_per_ns + 0.5);
}

static double measure_ticks_per_ns(tw_clock_source_t source)
{
    uint64_t t0, n0, t1, n1;
    pthread_mutex_lock(&calibration_lock);
    if (!have_first_anchor) {
        read_pair(source, CLOCK_MONOTONIC, &t0, &n0);
        do
            read_pair(source, CLOCK_MONOTONIC, &t1, &n1);
        while (n1 - n0 < TW_CALIBRATION_NS);
        first_anchor_ticks = t0;
        first_anchor_ns = n0;
        first_ticks_per_ns = (double)(t1 - t0) / (double)(n1 - n0);
        have_first_anchor = 1;
    } else {
        /* Refine over the whole interval since the first anchor: the error of the two reads is
         * divided by an interval that grows with the life of the process. */
        read_pair(source, CLOCK_MONOTONIC, &t1, &n1);
        if (n1 - first_anchor_ns > TW_CALIBRATION_NS && t1 > first_anchor_ticks)
            first_ticks_per_ns = (double)(t1 - first_anchor_ticks) / (double)(n1 - first_anchor_ns);
    }
    double result = first_ticks_per_ns;
    pthread_mutex_unlock(&calibration_lock);
    return result;
}

/*
 * TORCHWRAPPER_DEBUG_CLOCK_OFFSET_NS: nanoseconds added to every time this process records, for
 * tests of the alignment of ranks' clocks (a host whose clock is off, planted on one machine). Read
 * at each calibration; a value that is not a whole number is ignored.
 */
static int64_t debug_offset_ns(void)
{
    const char *text = getenv("TORCHWRAPPER_DEBUG_CLOCK_OFFSET_NS");
    if (text == NULL || *text == '\0')
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    return errno == 0 && *end == '\0' ? (int64_t)v : 0;
}

int tw_clock_calibrate(tw_clock_t *clock)
{
    if (clock == NULL)
        return TW_EINVAL;
    tw_clock_source_t source = tw_clock_source();
    double ticks_per_ns = source == TW_CLOCK_TSC ? measure_ticks_per_ns(source) : 1.0;
    uint64_t ticks, epoch_ns;
    read_pair(source, CLOCK_REALTIME, &ticks, &epoch_ns);
    tw_clock_init_manual(clock, source, ticks, (int64_t)epoch_ns + debug_offset_ns(), ticks_per_ns);
    return 0;
}
