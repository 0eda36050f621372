/* SPDX-License-Identifier: MIT */
/*
 * The CUPTI library, once per process: finding and loading it ($TW_CUPTI_LIBRARY, the caller's
 * candidates (the one installed with torch), $CUDA_HOME and /usr/local/cuda, then the loader's path;
 * every entry point checked), and the pool of activity buffers handed to it. See cupti_lib.h.
 */
#include "config.h"

#ifdef TW_HAVE_CUPTI

#include "cupti_lib.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUFFER_SIZE (1u << 20)  /* bytes per activity buffer */
#define BUFFERS_AHEAD 8         /* allocated at start, so that CUPTI's first requests cost no malloc */
#define BUFFERS_MAX 64          /* beyond that, requests are declined and CUPTI counts drops */


cupti_lib_t tw_cupti;
tw_gpu_hooks_t tw_cupti_hooks;

/* Every entry point is called through a pointer of cupti_lib_t: its type is checked here against the
 * declaration in the cupti.h this is built with (CUDA 12's and 13's: make check-cupti-lib), so that a
 * signature CUPTI changes fails the build instead of the call. The fake CUPTI of the tests defines
 * the same functions against the same header, so it cannot drift either. */
#define TW_SAME_TYPE(field, function)                                                                      \
    _Static_assert(__builtin_types_compatible_p(__typeof__(tw_cupti.field), __typeof__(&function)),       \
                   "cupti_lib_t." #field " is not the type of " #function " in cupti.h")
TW_SAME_TYPE(get_version, cuptiGetVersion);
TW_SAME_TYPE(get_result_string, cuptiGetResultString);
TW_SAME_TYPE(subscribe, cuptiSubscribe);
TW_SAME_TYPE(unsubscribe, cuptiUnsubscribe);
TW_SAME_TYPE(enable, cuptiActivityEnable);
TW_SAME_TYPE(disable, cuptiActivityDisable);
TW_SAME_TYPE(register_callbacks, cuptiActivityRegisterCallbacks);
TW_SAME_TYPE(flush_all, cuptiActivityFlushAll);
TW_SAME_TYPE(next_record, cuptiActivityGetNextRecord);
TW_SAME_TYPE(dropped_records, cuptiActivityGetNumDroppedRecords);
TW_SAME_TYPE(push, cuptiActivityPushExternalCorrelationId);
TW_SAME_TYPE(pop, cuptiActivityPopExternalCorrelationId);
TW_SAME_TYPE(timestamp, cuptiGetTimestamp);

const char *tw_gpu_library_path(void)
{
    return tw_cupti.path;
}

const char *tw_cupti_result_text(CUptiResult r)
{
    const char *text = NULL;
    if (tw_cupti.get_result_string == NULL || tw_cupti.get_result_string(r, &text) != CUPTI_SUCCESS || text == NULL)
        return "unknown CUPTI error";
    return text;
}

/* Appends printf-style text to buf (at most size bytes, always terminated). */
static void append(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...)
{
    size_t used = strnlen(buf, size);
    if (used + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* dlopen()s path and finds every entry point; on failure says why in tried and returns -1. */
static int try_load(const char *path, char *tried, size_t tried_size)
{
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        append(tried, tried_size, "%s%s (%s)", tried[0] ? ", " : "", path, e ? e : "cannot be loaded");
        return -1;
    }
    cupti_lib_t l = {.handle = h};
    struct {
        const char *name;
        void **slot;
    } symbols[] = {
        {"cuptiGetVersion", (void **)&l.get_version},
        {"cuptiGetResultString", (void **)&l.get_result_string},
        {"cuptiSubscribe", (void **)&l.subscribe},
        {"cuptiUnsubscribe", (void **)&l.unsubscribe},
        {"cuptiActivityEnable", (void **)&l.enable},
        {"cuptiActivityDisable", (void **)&l.disable},
        {"cuptiActivityRegisterCallbacks", (void **)&l.register_callbacks},
        {"cuptiActivityFlushAll", (void **)&l.flush_all},
        {"cuptiActivityGetNextRecord", (void **)&l.next_record},
        {"cuptiActivityGetNumDroppedRecords", (void **)&l.dropped_records},
        {"cuptiActivityPushExternalCorrelationId", (void **)&l.push},
        {"cuptiActivityPopExternalCorrelationId", (void **)&l.pop},
        {"cuptiGetTimestamp", (void **)&l.timestamp},
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        /* POSIX: a function pointer and a void * convert through dlsym's result. */
        *symbols[i].slot = dlsym(h, symbols[i].name);
        if (*symbols[i].slot == NULL) {
            append(tried, tried_size, "%s%s (no %s: not a CUPTI library)", tried[0] ? ", " : "", path,
                   symbols[i].name);
            dlclose(h);
            return -1;
        }
    }
    if (l.get_version(&l.version) != CUPTI_SUCCESS)
        l.version = 0;
    snprintf(l.path, sizeof l.path, "%s", path);
    l.pid = getpid();
    tw_cupti = l;
    /* CUPTI's enums are unsigned ints (see gpu.h): the hooks call CUPTI's functions directly. */
    tw_cupti_hooks.push = (unsigned (*)(unsigned, uint64_t))(void (*)(void))l.push;
    tw_cupti_hooks.pop = (unsigned (*)(unsigned, uint64_t *))(void (*)(void))l.pop;
    tw_cupti_hooks.kind = CORRELATION_KIND;
    return 0;
}

int tw_cupti_load(const tw_gpu_config_t *config, char *reason, size_t reason_size)
{
    if (tw_cupti.handle != NULL)
        return 0;
    char tried[1536] = "";
    const char *env = getenv("TW_CUPTI_LIBRARY");
    if (env != NULL && env[0] != '\0') {
        if (try_load(env, tried, sizeof tried) == 0)
            return 0;
        snprintf(reason, reason_size, "TW_CUPTI_LIBRARY=%s cannot be used: %s", env, tried);
        return TW_EUNAVAIL;
    }
    for (const char *const *c = config->candidates; c != NULL && *c != NULL; c++)
        if (try_load(*c, tried, sizeof tried) == 0)
            return 0;
    static const char *const names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12", "libcupti.so.11"};
    static const char *const subdirs[] = {"extras/CUPTI/lib64", "lib64", "lib"};
    const char *roots[] = {getenv("CUDA_HOME"), "/usr/local/cuda"};
    for (size_t r = 0; r < 2; r++) {
        if (roots[r] == NULL || roots[r][0] == '\0')
            continue;
        for (size_t d = 0; d < 3; d++) {
            for (size_t n = 0; n < 4; n++) {
                char path[PATH_MAX];
                snprintf(path, sizeof path, "%s/%s/%s", roots[r], subdirs[d], names[n]);
                if (access(path, F_OK) == 0 && try_load(path, tried, sizeof tried) == 0)
                    return 0;
            }
        }
    }
    for (size_t n = 0; n < 4; n++) /* the loader's own search: LD_LIBRARY_PATH, ld.so.cache */
        if (try_load(names[n], tried, sizeof tried) == 0)
            return 0;
    snprintf(reason, reason_size, "no CUPTI library could be loaded (set TW_CUPTI_LIBRARY to the path of "
                                  "libcupti.so, or install nvidia-cuda-cupti); tried: %s", tried);
    return TW_EUNAVAIL;
}

/* ---- buffers ----------------------------------------------------------------------------------------
 * One pool for the process, under its own lock, so that CUPTI's callbacks never wait for a lock
 * held around a CUPTI call. Buffers are made ahead at start; while a session runs, a request finds
 * one ready (or, past BUFFERS_AHEAD in use, a new one, up to BUFFERS_MAX: then the request is
 * declined and CUPTI counts the records it drops). At stop the pool is emptied.
 */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *pool[BUFFERS_MAX];
static unsigned pool_free;     /* buffers in pool[] */
static unsigned pool_out;      /* buffers held by CUPTI */
static int pool_open;          /* a session runs */

/* Makes BUFFERS_AHEAD buffers ready; 0, or -1 when out of memory. */
int tw_cupti_pool_fill(void)
{
    pthread_mutex_lock(&pool_lock);
    pool_open = 1;
    while (pool_free < BUFFERS_AHEAD) {
        uint8_t *b = malloc(BUFFER_SIZE); /* CUPTI wants 8-byte alignment; malloc gives 16 */
        if (b == NULL)
            break;
        pool[pool_free++] = b;
    }
    int ok = pool_free >= BUFFERS_AHEAD;
    pthread_mutex_unlock(&pool_lock);
    return ok ? 0 : -1;
}

void tw_cupti_pool_close(void)
{
    pthread_mutex_lock(&pool_lock);
    pool_open = 0;
    while (pool_free > 0)
        free(pool[--pool_free]);
    pthread_mutex_unlock(&pool_lock);
}

void CUPTIAPI tw_cupti_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    uint8_t *b = NULL;
    pthread_mutex_lock(&pool_lock);
    if (pool_open) {
        if (pool_free > 0)
            b = pool[--pool_free];
        else if (pool_free + pool_out < BUFFERS_MAX)
            b = malloc(BUFFER_SIZE);
        pool_out += b != NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    *buffer = b;
    *size = b != NULL ? BUFFER_SIZE : 0;
    *max_records = 0;
}

void tw_cupti_buffer_release(uint8_t *b)
{
    pthread_mutex_lock(&pool_lock);
    if (pool_out > 0)
        pool_out--;
    if (pool_open && pool_free < BUFFERS_MAX) {
        pool[pool_free++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&pool_lock);
    free(b);
}

#endif /* TW_HAVE_CUPTI */

/* What CUPTI's errors without a GPU mean, for the reason line: the real library says
 * CUPTI_ERROR_NOT_INITIALIZED (CUDA 12) or CUPTI_ERROR_UNKNOWN (CUDA 13) when it cannot reach a GPU,
 * and most often that is because there is no CUDA driver at all, which is then named. */
const char *tw_cupti_no_gpu_cause(CUptiResult r)
{
    if (r != CUPTI_ERROR_NOT_INITIALIZED && r != CUPTI_ERROR_UNKNOWN)
        return "";
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
    if (driver == NULL)
        driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (driver == NULL)
        return " (no usable GPU or driver: the CUDA driver, libcuda.so.1, cannot be loaded)";
    dlclose(driver);
    return " (no usable GPU or driver)";
}
