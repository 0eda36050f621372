/* SPDX-License-Identifier: MIT */
/*
 * CUPTI's activity records into rows (cupti_records.c; not public API): a GPU timing session's state
 * (struct tw_gpu), shared with cupti.c, which starts, flushes and stops it, and what turns the
 * buffers CUPTI completes into rows (tw_gpu_rows_t, the writer's "gpu" stream), each attributed to the profiled
 * call that launched its work through the external correlation ids. Only built with CUPTI headers.
 */
#ifndef TW_CUPTI_RECORDS_H
#define TW_CUPTI_RECORDS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cupti.h>

#include "torchwrapper/gpu.h"

#define RING_SIZE (1u << 16)    /* external correlations remembered: the last 65,536 CUDA API calls */
#define PENDING_MAX (1u << 16)  /* records waiting for their correlation */
#define NAME_MAX_BYTES 512      /* of a kernel name in a row */

/* What is known of a CUDA API call's correlation id. CUPTI writes a call's external correlation
 * record before the call's own (runtime or driver API) record, so once the API record is seen
 * without one, none is coming: work of that call was launched outside any profiled call. */
enum { RING_EMPTY = 0, RING_EXTERNAL = 1, RING_NONE = 2 };

typedef struct {
    uint32_t correlation_id;
    uint32_t state; /* RING_* */
    uint64_t external_id;
    uint64_t launch; /* when the CUDA call began, in CUPTI's clock (its API record); 0: not known */
    uint64_t launch_end;   /* and ended */
    uint32_t launch_kind;  /* CUPTI_ACTIVITY_KIND_RUNTIME or _DRIVER: its API; 0: not known */
    uint32_t launch_cbid;  /* its callback id in that API */
} ring_entry_t;

/* A GPU record whose external correlation has not arrived yet. */
typedef struct {
    uint8_t kind; /* 0 kernel, 1 memcpy, 2 memset */
    uint32_t device;
    uint32_t stream;
    uint32_t correlation_id;
    uint64_t start;
    uint64_t end;
    uint64_t generation;
    char *name;
} pending_t;

struct tw_gpu {
    tw_gpu_rows_t rows;  /* where the rows go (the caller's, copied) */
    int64_t offset_ns;   /* epoch ns = CUPTI timestamp + offset_ns */
    pid_t pid;
    int stopped;
    CUpti_SubscriberHandle subscriber;
    unsigned enabled;    /* bit i: kinds[i] enabled (under kinds_lock once started) */
    unsigned paused;     /* the kinds disabled by tw_gpu_set_recording(0), to enable again */
    pthread_mutex_t kinds_lock;
    /* guarded by deliver_lock */
    ring_entry_t *ring;
    pending_t *pending;  /* a FIFO ring of PENDING_MAX: oldest at pending_head */
    size_t pending_head;
    size_t pending_count;
    uint64_t generation;
    tw_gpu_stats_t stats;
    /* the flush thread */
    pthread_mutex_t thread_lock;
    pthread_cond_t thread_cond;
    pthread_t thread;
    int thread_running;
    int thread_stop;
    uint64_t flush_interval_ns;
};

/* The records of one completed buffer into rows (or parked until their correlation comes). Under
 * cupti.c's deliver_lock, as every function here. */
void tw_cupti_process_buffer(tw_gpu_t *g, uint8_t *buffer, size_t valid);

/* Writes the waiting records whose correlation is now known, and those parked before generation
 * all_older_than as unattributed; the others keep their order. */
void tw_cupti_resolve_pending(tw_gpu_t *g, uint64_t all_older_than);

/* Frees the names of the records still waiting (a session freed). */
void tw_cupti_pending_free(tw_gpu_t *g);

#endif
