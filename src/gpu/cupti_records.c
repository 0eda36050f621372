/* SPDX-License-Identifier: MIT */
/*
 * CUPTI's activity records into rows (tw_gpu_rows_t: the writer's "gpu" stream; see cupti_records.h): kernels,
 * copies and sets, each attributed to the profiled call whose external correlation id its CUDA call
 * carried, through a ring of the last correlations seen; a record whose correlation has not come yet
 * waits (parked) for it, or for a flush to go by. Called by cupti.c under its deliver_lock.
 */
#include "config.h"

#ifdef TW_HAVE_CUPTI

#include "cupti_records.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/api.h"
#include "torchwrapper/common.h"
#include "torchwrapper/escape.h"
#include "cupti_layout.h"
#include "cupti_lib.h"
#include "demangle.h"

static const char *const kind_names[] = {"kernel", "memcpy", "memset"};

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
    uint64_t step = launch != 0 ? g->rows.step_at(g->rows.context, to_epoch(g, launch)) : TW_GPU_STEP_NOW;
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
        if (g->rows.format == TW_FORMAT_CSV) {
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
        int rc = g->rows.put(g->rows.context, row, (size_t)(p - row), step, api_id, duration);
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
void tw_cupti_resolve_pending(tw_gpu_t *g, uint64_t all_older_than)
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
void tw_cupti_process_buffer(tw_gpu_t *g, uint8_t *buffer, size_t valid)
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
        tw_cupti_resolve_pending(g, 0);
    record = NULL;
    while (tw_cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS)
        handle_record(g, record);
    g->stats.buffers++;
}

void tw_cupti_pending_free(tw_gpu_t *g)
{
    for (size_t i = 0; i < g->pending_count; i++)
        free(pending_at(g, i)->name);
}

#endif /* TW_HAVE_CUPTI */
