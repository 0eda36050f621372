/* SPDX-License-Identifier: MIT */
/*
 * A fake CUPTI for the tests: a shared module with the entry points torchwrapper uses, loaded
 * through TW_CUPTI_LIBRARY like the real one, plus fake_cupti_* controls with which a test plays
 * the GPU: it "launches" kernels, copies and memsets from a thread, and decides when CUPTI's
 * buffers are handed back, in which order, and what is dropped.
 *
 * Like the real CUPTI: correlation ids are handed out per CUDA API call; while a thread has pushed
 * external ids, each API call is preceded by one external-correlation record per kind pushed (the
 * top of that kind's stack), in the API buffer; GPU records go to a separate device buffer.
 * Buffers are asked from the client's request callback when needed and handed to its completion
 * callback when full, when a test says so, or at cuptiActivityFlushAll (a device buffer holding a
 * kernel that has not ended, end = 0, only at a forced flush). Records are laid out with the
 * current header's struct sizes, and read back with cuptiActivityGetNextRecord.
 *
 * Built with -module for make check only; never installed.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cupti.h>

/* the records a real library of this header's release writes (and the layout checks) */
#include "../../src/gpu/cupti_layout.h"

#define EXPORT __attribute__((visibility("default")))
#define STACK_MAX 64
#define KINDS 8 /* external correlation kinds: CUPTI_EXTERNAL_CORRELATION_KIND_SIZE is 6 */

typedef struct {
    uint8_t *data;
    size_t size;
    size_t used;
    int incomplete; /* holds a kernel with end = 0 */
} fake_buffer_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static int subscribed;
static int busy;                /* another subscriber holds CUPTI */
static int no_api_records;      /* API records are lost (as when CUPTI drops them) */
static CUptiResult enable_error;
static uint64_t enabled;        /* bit per CUpti_ActivityKind (all below 64) */
static uint32_t next_correlation = 100;
static fake_buffer_t api_buffer, device_buffer;
static size_t dropped;
static uint64_t calls;          /* every entry point called, for the fork test */
static uint64_t flushes;
static uint64_t clock_offset = 5000000000000ull; /* CUPTI's clock is not ours */

/* Each thread's external-id stacks, in a table rather than _Thread_local: TLS in a dlopen'ed
 * module leaves thread vectors that valgrind reports as possibly lost (make check-valgrind). */
#define THREADS_MAX 256
typedef struct {
    pthread_t owner;
    int used;
    uint64_t stacks[KINDS][STACK_MAX];
    unsigned depth[KINDS];
} thread_stacks_t;
static thread_stacks_t threads[THREADS_MAX];
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;

/* The calling thread's stacks (a slot is reused by a later thread once its stacks are empty). */
static thread_stacks_t *mine(void)
{
    pthread_t self = pthread_self();
    thread_stacks_t *free_slot = NULL;
    pthread_mutex_lock(&threads_lock);
    for (int i = 0; i < THREADS_MAX; i++) {
        if (threads[i].used && pthread_equal(threads[i].owner, self)) {
            pthread_mutex_unlock(&threads_lock);
            return &threads[i];
        }
        if (free_slot == NULL && !threads[i].used)
            free_slot = &threads[i];
    }
    if (free_slot != NULL) {
        memset(free_slot, 0, sizeof *free_slot);
        free_slot->owner = self;
        free_slot->used = 1;
    }
    pthread_mutex_unlock(&threads_lock);
    return free_slot;
}

/* The tests' controls (below), declared for -Wmissing-prototypes. */
EXPORT void fake_cupti_reset(void);
EXPORT void fake_cupti_set_busy(int value);
EXPORT void fake_cupti_set_no_api_records(int value);
EXPORT void fake_cupti_set_enable_error(int result);
EXPORT int fake_cupti_subscribed(void);
EXPORT uint64_t fake_cupti_enabled(void);
EXPORT uint64_t fake_cupti_calls(void);
EXPORT uint64_t fake_cupti_flushes(void);
EXPORT unsigned fake_cupti_depth(int kind);
EXPORT uint64_t fake_cupti_now(void);
EXPORT void fake_cupti_drop(size_t n);
EXPORT uint32_t fake_cupti_launch(int kind, const char *name, int copy_kind, uint64_t start, uint64_t end,
                                  uint32_t device, uint32_t stream);
