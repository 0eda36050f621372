/* SPDX-License-Identifier: MIT */
/*
 * GPU timing with CUPTI's activity API (see gpu.h).
 *
 * Threads: the profiled threads only push and pop external correlation ids (CUPTI's own functions,
 * called through tw_gpu_hooks_t). CUPTI hands activity buffers to on_buffer_completed on its worker
 * thread, or on whichever thread calls cuptiActivityFlushAll: our flush thread, or tw_gpu_stop().
 * Buffers are processed one at a time under deliver_lock, which also guards the correlation ring
 * and the records waiting for their correlation; cupti_records.c turns their records into rows.
 * Rows go where the caller's tw_gpu_rows_t says (the writer's "gpu" stream), thread-safe and never
 * blocking on I/O.
 *
 * Fork: CUDA and CUPTI cannot be used in a forked child; a session started in the parent is
 * recognised by its pid, and its stop makes no CUPTI call there. deliver_lock may have been held by
 * a thread of the parent at the fork: the child never takes it for a parent's session.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "torchwrapper/api.h"
#include "torchwrapper/gpu.h"
#include "clock_internal.h"
#include "cupti_layout.h"
#include "cupti_lib.h"
#include "cupti_records.h"

const char *tw_gpu_library_path(void);

#ifndef TW_HAVE_CUPTI

/* Built without CUPTI headers: say so, once per start, and let the caller profile CPU time. */
int tw_gpu_start(const tw_gpu_config_t *config, const tw_gpu_rows_t *rows, const tw_clock_t *clock, tw_gpu_t **out,
                 char *reason, size_t reason_size)
{
    snprintf(reason, reason_size, "this torchwrapper was built without CUPTI headers (configure found no "
                                  "cupti.h; rebuild with --with-cupti=DIR)");
    return TW_EUNAVAIL;
}

const tw_gpu_hooks_t *tw_gpu_hooks(const tw_gpu_t *gpu)
{
    return NULL;
}

int tw_gpu_flush(tw_gpu_t *gpu, int forced)
{
    return TW_EINVAL;
}

void tw_gpu_stop(tw_gpu_t *gpu)
{
}

int tw_gpu_set_recording(tw_gpu_t *gpu, int on)
{
    return TW_EINVAL;
}

void tw_gpu_destroy(tw_gpu_t *gpu)
{
}

void tw_gpu_stats(tw_gpu_t *gpu, tw_gpu_stats_t *stats)
{
    memset(stats, 0, sizeof *stats);
}

const char *tw_gpu_library_path(void)
{
    return "";
}

#else /* TW_HAVE_CUPTI */

/* ---- the library (cupti_load.c) --------------------------------------------------------------------- */

/* Guards loading the library, and owner below. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the session (its state: cupti_records.h) ------------------------------------------------------ */

static const CUpti_ActivityKind kinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    /* External correlation records are emitted for CUDA API records only, so these are enabled
     * too; their own records are skipped. */
    CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
};
static const char *const kind_labels[] = {"CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "EXTERNAL_CORRELATION",
                                          "RUNTIME", "DRIVER"};
#define KIND_COUNT (sizeof kinds / sizeof kinds[0])

/* The session receiving CUPTI's buffers (its callbacks carry no user data), under deliver_lock. */
static pthread_mutex_t deliver_lock = PTHREAD_MUTEX_INITIALIZER;
static tw_gpu_t *active;
/* The session started and not yet stopped, under load_lock: one at a time. */
static tw_gpu_t *owner;

/* ---- buffers (their records into rows: cupti_records.c) ------------------------------------------- */

static void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream_id, uint8_t *buffer, size_t size,
                                         size_t valid)
{
    size_t dropped = 0;
    if (tw_cupti.dropped_records != NULL && tw_cupti.dropped_records(context, stream_id, &dropped) != CUPTI_SUCCESS)
        dropped = 0;
    pthread_mutex_lock(&deliver_lock);
    tw_gpu_t *g = active;
    if (g != NULL) {
        if (valid > 0)
            tw_cupti_process_buffer(g, buffer, valid);
        if (dropped > 0) {
            g->stats.dropped += dropped;
            g->rows.lost(g->rows.context, dropped);
        }
    }
    pthread_mutex_unlock(&deliver_lock);
    tw_cupti_buffer_release(buffer);
}

