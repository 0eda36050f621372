/* SPDX-License-Identifier: MIT */
/* Shared definitions of the torchwrapper C library: export macro, error codes. */
#ifndef TORCHWRAPPER_COMMON_H
#define TORCHWRAPPER_COMMON_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#if defined(TW_BUILDING_LIBRARY) && defined(__GNUC__)
#define TW_API __attribute__((visibility("default")))
#else
#define TW_API
#endif

#if defined(__GNUC__)
#define TW_LIKELY(x) __builtin_expect(!!(x), 1)
#define TW_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TW_LIKELY(x) (x)
#define TW_UNLIKELY(x) (x)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Writes v in decimal at out (room for 20 bytes), no NUL; returns the end. Faster than snprintf. */
static inline char *tw_format_u64(char *out, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *out++ = tmp[--n];
    return out;
}

/* The same for a signed value (room for 20 bytes). */
static inline char *tw_format_i64(char *out, int64_t v)
{
    if (v < 0) {
        *out++ = '-';
        return tw_format_u64(out, (uint64_t)0 - (uint64_t)v);
    }
    return tw_format_u64(out, (uint64_t)v);
}

/* Errors are returned as negative ints; 0 is success. There is no global error state. Like libuv's
 * UV_E* codes, each is a negative errno value (TW_ENOMEM == -ENOMEM), so a code never collides with a
 * -errno passed through from the system, and tw_strerror() names the system's reason for either. */
#define TW_ERRNO_MAP(XX)                                                  \
    XX(NOMEM, -ENOMEM, "out of memory")                                   \
    XX(INVAL, -EINVAL, "invalid argument")                                \
    XX(BUSY, -EBUSY, "a profiling session is already active")            \
    XX(NOTACTIVE, -ESRCH, "no profiling session is active")               \
    XX(FULL, -ENOBUFS, "table full")                                      \
    XX(IO, -EIO, "input/output error")                                    \
    XX(RANGE, -ERANGE, "value out of range")                              \
    XX(UNAVAIL, -ENOTSUP, "not available on this machine")

typedef enum {
#define TW_ERRNO_ENUM(name, value, text) TW_E##name = (value),
    TW_ERRNO_MAP(TW_ERRNO_ENUM)
#undef TW_ERRNO_ENUM
} tw_errno_t;

/* A static, human-readable text for any int: an error code above, any other negative errno value
 * (the system's text), 0, or an unknown value. */
TW_API const char *tw_strerror(int err);

/* The library's version, "MAJOR.MINOR.PATCH". */
TW_API const char *tw_version(void);

#ifdef __cplusplus
}
#endif
#endif
