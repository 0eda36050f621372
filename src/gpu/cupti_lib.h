/* SPDX-License-Identifier: MIT */
/*
 * The CUPTI library, loaded once per process with dlopen (not public API): its entry points, and the
 * hooks the wrappers call to push and pop correlation ids, and its activity buffers. Shared by
 * cupti.c (GPU timing sessions), cupti_records.c (their records into rows) and cupti_lib.c (loading
 * the library, the buffer pool). Only built with CUPTI headers.
 */
#ifndef TW_CUPTI_LIB_H
#define TW_CUPTI_LIB_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cupti.h>

#include "torchwrapper/gpu.h"

#define CORRELATION_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 /* torch.profiler (Kineto) uses CUSTOM0/1 */

typedef struct {
    void *handle;
    char path[PATH_MAX];
    pid_t pid; /* of the process that loaded it */
    uint32_t version;
    CUptiResult (*get_version)(uint32_t *);
    CUptiResult (*get_result_string)(CUptiResult, const char **);
    CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*unsubscribe)(CUpti_SubscriberHandle);
    CUptiResult (*enable)(CUpti_ActivityKind);
    CUptiResult (*disable)(CUpti_ActivityKind);
    CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*flush_all)(uint32_t);
    CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*dropped_records)(CUcontext, uint32_t, size_t *);
    CUptiResult (*push)(CUpti_ExternalCorrelationKind, uint64_t);
    CUptiResult (*pop)(CUpti_ExternalCorrelationKind, uint64_t *);
    CUptiResult (*timestamp)(uint64_t *);
} cupti_lib_t;

/* The library once loaded (handle NULL before), and the wrappers' hooks into it. */
extern cupti_lib_t tw_cupti;
extern tw_gpu_hooks_t tw_cupti_hooks;

/* CUPTI's text for r. */
const char *tw_cupti_result_text(CUptiResult r);

/* Why CUPTI's r means no GPU, for the reason line (" (no usable GPU or driver...)"), or "". */
const char *tw_cupti_no_gpu_cause(CUptiResult r);

/* Loads CUPTI from the first place that has it (see tw_gpu_config_t), unless loaded: 0, or
 * TW_EUNAVAIL with the places tried in reason. The caller serializes calls. */
int tw_cupti_load(const tw_gpu_config_t *config, char *reason, size_t reason_size);

/*
 * Activity buffers: one pool for the process, under its own lock, so that CUPTI's callbacks never
 * wait for a lock held around a CUPTI call. fill makes buffers ready at start (0, or -1 when out of
 * memory); close empties the pool at stop; requested is CUPTI's request callback; release takes a
 * buffer back once processed.
 */
int tw_cupti_pool_fill(void);
void tw_cupti_pool_close(void);
void CUPTIAPI tw_cupti_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records);
void tw_cupti_buffer_release(uint8_t *buffer);

#endif
