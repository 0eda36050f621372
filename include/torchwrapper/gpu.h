/* SPDX-License-Identifier: MIT */
/*
 * GPU timing through CUPTI's activity API: every kernel, memory copy and memset, attributed to the
 * innermost profiled call that launched it, handed as rows to where the caller says (tw_gpu_rows_t;
 * in the library, a "gpu" stream of the writer: tw_writer_gpu_rows() in writer.h). CUPTI is loaded
 * with dlopen at tw_gpu_start(); its headers are needed only at build time, and a library built
 * without them reports GPU timing as unavailable.
 *
 * Attribution: on entry, a profiled call pushes a CUPTI external correlation id that encodes both
 * its call id and its API id (tw_gpu_external_id), and pops it on exit. CUPTI then emits, for each
 * CUDA API call made inside (a kernel launch, a copy), an external-correlation record tying the
 * CUDA call's correlation id to ours; the kernel's own record carries that correlation id. So a GPU
 * record yields its call id and API without any table of calls, and per-API GPU totals follow.
 *
 * GPU rows (CSV header, and the same keys in JSON lines):
 *   call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid,launch_start_ns,launch_end_ns,launch
 * kind is kernel|memcpy|memset; times are nanoseconds since the epoch on the call records' clock
 * (CUPTI's clock is calibrated against it at start); end_ns is 0 for a kernel still running at a
 * forced flush (its duration is unknown and counts as 0); call_id is 0 and api empty for work no
 * profiled call launched (for example kernels launched by torch's own threads, such as autograd's
 * backward threads). launch_start_ns, launch_end_ns and launch are the CUDA API call that put the
 * work on the GPU (CUPTI's runtime or driver API record): its times, and its name as torch.profiler
 * names it (cudaLaunchKernel, cudaMemcpyAsync, ...); 0, 0 and empty when its record was not seen.
 *
 * One GPU timing session at a time per process (CUPTI's callbacks are process-wide).
 */
#ifndef TORCHWRAPPER_GPU_H
#define TORCHWRAPPER_GPU_H

#include "torchwrapper/clock.h"
#include "torchwrapper/config_keys.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * External correlation ids: the API id in the top 20 bits, the call id in the low 44. API ids are
 * below 2^20 (api.h refuses more names). A call id of 2^44 or more (17.6e12 calls: 20 days at 10 M
 * profiled calls per second) does not fit: its GPU work is attributed to its API with call id 0.
 */
#define TW_GPU_CALL_BITS 44
#define TW_GPU_CALL_MASK ((UINT64_C(1) << TW_GPU_CALL_BITS) - 1)

static inline uint64_t tw_gpu_external_id(uint64_t call_id, uint32_t api_id)
{
    return ((uint64_t)api_id << TW_GPU_CALL_BITS) | (call_id <= TW_GPU_CALL_MASK ? call_id : 0);
}

static inline uint64_t tw_gpu_external_call_id(uint64_t external_id)
{
    return external_id & TW_GPU_CALL_MASK;
}

static inline uint32_t tw_gpu_external_api_id(uint64_t external_id)
{
    return (uint32_t)(external_id >> TW_GPU_CALL_BITS);
}

/*
 * What a wrapper calls around each profiled call while GPU timing is on: CUPTI's own
 * cuptiActivityPushExternalCorrelationId / PopExternalCorrelationId, found with dlsym, and the
 * correlation kind to pass. (CUPTI's enums are passed as unsigned int, which is what they are on
 * the platforms CUPTI supports.) They return 0 on success. The hooks stay valid for the life of the
 * process, so a call that pushed may pop after its session stopped.
 */
typedef struct tw_gpu_hooks {
    unsigned (*push)(unsigned kind, uint64_t id);
    unsigned (*pop)(unsigned kind, uint64_t *last_id);
    unsigned kind;
} tw_gpu_hooks_t;

typedef struct tw_gpu_config {
    /* Paths of CUPTI libraries to try, best first (e.g. the one bundled with torch), after
     * $TW_CUPTI_LIBRARY and before $CUDA_HOME, /usr/local/cuda and the loader's path; NULL-terminated,
     * or NULL. When $TW_CUPTI_LIBRARY is set, it is the only library tried. */
    const char *const *candidates;
    int device_available;        /* whether the caller found a CUDA device (torch.cuda.is_available()) */
    uint64_t flush_interval_ns;  /* CUPTI's buffers are flushed this often; 0 means 1 s */
} tw_gpu_config_t;

/* A row's step when it is not known: the step in progress when the row is put (writer.h's TW_STEP_NOW). */
#define TW_GPU_STEP_NOW UINT64_MAX

/*
 * Where a GPU session's rows go: in the library, the writer's "gpu" stream (tw_writer_gpu_rows(),
 * writer.h). Called on CUPTI's threads and the session's flush thread: each function is thread-safe
 * and never blocks on I/O.
 */