EXPORT void fake_cupti_complete_api_buffer(void);
EXPORT void fake_cupti_complete_device_buffer(void);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + clock_offset;
}

/* ---- CUPTI's entry points ----------------------------------------------------------------------- */

EXPORT CUptiResult cuptiGetVersion(uint32_t *version)
{
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    *version = CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str)
{
    switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_NOT_COMPATIBLE: *str = "CUPTI_ERROR_NOT_COMPATIBLE"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; break;
    }
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata)
{
    pthread_mutex_lock(&lock);
    calls++;
    CUptiResult r = CUPTI_SUCCESS;
    if (busy || subscribed)
        r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    else
        subscribed = 1, *subscriber = (CUpti_SubscriberHandle)&subscribed;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
    pthread_mutex_lock(&lock);
    calls++;
    CUptiResult r = subscribed && subscriber == (CUpti_SubscriberHandle)&subscribed ? CUPTI_SUCCESS
                                                                                    : CUPTI_ERROR_INVALID_PARAMETER;
    subscribed = 0;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                  CUpti_BuffersCallbackCompleteFunc complete)
{
    pthread_mutex_lock(&lock);
    calls++;
    requested = request;
    completed = complete;
    pthread_mutex_unlock(&lock);
    return request && complete ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
    pthread_mutex_lock(&lock);
    calls++;
    CUptiResult r = enable_error;
    if (r == CUPTI_SUCCESS)
        enabled |= UINT64_C(1) << kind;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind)
{
    pthread_mutex_lock(&lock);
    calls++;
    enabled &= ~(UINT64_C(1) << kind);
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp)
{
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    *timestamp = now_ns();
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id)
{
    thread_stacks_t *t = mine();
    if (t == NULL || (unsigned)kind >= KINDS || t->depth[kind] == STACK_MAX)
        return CUPTI_ERROR_INVALID_PARAMETER;
    t->stacks[kind][t->depth[kind]++] = id;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t *last)
{
    thread_stacks_t *t = mine();
    if (t == NULL || (unsigned)kind >= KINDS)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (t->depth[kind] == 0)
        return CUPTI_ERROR_QUEUE_EMPTY;
    uint64_t id = t->stacks[kind][--t->depth[kind]];
    if (t->depth[kind] == 0) { /* all empty: the slot may go to another thread */
        unsigned total = 0;
        for (unsigned k = 0; k < KINDS; k++)
            total += t->depth[k];
        if (total == 0) {
            pthread_mutex_lock(&threads_lock);
            t->used = 0;
            pthread_mutex_unlock(&threads_lock);
        }
    }
    if (last != NULL)
        *last = id;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t stream, size_t *count)
{
    pthread_mutex_lock(&lock);
    *count = dropped; /* reset when read, as CUPTI does */
    dropped = 0;
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

static size_t record_size(CUpti_ActivityKind kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(TW_CUPTI_KERNEL_NEWEST);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(TW_CUPTI_MEMCPY_NEWEST);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(TW_CUPTI_MEMSET_NEWEST);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_RUNTIME: return sizeof(CUpti_ActivityAPI);
    default: return 0;
    }
}

static size_t aligned(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record)
{
    size_t at = 0;
    if (*record != NULL)
        at = (size_t)((uint8_t *)*record - buffer) + aligned(record_size((*record)->kind));
    if (at >= valid)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = (CUpti_Activity *)(buffer + at);
    return CUPTI_SUCCESS;
}

/* Hands b to the client. Lock held; released around the callback, as CUPTI does not hold its locks
 * while the client works. */
