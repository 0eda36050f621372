/* SPDX-License-Identifier: MIT */
/* The clock's part the library shares (not public API): condition variables whose timed waits run on
 * CLOCK_MONOTONIC, the clock that flush intervals and deadlines are measured on. */
#ifndef TW_CLOCK_INTERNAL_H
#define TW_CLOCK_INTERNAL_H

#include <pthread.h>
#include <time.h>

/* pthread_cond_init for waits with CLOCK_MONOTONIC deadlines (the default, CLOCK_REALTIME, makes
 * every such wait return at once: the waiting thread spins). */
static inline void tw_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

#endif