typedef struct tw_gpu_rows {
    void *context;       /* passed to each function */
    tw_format_t format;  /* the rows' format: CSV lines or JSON objects */
    /* Opens the rows' stream, whose CSV files begin with csv_header (NULL in JSON), once the session
     * is sure to start: 0, or an error code, with which tw_gpu_start() fails. */
    int (*open)(void *context, const char *csv_header);
    /* One row (one line in format, its '\n' included) of step (TW_GPU_STEP_NOW: the step in
     * progress), whose GPU time gpu_ns adds to api_id's total (TW_API_ID_NONE: none's). 0, or an
     * error code: the row is lost and counted (TW_EINVAL: too long, the session tries it shorter). */
    int (*put)(void *context, const char *row, size_t len, uint64_t step, uint32_t api_id, uint64_t gpu_ns);
    /* Rows lost before they were made (CUPTI dropped its records for want of buffer space). */
    void (*lost)(void *context, uint64_t rows);
    /* The step that was in progress at epoch_ns (a row's step is its launch's). */
    uint64_t (*step_at)(void *context, int64_t epoch_ns);
} tw_gpu_rows_t;

typedef struct tw_gpu tw_gpu_t;

typedef struct tw_gpu_stats {
    uint64_t kernels;        /* rows written per kind */
    uint64_t memcpys;
    uint64_t memsets;
    uint64_t unattributed;   /* rows with call_id 0 and no API */
    uint64_t incomplete;     /* rows with end_ns 0 (still running at a forced flush) */
    uint64_t dropped;        /* records CUPTI dropped (no buffer space), and rows the stream refused */
    uint64_t buffers;        /* activity buffers processed */
    uint64_t pauses;         /* times recording was turned off (tw_gpu_set_recording) */
    uint32_t cupti_version;  /* cuptiGetVersion() of the library loaded */
} tw_gpu_stats_t;

/*
 * Loads CUPTI (once per process; it stays loaded), checks for a device, subscribes, enables the
 * activity kinds (concurrent kernels, memcpy, memset, external correlation, runtime and driver API,
 * the last two only so that CUPTI emits external correlations), calibrates CUPTI's clock against
 * clock, opens the rows' stream (rows, copied) and starts a thread that flushes CUPTI's buffers every
 * flush interval. Returns 0 and the session in *out; otherwise nothing is left enabled or subscribed,
 * reason says why in a sentence, and the result is TW_EUNAVAIL (no CUPTI library, no device, CUPTI
 * refused to start, a forked child of a process that used CUPTI, a build without CUPTI headers),
 * TW_EBUSY (another CUPTI subscriber, e.g. torch.profiler or Nsight, or another GPU session of
 * ours), TW_EINVAL or TW_ENOMEM.
 */
TW_API int tw_gpu_start(const tw_gpu_config_t *config, const tw_gpu_rows_t *rows, const tw_clock_t *clock,
                        tw_gpu_t **out, char *reason, size_t reason_size);

/* The hooks for the wrappers (see above). */
TW_API const tw_gpu_hooks_t *tw_gpu_hooks(const tw_gpu_t *gpu);

/*
 * Asks CUPTI for its buffers now (forced: also those holding records of work still running, which
 * get end 0), writes what they hold, and writes as unattributed the records whose external
 * correlation has not come after two flushes. The flush thread does this every interval; tests
 * call it directly. Returns 0, or TW_EIO when CUPTI refused.
 */
TW_API int tw_gpu_flush(tw_gpu_t *gpu, int forced);

/*
 * Ends the session: stops the flush thread, flushes CUPTI (forced), disables what start enabled,
 * writes every record left, and unsubscribes. Call it before the rows' stream closes (before
 * tw_writer_close()). In a forked child it makes no CUPTI call (CUDA and CUPTI do not survive fork)
 * and only frees memory. Idempotent.
 */
TW_API void tw_gpu_stop(tw_gpu_t *gpu);

/*
 * GPU timing only where it is recorded: on (1) enables the activity kinds start enabled again, off
 * (0) disables them all, so that CUPTI makes no record (and costs no time per launch) in the steps a
 * schedule does not record, as Kineto does for torch.profiler's schedule. The session calls it at step
 * boundaries (on in warm-up and active steps). Records already in CUPTI's buffers are delivered as
 * usual. Idempotent; not concurrently with tw_gpu_stop(); nothing in a forked child or once stopped.
 * Returns 0, or TW_EIO when CUPTI refused to enable a kind (those it did are on).
 */
TW_API int tw_gpu_set_recording(tw_gpu_t *gpu, int on);

/* Frees a stopped session (stops it first if needed). */
TW_API void tw_gpu_destroy(tw_gpu_t *gpu);

TW_API void tw_gpu_stats(tw_gpu_t *gpu, tw_gpu_stats_t *stats);

/* The CUPTI library loaded in this process ("" if none). */
TW_API const char *tw_gpu_library_path(void);

#ifdef __cplusplus
}
#endif
#endif