/* ---- flushing ------------------------------------------------------------------------------------- */

int tw_gpu_flush(tw_gpu_t *g, int forced)
{
    if (g == NULL || g->stopped || g->pid != getpid())
        return TW_EINVAL;
    CUptiResult r = tw_cupti.flush_all(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
    pthread_mutex_lock(&deliver_lock);
    /* A record parked before the previous flush ended has seen a whole flush (this one) go by
     * without its correlation or its API record (usually the API record says, sooner; this is for
     * API records CUPTI dropped). CUPTI emits both when the CUDA call is made, before its kernel
     * can finish, so none is coming. (A record parked during this flush may still meet its
     * correlation in the next one.) */
    tw_cupti_resolve_pending(g, g->generation);
    g->generation++;
    pthread_mutex_unlock(&deliver_lock);
    return r == CUPTI_SUCCESS ? 0 : TW_EIO;
}

static void *flush_main(void *arg)
{
    tw_gpu_t *g = arg;
    pthread_mutex_lock(&g->thread_lock);
    while (!g->thread_stop) {
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += (time_t)(g->flush_interval_ns / 1000000000u);
        deadline.tv_nsec += (long)(g->flush_interval_ns % 1000000000u);
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000;
        }
        while (!g->thread_stop && pthread_cond_timedwait(&g->thread_cond, &g->thread_lock, &deadline) != ETIMEDOUT)
            ;
        if (g->thread_stop)
            break;
        pthread_mutex_unlock(&g->thread_lock);
        tw_gpu_flush(g, 0);
        pthread_mutex_lock(&g->thread_lock);
    }
    pthread_mutex_unlock(&g->thread_lock);
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------------- */

static int64_t epoch_now(const tw_clock_t *clock)
{
    return tw_clock_epoch_ns(clock, tw_clock_ticks(clock->source));
}

/* CUPTI's timestamps against ours: the reading bracketed most tightly of a few. */
static int calibrate(const tw_clock_t *clock, int64_t *offset)
{
    int64_t best = INT64_MAX;
    for (int i = 0; i < 16; i++) {
        uint64_t t;
        int64_t before = epoch_now(clock);
        if (tw_cupti.timestamp(&t) != CUPTI_SUCCESS)
            return -1;
        int64_t after = epoch_now(clock);
        if (after - before < best) {
            best = after - before;
            *offset = before + (after - before) / 2 - (int64_t)t;
        }
    }
    return 0;
}

static void free_session(tw_gpu_t *g)
{
    tw_cupti_pending_free(g);
    free(g->pending);
    free(g->ring);
    /* In a forked child the parent's flush thread may have been waiting on thread_cond: glibc's
     * pthread_cond_destroy would wait for that waiter, which does not exist here, forever. */
    if (g->pid == 0 || g->pid == getpid()) {
        pthread_mutex_destroy(&g->kinds_lock);
        pthread_mutex_destroy(&g->thread_lock);
        pthread_cond_destroy(&g->thread_cond);
    }
    free(g);
}

/* Undoes what start did with CUPTI, in reverse. */
static void cupti_undo(tw_gpu_t *g)
{
    pthread_mutex_lock(&g->kinds_lock);
    for (size_t i = KIND_COUNT; i-- > 0;)
        if (g->enabled & (1u << i))
            tw_cupti.disable(kinds[i]);
    g->enabled = 0;
    g->paused = 0;
    pthread_mutex_unlock(&g->kinds_lock);
    if (g->subscriber != NULL)
        tw_cupti.unsubscribe(g->subscriber);
    g->subscriber = NULL;
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void *data)
{
    /* Subscribed only to hold CUPTI (so another tool learns it is in use); no domain is enabled. */
}

int tw_gpu_start(const tw_gpu_config_t *config, const tw_gpu_rows_t *rows, const tw_clock_t *clock, tw_gpu_t **out,
                 char *reason, size_t reason_size)
{
    if (config == NULL || rows == NULL || clock == NULL || out == NULL) {
        snprintf(reason, reason_size, "tw_gpu_start: a required argument is NULL");
        return TW_EINVAL;
    }
    *out = NULL;
    reason[0] = '\0';
    pthread_mutex_lock(&load_lock);
    int rc = 0;
    if (owner != NULL) {
        snprintf(reason, reason_size, "another profiling session of this process is timing the GPU");
        rc = TW_EBUSY;
    } else if (tw_cupti.handle != NULL && tw_cupti.pid != getpid()) {
        snprintf(reason, reason_size, "this is a forked child of a process that used CUPTI (CUDA and CUPTI "
                                      "cannot be used after fork; use the spawn start method)");
        rc = TW_EUNAVAIL;
    } else {
        rc = tw_cupti_load(config, reason, reason_size);
    }
    if (rc == 0 && !config->device_available) {
        snprintf(reason, reason_size, "no CUDA device (torch.cuda.is_available() is False)");
        rc = TW_EUNAVAIL;
    }
    tw_gpu_t *g = NULL;
    if (rc == 0) {
        g = calloc(1, sizeof *g);
        if (g != NULL) {
            g->ring = calloc(RING_SIZE, sizeof *g->ring);
            g->pending = malloc(PENDING_MAX * sizeof *g->pending);
            pthread_mutex_init(&g->thread_lock, NULL);
            pthread_mutex_init(&g->kinds_lock, NULL);
            tw_cond_init_monotonic(&g->thread_cond);
        }
        if (g == NULL || g->ring == NULL || g->pending == NULL || tw_cupti_pool_fill() != 0) {
            tw_cupti_pool_close();
            if (g != NULL)
                free_session(g);
            g = NULL;
            snprintf(reason, reason_size, "out of memory");
            rc = TW_ENOMEM;
        }
    }
    if (rc == 0) {
        g->pid = getpid();
        g->rows = *rows;
        g->stats.cupti_version = tw_cupti.version;
        g->flush_interval_ns = config->flush_interval_ns ? config->flush_interval_ns : 1000000000u;
        CUptiResult r = tw_cupti.subscribe(&g->subscriber, on_callback, NULL);
        if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
            g->subscriber = NULL;
            snprintf(reason, reason_size, "another CUPTI client holds CUPTI (torch.profiler, Nsight Systems or "
                                          "Compute, or another profiler): stop it to get GPU times");
            rc = TW_EBUSY;
        } else if (r != CUPTI_SUCCESS) {
            g->subscriber = NULL;
            snprintf(reason, reason_size, "cuptiSubscribe failed: %s%s", tw_cupti_result_text(r), tw_cupti_no_gpu_cause(r));
            rc = TW_EUNAVAIL;
        }
    }
    if (rc == 0 && calibrate(clock, &g->offset_ns) != 0) {
        snprintf(reason, reason_size, "cuptiGetTimestamp failed");
        rc = TW_EUNAVAIL;
    }
    if (rc == 0) {
        CUptiResult r = tw_cupti.register_callbacks(tw_cupti_buffer_requested, on_buffer_completed);
        if (r != CUPTI_SUCCESS) {
            snprintf(reason, reason_size, "cuptiActivityRegisterCallbacks failed: %s", tw_cupti_result_text(r));
            rc = TW_EUNAVAIL;
        }
    }
    for (size_t i = 0; rc == 0 && i < KIND_COUNT; i++) {
        CUptiResult r = tw_cupti.enable(kinds[i]);
        if (r == CUPTI_SUCCESS) {
            g->enabled |= 1u << i;
        } else if (kinds[i] != CUPTI_ACTIVITY_KIND_DRIVER) { /* the driver API's records are a bonus */
            snprintf(reason, reason_size, "cuptiActivityEnable(%s) failed: %s%s", kind_labels[i], tw_cupti_result_text(r),
                     tw_cupti_no_gpu_cause(r));
            rc = TW_EUNAVAIL;
        }
    }
    if (rc == 0) {
        const char *header = g->rows.format == TW_FORMAT_CSV
                                 ? "call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid,"
                                   "launch_start_ns,launch_end_ns,launch"
                                 : NULL;
        int src = g->rows.open(g->rows.context, header);
        if (src != 0) {
            snprintf(reason, reason_size, "cannot open the gpu record stream: %s", tw_strerror(src));
            rc = src;
        }
    }
    if (rc == 0) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old); /* signals are for the program's threads */
        int err = pthread_create(&g->thread, NULL, flush_main, g);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (err != 0) {
            snprintf(reason, reason_size, "cannot start the GPU flush thread: %s", strerror(err));
            rc = -err; /* the real reason (EAGAIN, EPERM, ...), not ENOMEM: codes are -errno values */
        } else {
            g->thread_running = 1;
        }
    }
    if (rc != 0) {
        if (g != NULL) {
            cupti_undo(g);
            free_session(g);
            tw_cupti_pool_close();
        }
        pthread_mutex_unlock(&load_lock);
        return rc;
    }
    owner = g;
    pthread_mutex_unlock(&load_lock);
    pthread_mutex_lock(&deliver_lock);
    active = g;
    pthread_mutex_unlock(&deliver_lock);
    *out = g;
    return 0;
}

