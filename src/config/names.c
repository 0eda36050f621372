/* SPDX-License-Identifier: MIT */
/*
 * The user-facing values that are not config keys' choices: file name specs (file_name_spec:
 * "timestamp", "serial" or a template of {timestamp} {pid} {tid} {rank} {index} {host}; checked once,
 * tw_name_spec_check, and expanded for each new file, tw_name_expand) and sizes ("128MB",
 * tw_parse_size). See config_keys.h.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <strings.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "torchwrapper/config_keys.h"

static const char *const name_fields[] = {"timestamp", "pid", "tid", "rank", "index", "host"};

/* Index of the field named by s[0..len), or -1. */
static int field_index(const char *s, size_t len)
{
    for (int i = 0; i < (int)(sizeof name_fields / sizeof name_fields[0]); i++)
        if (strlen(name_fields[i]) == len && strncmp(s, name_fields[i], len) == 0)
            return i;
    return -1;
}

/* The template of a spec. The named specs carry the rank when there is one, so that the ranks of
 * a distributed job can share out_dir and their files still say whose they are; the timestamp
 * stays first, so that names sort by creation time. */
static const char *template_of(const char *spec, int64_t rank)
{
    if (strcmp(spec, "timestamp") == 0)
        return rank >= 0 ? "tw-{timestamp}-rank{rank}-{pid}-{index}" : "tw-{timestamp}-{pid}-{index}";
    if (strcmp(spec, "serial") == 0)
        return rank >= 0 ? "tw-rank{rank}-{pid}-{index}" : "tw-{pid}-{index}";
    return spec;
}

int tw_name_spec_check(const char *spec, char *err, size_t err_size)
{
    if (spec == NULL || spec[0] == '\0') {
        snprintf(err, err_size, "file_name_spec is empty (accepted: \"timestamp\", \"serial\", or a template "
                                "with {timestamp} {pid} {tid} {rank} {index} {host})");
        return TW_EINVAL;
    }
    if (strcmp(spec, ".") == 0 || strcmp(spec, "..") == 0 || strchr(spec, '/') != NULL) {
        snprintf(err, err_size, "file_name_spec '%s' would leave out_dir: a template names a file, so '/', '.' "
                                "and '..' are refused", spec);
        return TW_EINVAL;
    }
    const char *t = template_of(spec, -1);
    for (const char *p = t; *p; p++) {
        if (p[0] == '{' && p[1] == '{') {
            p++;
            continue;
        }
        if (p[0] == '}' && p[1] == '}') {
            p++;
            continue;
        }
        if (*p == '}') {
            snprintf(err, err_size, "file_name_spec '%s': unmatched '}' (write '}}' for a literal brace)", spec);
            return TW_EINVAL;
        }
        if (*p != '{')
            continue;
        const char *close = strchr(p, '}');
        if (close == NULL) {
            snprintf(err, err_size, "file_name_spec '%s': unmatched '{' (write '{{' for a literal brace)", spec);
            return TW_EINVAL;
        }
        if (field_index(p + 1, (size_t)(close - p - 1)) < 0) {
            snprintf(err, err_size, "file_name_spec '%s': unknown field {%.*s} (accepted: {timestamp} {pid} {tid} "
                                    "{rank} {index} {host})", spec, (int)(close - p - 1), p + 1);
            return TW_EINVAL;
        }
        p = close;
    }
    return 0;
}

