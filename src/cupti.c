/* SPDX-License-Identifier: MIT */
/*
 * GPU timing with CUPTI's activity API (see gpu.h).
 *
 * Threads: the profiled threads only push and pop external correlation ids (CUPTI's own functions,
 * called through tw_gpu_hooks_t). CUPTI hands activity buffers to on_buffer_completed on its worker
 * thread, or on whichever thread calls cuptiActivityFlushAll: our flush thread, or tw_gpu_stop().
 * Buffers are processed one at a time under deliver_lock, which also guards the correlation ring
 * and the records waiting for their correlation. Rows go to the writer's "gpu" stream, which is
 * thread-safe and never blocks on I/O.
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
#include "format.h"
#include "torchwrapper/queue.h"
#include "queue_internal.h"
#include "writer_producer.h"
#include "cupti_layout.h"
#include "cupti_lib.h"
#include "demangle.h"

const char *tw_gpu_library_path(void);

#ifndef TW_HAVE_CUPTI

/* Built without CUPTI headers: say so, once per start, and let the caller profile CPU time. */
int tw_gpu_start(const tw_gpu_config_t *config, tw_writer_t *writer, const tw_clock_t *clock, tw_gpu_t **out,
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


#define RING_SIZE (1u << 16)    /* external correlations remembered: the last 65,536 CUDA API calls */
#define PENDING_MAX (1u << 16)  /* records waiting for their correlation */
#define NAME_MAX_BYTES 512      /* of a kernel name in a row */

/* ---- the library (cupti_load.c) --------------------------------------------------------------------- */

/* Guards loading the library, and owner below. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the session ------------------------------------------------------------------------------------ */

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

static const char *const kind_names[] = {"kernel", "memcpy", "memset"};

struct tw_gpu {
    tw_writer_stream_t *stream;
    tw_format_t format;
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

/* ---- rows ----------------------------------------------------------------------------------------- */

/* The name of the CUDA call of an API record, as torch.profiler's trace names it (HTA's kernel launch
 * statistics look for cudaLaunchKernel, cudaMemcpyAsync, ...): the calls that put work on the GPU,
 * the API version suffixes left out; another call by its domain and callback id. */
static const char *launch_name(uint32_t kind, uint32_t cbid, char *other, size_t other_size)
{
    if (kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
        switch (cbid) {
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000: return "cudaLaunchKernel";
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060: return "cudaLaunchKernelExC";
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000: return "cudaLaunchCooperativeKernel";
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000: return "cudaMemcpyAsync";
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020: return "cudaMemcpy";
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020: return "cudaMemcpy2DAsync";
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000: return "cudaMemsetAsync";
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020: return "cudaMemset";
        case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
        case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000: return "cudaGraphLaunch";
        default: break;
        }
    } else {
        switch (cbid) {
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: return "cuLaunchKernel";
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: return "cuLaunchKernelEx";
        case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync:
        case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz: return "cuMemcpyAsync";
        default: break;
        }
    }
    snprintf(other, other_size, "%s (cbid %u)", kind == CUPTI_ACTIVITY_KIND_RUNTIME ? "cuda_runtime" : "cuda_driver",
             cbid);
    return other;
}

static int64_t to_epoch(const tw_gpu_t *g, uint64_t t)
{
    return t == 0 ? 0 : (int64_t)t + g->offset_ns;
}

/* Formats and queues one GPU row. deliver_lock held. */
static void emit(tw_gpu_t *g, unsigned kind, const char *name, uint64_t start, uint64_t end, uint32_t device,
                 uint32_t stream, uint32_t correlation_id, const ring_entry_t *e)
{
    int attributed = e != NULL && e->state == RING_EXTERNAL;
    uint64_t external_id = attributed ? e->external_id : 0;
    /* The row's step is the step of its launch (the CPU runs ahead of the GPU: a kernel launched at
     * the end of a step often runs in the next); without the launch's time, the kernel's start. */
    uint64_t launch = e != NULL && e->launch != 0 ? e->launch : start;
    uint64_t step = launch != 0 ? tw_writer_step_at(tw_writer_stream_writer(g->stream), to_epoch(g, launch))
                                : TW_STEP_NOW;
    uint64_t call_id = attributed ? tw_gpu_external_call_id(external_id) : 0;
    uint32_t api_id = attributed ? tw_gpu_external_api_id(external_id) : TW_API_ID_NONE;
    const char *api = attributed ? tw_api_name(api_id) : NULL;
    if (api == NULL) {
        api = "";
        api_id = TW_API_ID_NONE;
    }
    char demangled[NAME_MAX_BYTES + 1];
    if (kind == 0 && tw_demangle(name, demangled, sizeof demangled))
        name = demangled;
    if (name == NULL)
        name = kind_names[kind];
    size_t name_len = tw_utf8_cut(name, strlen(name), NAME_MAX_BYTES);
    size_t api_len = strnlen(api, TW_API_NAME_MAX);
    int64_t start_ns = to_epoch(g, start), end_ns = end != 0 ? to_epoch(g, end) : 0;
    uint64_t duration = end > start && start != 0 ? end - start : 0;
    /* the CUDA call that launched it (tw-report's trace draws it as torch.profiler does) */
    int known = e != NULL && e->launch != 0 && e->launch_kind != 0;
    int64_t launch_start = known ? to_epoch(g, e->launch) : 0;
    int64_t launch_end = known && e->launch_end >= e->launch ? to_epoch(g, e->launch_end) : launch_start;
    char other[48];
    const char *launch_text = known ? launch_name(e->launch_kind, e->launch_cbid, other, sizeof other) : "";
    char row[6 * (NAME_MAX_BYTES + TW_API_NAME_MAX) + 640];
    for (int attempt = 0; attempt < 2; attempt++) {
        char *p = row;
        if (g->format == TW_FORMAT_CSV) {
            p = tw_format_u64(p, call_id);
            *p++ = ',';
            p = tw_csv_field(p, api, api_len);
            *p++ = ',';
            p = stpcpy(p, kind_names[kind]);
            *p++ = ',';
            p = tw_csv_field(p, name, name_len);
            *p++ = ',';
            p = tw_format_i64(p, start_ns);
            *p++ = ',';
            p = tw_format_i64(p, end_ns);
            *p++ = ',';
            p = tw_format_u64(p, device);
            *p++ = ',';
            p = tw_format_u64(p, stream);
            *p++ = ',';
            p = tw_format_u64(p, correlation_id);
            *p++ = ',';
            p = tw_format_i64(p, g->pid);
            *p++ = ',';
            p = tw_format_i64(p, launch_start);
            *p++ = ',';
            p = tw_format_i64(p, launch_end);
            *p++ = ',';
            p = stpcpy(p, launch_text); /* a name of launch_name's: no comma, quote or line break */
        } else {
            p = stpcpy(p, "{\"call_id\":");
            p = tw_format_u64(p, call_id);
            p = stpcpy(p, ",\"api\":");
            p = tw_json_escape(p, api, api_len);
            p = stpcpy(p, ",\"kind\":\"");
            p = stpcpy(p, kind_names[kind]);
            p = stpcpy(p, "\",\"name\":");
            p = tw_json_escape(p, name, name_len);
            p = stpcpy(p, ",\"start_ns\":");
            p = tw_format_i64(p, start_ns);
            p = stpcpy(p, ",\"end_ns\":");
            p = tw_format_i64(p, end_ns);
            p = stpcpy(p, ",\"device\":");
            p = tw_format_u64(p, device);
            p = stpcpy(p, ",\"stream\":");
            p = tw_format_u64(p, stream);
            p = stpcpy(p, ",\"correlation_id\":");
            p = tw_format_u64(p, correlation_id);
            p = stpcpy(p, ",\"pid\":");
            p = tw_format_i64(p, g->pid);
            p = stpcpy(p, ",\"launch_start_ns\":");
            p = tw_format_i64(p, launch_start);
            p = stpcpy(p, ",\"launch_end_ns\":");
            p = tw_format_i64(p, launch_end);
            p = stpcpy(p, ",\"launch\":\"");
            p = stpcpy(p, launch_text);
            *p++ = '"';
            *p++ = '}';
        }
        *p++ = '\n';
        tw_stream_row_t r = {row, (size_t)(p - row), step, api_id, duration};
        int rc = tw_writer_stream_put(g->stream, &r);
        if (rc == TW_EINVAL && attempt == 0 && name_len > 64) {
            name_len = tw_utf8_cut(name, name_len, 64); /* too long for a small file_max_size: shorter */
            continue;
        }
        if (rc != 0) {
            g->stats.dropped++;
        } else {
            uint64_t *count = kind == 0 ? &g->stats.kernels : kind == 1 ? &g->stats.memcpys : &g->stats.memsets;
            (*count)++;
            g->stats.unattributed += !attributed;
            g->stats.incomplete += end == 0;
        }
        break;
    }
}

static const char *memcpy_name(uint8_t copy_kind)
{
    switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "memcpy HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "memcpy AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "memcpy AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "memcpy AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "memcpy DtoA";
    default: return "memcpy";
    }
}

static ring_entry_t *ring_find(tw_gpu_t *g, uint32_t correlation_id)
{
    ring_entry_t *e = &g->ring[correlation_id % RING_SIZE];
    return e->state != RING_EMPTY && e->correlation_id == correlation_id ? e : NULL;
}

static pending_t *pending_at(tw_gpu_t *g, size_t i)
{
    return &g->pending[(g->pending_head + i) % PENDING_MAX];
}

static void emit_pending(tw_gpu_t *g, pending_t *p, const ring_entry_t *e)
{
    emit(g, p->kind, p->name, p->start, p->end, p->device, p->stream, p->correlation_id, e);
    free(p->name);
}

/* A record whose correlation is not known yet: kept until it is, or for a while (tw_gpu_flush). */
static void park(tw_gpu_t *g, unsigned kind, const char *name, uint64_t start, uint64_t end, uint32_t device,
                 uint32_t stream, uint32_t correlation_id)
{
    if (g->pending_count == PENDING_MAX) { /* bounded: the oldest waits no longer */
        emit_pending(g, pending_at(g, 0), NULL);
        g->pending_head = (g->pending_head + 1) % PENDING_MAX;
        g->pending_count--;
    }
    char *copy = name != NULL ? strndup(name, 4 * NAME_MAX_BYTES) : NULL;
    *pending_at(g, g->pending_count++) =
        (pending_t){(uint8_t)kind, device, stream, correlation_id, start, end, g->generation, copy};
}

/* Writes the waiting records whose correlation is now known, and those parked before generation
 * all_older_than as unattributed; the others keep their order. */
static void resolve_pending(tw_gpu_t *g, uint64_t all_older_than)
{
    size_t kept = 0;
    for (size_t i = 0; i < g->pending_count; i++) {
        pending_t *p = pending_at(g, i);
        ring_entry_t *e = ring_find(g, p->correlation_id);
        if (e != NULL || p->generation < all_older_than)
            emit_pending(g, p, e);
        else
            *pending_at(g, kept++) = *p;
    }
    g->pending_count = kept;
}

/* One activity record of a GPU kind. */
static void handle_record(tw_gpu_t *g, const CUpti_Activity *record)
{
    unsigned kind;
    const char *name;
    uint64_t start, end;
    uint32_t device, stream, correlation_id;
    /* Only fields present since the oldest supported layouts are read: CUPTI's record versions only
     * ever add fields at the end, so these offsets hold for newer libraries too. */
    switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel4 *k = (const CUpti_ActivityKernel4 *)record;
        kind = 0, name = k->name, start = k->start, end = k->end;
        device = k->deviceId, stream = k->streamId, correlation_id = k->correlationId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy5 *m = (const CUpti_ActivityMemcpy5 *)record;
        kind = 1, name = memcpy_name(m->copyKind), start = m->start, end = m->end;
        device = m->deviceId, stream = m->streamId, correlation_id = m->correlationId;
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset3 *m = (const CUpti_ActivityMemset3 *)record;
        kind = 2, name = "memset", start = m->start, end = m->end;
        device = m->deviceId, stream = m->streamId, correlation_id = m->correlationId;
        break;
    }
    default:
        return;
    }
    ring_entry_t *e = ring_find(g, correlation_id);
    if (e != NULL)
        emit(g, kind, name, start, end, device, stream, correlation_id, e);
    else
        park(g, kind, name, start, end, device, stream, correlation_id);
}

