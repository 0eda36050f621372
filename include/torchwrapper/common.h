/* SPDX-License-Identifier: MIT */
/* Shared definitions of the torchwrapper C library: export macro, a record's bounds, number formatting, error
 * codes. */
#ifndef TORCHWRAPPER_COMMON_H
#define TORCHWRAPPER_COMMON_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* What a record holds at most: kept to by the recorder (recorder.h), sized by what reads records
 * back. */
#define TW_MAX_DEPTH 512       /* nesting tracked per thread; deeper calls are counted, not recorded */
#define TW_ARGS_MAX 512        /* bytes of argument text per record, at most */

#ifdef __cplusplus
extern "C" {
#endif

/* Cuts n bytes of UTF-8 back to a character boundary at most max bytes long, so that cut text stays
 * valid UTF-8. */
static inline size_t tw_utf8_cut(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

/* Decimal digits of v (1 for 0). */
static inline int tw_decimal_digits(uint64_t v)
{
    int n = 1;
    for (;;) {
        if (v < 10)
            return n;
        if (v < 100)
            return n + 1;
        if (v < 1000)
            return n + 2;
        if (v < 10000)
            return n + 3;
        v /= 10000u;
        n += 4;
    }
}

/* Two decimal digits per entry: "00" .. "99". */
static const char tw_digit_pairs[201] = "00010203040506070809"
                                        "10111213141516171819"
                                        "20212223242526272829"
                                        "30313233343536373839"
                                        "40414243444546474849"
                                        "50515253545556575859"
                                        "60616263646566676869"
                                        "70717273747576777879"
                                        "80818283848586878889"
                                        "90919293949596979899";

/* v < 10^8 as exactly 8 digits (leading zeros), with 32-bit arithmetic only. */
static inline void tw_format_8_digits(char *out, uint32_t v)
{
    uint32_t high = v / 10000u, low = v % 10000u;
    memcpy(out, tw_digit_pairs + 2 * (high / 100u), 2);
    memcpy(out + 2, tw_digit_pairs + 2 * (high % 100u), 2);
    memcpy(out + 4, tw_digit_pairs + 2 * (low / 100u), 2);
    memcpy(out + 6, tw_digit_pairs + 2 * (low % 100u), 2);
}

/* v in decimal, as many digits as it has, with 32-bit arithmetic only; returns the end. */
static inline char *tw_format_u32(char *out, uint32_t v)
{
    int n = tw_decimal_digits(v);
    char *p = out + n;
    while (v >= 100u) {
        unsigned i = (v % 100u) * 2u;
        v /= 100u;
        p -= 2;
        memcpy(p, tw_digit_pairs + i, 2);
    }
    if (v >= 10u) {
        memcpy(p - 2, tw_digit_pairs + v * 2u, 2);
    } else {
        p[-1] = (char)('0' + v);
    }
    return out + n;
}

/*
 * Writes v in decimal at out (room for 20 bytes), no NUL; returns the end. The writer formats ~10
 * numbers per record, a nanosecond timestamp among them (19 digits): the value is cut into 8-digit
 * parts by at most two 64-bit divisions, and each part is written two digits at a time from a table
 * with 32-bit arithmetic (callgrind, tests/bench/bench_writer: 296 fewer instructions a record, of
 * ~3,430, than one 64-bit division per two digits).
 */
static inline char *tw_format_u64(char *out, uint64_t v)
{
    if (v <= UINT32_MAX)
        return tw_format_u32(out, (uint32_t)v);
    if (v < UINT64_C(10000000000000000)) { /* 10^16: at most 8 + 8 digits */
        char *p = tw_format_u32(out, (uint32_t)(v / 100000000u));
        tw_format_8_digits(p, (uint32_t)(v % 100000000u));
        return p + 8;
    }
    uint64_t high = v / 100000000u;
    char *p = tw_format_u32(out, (uint32_t)(high / 100000000u)); /* < 1845: 4 digits at most */
    tw_format_8_digits(p, (uint32_t)(high % 100000000u));
    tw_format_8_digits(p + 8, (uint32_t)(v % 100000000u));
    return p + 16;
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
    XX(BUSY, -EBUSY, "already in use")                                    \
    XX(NOTACTIVE, -ESRCH, "no profiling session is active")               \
    XX(FULL, -ENOBUFS, "table full")                                      \
    XX(IO, -EIO, "input/output error")                                    \
    XX(RANGE, -ERANGE, "value out of range")                              \
    XX(UNAVAIL, -ENOTSUP, "not available on this machine")               \
    XX(CLOSED, -ESHUTDOWN, "closed")

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