const tw_gpu_hooks_t *tw_gpu_hooks(const tw_gpu_t *g)
{
    return g != NULL ? &tw_cupti_hooks : NULL;
}

void tw_gpu_stop(tw_gpu_t *g)
{
    if (g == NULL || g->stopped)
        return;
    if (g->pid != getpid()) {
        /* A forked child: no CUPTI, no flush thread, and the locks may be held by threads that are
         * not here. The parent's records are the parent's to write. */
        g->stopped = 1;
        active = NULL;
        owner = NULL;
        return;
    }
    if (g->thread_running) {
        pthread_mutex_lock(&g->thread_lock);
        g->thread_stop = 1;
        pthread_cond_signal(&g->thread_cond);
        pthread_mutex_unlock(&g->thread_lock);
        pthread_join(g->thread, NULL);
        g->thread_running = 0;
    }
    g->stopped = 1; /* after the join: the flush thread reads it in tw_gpu_flush */
    /* Everything CUPTI holds, kernels still running included (end 0); then nothing new, and what
     * was recorded meanwhile. */
    tw_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    cupti_undo(g);
    tw_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&deliver_lock);
    tw_cupti_resolve_pending(g, UINT64_MAX); /* what waits for a correlation gets none now */
    active = NULL;
    pthread_mutex_unlock(&deliver_lock);
    tw_cupti_pool_close();
    pthread_mutex_lock(&load_lock);
    owner = NULL;
    pthread_mutex_unlock(&load_lock);
}