/* One completed buffer. deliver_lock held. */
static void process_buffer(tw_gpu_t *g, uint8_t *buffer, size_t valid)
{
    /* Correlations first, so that a kernel and the correlation of its launch in the same buffer
     * meet whatever their order. In CUPTI's order: a call's external correlation, then its API
     * record. */
    CUpti_Activity *record = NULL;
    int correlations = 0;
    while (tw_cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
            const CUpti_ActivityExternalCorrelation *c = (const CUpti_ActivityExternalCorrelation *)record;
            if (c->externalKind != CORRELATION_KIND)
                continue;
            g->ring[c->correlationId % RING_SIZE] =
                (ring_entry_t){c->correlationId, RING_EXTERNAL, c->externalId, 0, 0, 0, 0};
            correlations++;
        } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME || record->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            const CUpti_ActivityAPI *api = (const CUpti_ActivityAPI *)record;
            uint32_t id = api->correlationId;
            ring_entry_t *e = &g->ring[id % RING_SIZE];
            if (e->state == RING_EMPTY || e->correlation_id != id) { /* no external correlation came first */
                *e = (ring_entry_t){id, RING_NONE, 0, api->start, api->end, (uint32_t)api->kind, api->cbid};
                correlations++;
            } else if (e->launch == 0) {
                e->launch = api->start;
                e->launch_end = api->end;
                e->launch_kind = (uint32_t)api->kind;
                e->launch_cbid = api->cbid;
            }
        }
    }
    if (correlations > 0 && g->pending_count > 0)
        resolve_pending(g, 0);
    record = NULL;
    while (tw_cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS)
        handle_record(g, record);
    g->stats.buffers++;
}

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
            process_buffer(g, buffer, valid);
        if (dropped > 0) {
            g->stats.dropped += dropped;
            tw_writer_stream_add_dropped(g->stream, dropped);
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
    resolve_pending(g, g->generation);
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
    for (size_t i = 0; i < g->pending_count; i++)
        free(pending_at(g, i)->name);
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

int tw_gpu_start(const tw_gpu_config_t *config, tw_writer_t *writer, const tw_clock_t *clock, tw_gpu_t **out,
                 char *reason, size_t reason_size)
{
    if (config == NULL || writer == NULL || clock == NULL || out == NULL) {
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
        g->format = tw_writer_format(writer);
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
        const char *header = g->format == TW_FORMAT_CSV
                                 ? "call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid,"
                                   "launch_start_ns,launch_end_ns,launch"
                                 : NULL;
        int src = tw_writer_add_stream(writer, "gpu", header, &g->stream);
        if (src != 0) {
            snprintf(reason, reason_size, "cannot add the gpu record stream to the writer: %s", tw_strerror(src));
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
    resolve_pending(g, UINT64_MAX); /* what waits for a correlation gets none now */
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