int tw_name_expand(const char *spec, const tw_name_fields_t *f, const char *extension, char *out, size_t out_size)
{
    char err[256];
    if (out_size == 0 || tw_name_spec_check(spec, err, sizeof err) != 0)
        return TW_EINVAL;
    const char *t = template_of(spec, f->rank);
    size_t n = 0;
#define TW_PUT(...)                                                  \
    do {                                                             \
        int w_ = snprintf(out + n, out_size - n, __VA_ARGS__);       \
        if (w_ < 0 || (size_t)w_ >= out_size - n)                    \
            return TW_ERANGE;                                        \
        n += (size_t)w_;                                             \
    } while (0)
    for (const char *p = t; *p; p++) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            TW_PUT("%c", *p);
            p++;
            continue;
        }
        if (*p != '{') {
            TW_PUT("%c", *p);
            continue;
        }
        const char *close = strchr(p, '}');
        switch (field_index(p + 1, (size_t)(close - p - 1))) {
        case 0: {
            time_t seconds = (time_t)(f->timestamp_ns / 1000000000);
            struct tm tm;
            gmtime_r(&seconds, &tm);
            TW_PUT("%04d%02d%02d-%02d%02d%02d.%09lld", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                   tm.tm_min, tm.tm_sec, (long long)(f->timestamp_ns % 1000000000));
            break;
        }
        case 1:
            TW_PUT("%lld", (long long)f->pid);
            break;
        case 2:
            TW_PUT("%lld", (long long)f->tid);
            break;
        case 3:
            if (f->rank < 0)
                TW_PUT("norank");
            else
                TW_PUT("%lld", (long long)f->rank);
            break;
        case 4:
            TW_PUT("%04llu", (unsigned long long)f->index);
            break;
        case 5:
            for (const char *h = f->host ? f->host : "localhost"; *h; h++)
                TW_PUT("%c", isalnum((unsigned char)*h) || *h == '-' || *h == '_' || (*h == '.' && h[1] != '.') ? *h : '_');
            break;
        }
        p = close;
    }
    size_t ext_len = extension ? strlen(extension) : 0;
    if (ext_len > 0 && (n < ext_len || strcmp(out + n - ext_len, extension) != 0))
        TW_PUT("%s", extension);
#undef TW_PUT
    if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        return TW_EINVAL;
    return (int)n;
}

/* ---- sizes ("128MB") -------------------------------------------------------------------------- */

static const struct {
    const char *unit;
    double factor;
} size_units[] = {
    {"", 1},
    {"b", 1},
    {"kb", 1e3},
    {"mb", 1e6},
    {"gb", 1e9},
    {"tb", 1e12},
    {"kib", 1024.0},
    {"mib", 1024.0 * 1024},
    {"gib", 1024.0 * 1024 * 1024},
    {"tib", 1024.0 * 1024 * 1024 * 1024},
};

int tw_parse_size(const char *text, uint64_t *bytes)
{
    if (text == NULL || bytes == NULL)
        return TW_EINVAL;
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (!isdigit((unsigned char)*p) && *p != '.')
        return TW_EINVAL; /* no sign, no "inf", no "nan" */
    /* Integers are parsed exactly; only a fraction goes through a double. */
    char *end;
    errno = 0;
    unsigned long long whole = strtoull(p, &end, 10);
    if (errno == ERANGE)
        return TW_ERANGE;
    double value = (double)whole;
    int exact = 1;
    if (*end == '.') {
        char *frac_end;
        double fraction = strtod(end, &frac_end);
        if (frac_end == end + 1 && end == p)
            return TW_EINVAL; /* "." alone */
        value += fraction;
        exact = fraction == 0.0;
        end = frac_end;
    } else if (end == p) {
        return TW_EINVAL;
    }
    while (*end == ' ')
        end++;
    size_t unit_len = strlen(end);
    while (unit_len > 0 && isspace((unsigned char)end[unit_len - 1]))
        unit_len--;
    for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++) {
        if (strlen(size_units[i].unit) != unit_len || strncasecmp(end, size_units[i].unit, unit_len) != 0)
            continue;
        if (exact && size_units[i].factor == 1) {
            if (whole == 0 || whole > (1ull << 63))
                return TW_ERANGE;
            *bytes = whole;
            return 0;
        }
        double result = floor(value * size_units[i].factor);
        if (!(result >= 1) || result > 9223372036854775808.0)
            return TW_ERANGE;
        *bytes = (uint64_t)result;
        return 0;
    }
    return TW_EINVAL;
}