static void complete_buffer(fake_buffer_t *b)
{
    fake_buffer_t done = *b;
    memset(b, 0, sizeof *b);
    if (done.data == NULL)
        return;
    CUpti_BuffersCallbackCompleteFunc fn = completed;
    pthread_mutex_unlock(&lock);
    fn(NULL, 0, done.data, done.size, done.used);
    pthread_mutex_lock(&lock);
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
    pthread_mutex_lock(&lock);
    calls++;
    flushes++;
    complete_buffer(&api_buffer);
    if (!device_buffer.incomplete || (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED))
        complete_buffer(&device_buffer);
    pthread_mutex_unlock(&lock);
    return CUPTI_SUCCESS;
}

/* Kernel names live as long as the library, as CUPTI's do (a few distinct names in the tests). */
static const char *intern(const char *name)
{
    static char names[64][512];
    static unsigned count;
    if (name == NULL)
        return NULL;
    for (unsigned i = 0; i < count; i++)
        if (strcmp(names[i], name) == 0)
            return names[i];
    if (count == 64 || strlen(name) >= sizeof names[0])
        return "fake_cupti: too many names";
    strcpy(names[count], name);
    return names[count++];
}

/* ---- the tests' controls ----------------------------------------------------------------------------- */

/* Room for n bytes in b, asking the client for a buffer as CUPTI would; NULL when it declined (the
 * record is dropped and counted). Lock held. */
static uint8_t *room(fake_buffer_t *b, size_t n)
{
    if (b->data != NULL && b->used + aligned(n) > b->size)
        complete_buffer(b);
    if (b->data == NULL) {
        uint8_t *data = NULL;
        size_t size = 0, max = 0;
        CUpti_BuffersCallbackRequestFunc fn = requested;
        pthread_mutex_unlock(&lock);
        fn(&data, &size, &max);
        pthread_mutex_lock(&lock);
        if (data == NULL || size < n) {
            dropped++;
            return NULL;
        }
        b->data = data;
        b->size = size;
        b->used = 0;
    }
    uint8_t *at = b->data + b->used;
    memset(at, 0, aligned(n));
    b->used += aligned(n);
    return at;
}

EXPORT void fake_cupti_reset(void)
{
    pthread_mutex_lock(&lock);
    busy = 0;
    no_api_records = 0;
    enable_error = CUPTI_SUCCESS;
    dropped = 0;
    pthread_mutex_unlock(&lock);
}

EXPORT void fake_cupti_set_busy(int value)
{
    busy = value;
}

EXPORT void fake_cupti_set_no_api_records(int value)
{
    no_api_records = value;
}

EXPORT void fake_cupti_set_enable_error(int result)
{
    enable_error = (CUptiResult)result;
}

EXPORT int fake_cupti_subscribed(void)
{
    return subscribed;
}

EXPORT uint64_t fake_cupti_enabled(void)
{
    return enabled;
}

EXPORT uint64_t fake_cupti_calls(void)
{
    return __atomic_load_n(&calls, __ATOMIC_RELAXED);
}

EXPORT uint64_t fake_cupti_flushes(void)
{
    return __atomic_load_n(&flushes, __ATOMIC_RELAXED);
}

EXPORT unsigned fake_cupti_depth(int kind)
{
    thread_stacks_t *t = mine();
    unsigned d = t != NULL ? t->depth[kind] : 0;
    if (d == 0 && t != NULL) {
        pthread_mutex_lock(&threads_lock);
        t->used = 0; /* nothing pushed: leave the slot free */
        pthread_mutex_unlock(&threads_lock);
    }
    return d;
}

/* CUPTI's clock now (what cuptiGetTimestamp says). */
EXPORT uint64_t fake_cupti_now(void)
{
    return now_ns();
}

/* Records n records as lost for lack of buffer space (read by cuptiActivityGetNumDroppedRecords). */
EXPORT void fake_cupti_drop(size_t n)
{
    pthread_mutex_lock(&lock);
    dropped += n;
    pthread_mutex_unlock(&lock);
}