int tw_gpu_set_recording(tw_gpu_t *g, int on)
{
    if (g == NULL || g->stopped || g->pid != getpid())
        return 0;
    int rc = 0, paused = 0;
    pthread_mutex_lock(&g->kinds_lock);
    if (on && g->paused != 0) {
        /* in start's order: the external correlations before the API records they belong to */
        for (size_t i = 0; i < KIND_COUNT; i++) {
            if (!(g->paused & (1u << i)))
                continue;
            if (tw_cupti.enable(kinds[i]) == CUPTI_SUCCESS) {
                g->enabled |= 1u << i;
                g->paused &= ~(1u << i);
            } else {
                rc = TW_EIO;
            }
        }
    } else if (!on && g->enabled != 0) {
        for (size_t i = KIND_COUNT; i-- > 0;)
            if (g->enabled & (1u << i))
                tw_cupti.disable(kinds[i]);
        g->paused |= g->enabled;
        g->enabled = 0;
        paused = 1;
    }
    pthread_mutex_unlock(&g->kinds_lock);
    if (paused) {
        pthread_mutex_lock(&deliver_lock); /* the stats' lock */
        g->stats.pauses++;
        pthread_mutex_unlock(&deliver_lock);
    }
    return rc;
}

void tw_gpu_destroy(tw_gpu_t *g)
{
    if (g == NULL)
        return;
    tw_gpu_stop(g);
    free_session(g);
}

void tw_gpu_stats(tw_gpu_t *g, tw_gpu_stats_t *stats)
{
    if (g->pid == getpid() && !g->stopped) {
        pthread_mutex_lock(&deliver_lock);
        *stats = g->stats;
        pthread_mutex_unlock(&deliver_lock);
    } else {
        *stats = g->stats;
    }
}

#endif /* TW_HAVE_CUPTI */