/*
 * A CUDA API call on the calling thread that puts work on the GPU: kind 0 a kernel (name), 1 a
 * copy (copy_kind, see CUpti_ActivityMemcpyKind), 2 a memset. Emits the external correlations of
 * the ids this thread has pushed and a runtime API record to the API buffer, and the work's record
 * (start, end in CUPTI's clock; end 0: still running) to the device buffer. Returns the correlation
 * id, 0 when CUPTI is not recording that kind.
 */
EXPORT uint32_t fake_cupti_launch(int kind, const char *name, int copy_kind, uint64_t start, uint64_t end,
                                  uint32_t device, uint32_t stream)
{
    static const CUpti_ActivityKind activity[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                  CUPTI_ACTIVITY_KIND_MEMSET};
    pthread_mutex_lock(&lock);
    if (!(enabled & (UINT64_C(1) << activity[kind])) || requested == NULL) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    uint32_t correlation = next_correlation++;
    thread_stacks_t *t = mine();
    if (t != NULL && (enabled & (UINT64_C(1) << CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION))) {
        for (unsigned k = 0; k < KINDS; k++) {
            if (t->depth[k] == 0)
                continue;
            CUpti_ActivityExternalCorrelation *c = (CUpti_ActivityExternalCorrelation *)room(&api_buffer, sizeof *c);
            if (c == NULL)
                continue;
            c->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
            c->externalKind = (CUpti_ExternalCorrelationKind)k;
            c->externalId = t->stacks[k][t->depth[k] - 1];
            c->correlationId = correlation;
        }
    }
    if ((enabled & (UINT64_C(1) << CUPTI_ACTIVITY_KIND_RUNTIME)) && !no_api_records) {
        CUpti_ActivityAPI *a = (CUpti_ActivityAPI *)room(&api_buffer, sizeof *a);
        if (a != NULL) {
            static const CUpti_CallbackId cbids[] = {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                                     CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
                                                     CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020};
            a->kind = CUPTI_ACTIVITY_KIND_RUNTIME;
            a->cbid = cbids[kind];
            a->correlationId = correlation;
            a->start = now_ns();
            a->end = a->start + 1000;
        }
    }
    if (kind == 0) {
        TW_CUPTI_KERNEL_NEWEST *k = (TW_CUPTI_KERNEL_NEWEST *)room(&device_buffer, sizeof *k);
        if (k != NULL) {
            k->kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            k->start = start;
            k->end = end;
            k->deviceId = device;
            k->streamId = stream;
            k->correlationId = correlation;
            k->name = intern(name);
            if (end == 0)
                device_buffer.incomplete = 1;
        }
    } else if (kind == 1) {
        TW_CUPTI_MEMCPY_NEWEST *m = (TW_CUPTI_MEMCPY_NEWEST *)room(&device_buffer, sizeof *m);
        if (m != NULL) {
            m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
            m->copyKind = (uint8_t)copy_kind;
            m->start = start, m->end = end, m->deviceId = device, m->streamId = stream;
            m->correlationId = correlation;
        }
    } else {
        TW_CUPTI_MEMSET_NEWEST *m = (TW_CUPTI_MEMSET_NEWEST *)room(&device_buffer, sizeof *m);
        if (m != NULL) {
            m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
            m->start = start, m->end = end, m->deviceId = device, m->streamId = stream;
            m->correlationId = correlation;
        }
    }
    pthread_mutex_unlock(&lock);
    return correlation;
}

/* Hands the current API buffer (external correlations) or device buffer (GPU records) to the
 * client now: the order of the two is the test's to choose. */
EXPORT void fake_cupti_complete_api_buffer(void)
{
    pthread_mutex_lock(&lock);
    complete_buffer(&api_buffer);
    pthread_mutex_unlock(&lock);
}

EXPORT void fake_cupti_complete_device_buffer(void)
{
    pthread_mutex_lock(&lock);
    complete_buffer(&device_buffer);
    pthread_mutex_unlock(&lock);
}
