/* SPDX-License-Identifier: MIT */
/*
 * Text into CSV fields and JSON strings, as records and reports write them. Pure functions, no
 * allocation; a file of its own so that the API name table (api.c) can render each name once when
 * it is interned, and the writer copy it (format.c), without a circle through format.c.
 */
#include "config.h"
#include "torchwrapper/escape.h"

#include <string.h>

/* Bytes that make a CSV field need quotes (RFC 4180), besides a leading or trailing space. */
static const unsigned char csv_special[256] = {[','] = 1, ['"'] = 1, ['\r'] = 1, ['\n'] = 1};

/*
 * A field as libcsv's csv_write() quotes it (the whole field in quotes, each quote doubled), by
 * memchr over the quotes instead of a byte at a time: argument summaries hold commas, so most of
 * them are quoted (callgrind: csv_write was ~540 instructions per record of the writer's ~2,000).
 * The reader tests and the CSV fuzzer read our fields back with libcsv.
 */
char *tw_csv_field(char *p, const char *s, size_t len)
{
    if (len == 0)
        return p;
    int plain = s[0] != ' ' && s[len - 1] != ' ';
    for (size_t i = 0; plain && i < len; i++)
        plain = !csv_special[(unsigned char)s[i]];
    if (plain) {
        memcpy(p, s, len);
        return p + len;
    }
    *p++ = '"';
    const char *end = s + len;
    for (;;) {
        const char *quote = memchr(s, '"', (size_t)(end - s));
        if (quote == NULL)
            break;
        memcpy(p, s, (size_t)(quote - s + 1));
        p += quote - s + 1;
        *p++ = '"';
        s = quote + 1;
    }
    memcpy(p, s, (size_t)(end - s));
    p += end - s;
    *p++ = '"';
    return p;
}

/* Bytes a JSON string cannot hold as they are: the quote, the backslash, control characters, DEL. */
static const unsigned char json_special[256] = {
    [0x00] = 1, [0x01] = 1, [0x02] = 1, [0x03] = 1, [0x04] = 1, [0x05] = 1, [0x06] = 1, [0x07] = 1,
    [0x08] = 1, [0x09] = 1, [0x0a] = 1, [0x0b] = 1, [0x0c] = 1, [0x0d] = 1, [0x0e] = 1, [0x0f] = 1,
    [0x10] = 1, [0x11] = 1, [0x12] = 1, [0x13] = 1, [0x14] = 1, [0x15] = 1, [0x16] = 1, [0x17] = 1,
    [0x18] = 1, [0x19] = 1, [0x1a] = 1, [0x1b] = 1, [0x1c] = 1, [0x1d] = 1, [0x1e] = 1, [0x1f] = 1,
    ['"'] = 1,  ['\\'] = 1, [0x7f] = 1,
};

/*
 * A JSON string of s, quotes included. Runs of bytes that need no escape (nearly all of API names,
 * module paths and argument summaries) are copied with memcpy, not a byte at a time through a switch
 * (callgrind, tests/bench/bench_writer: 713 -> 439 instructions a JSON record in here).
 */
char *tw_json_escape(char *p, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    *p++ = '"';
    size_t i = 0;
    while (i < len) {
        size_t run = i;
        while (run < len && !json_special[(unsigned char)s[run]])
            run++;
        memcpy(p, s + i, run - i);
        p += run - i;
        if (run == len)
            break;
        unsigned char c = (unsigned char)s[run];
        switch (c) {
        case '"': *p++ = '\\'; *p++ = '"'; break;
        case '\\': *p++ = '\\'; *p++ = '\\'; break;
        case '\n': *p++ = '\\'; *p++ = 'n'; break;
        case '\r': *p++ = '\\'; *p++ = 'r'; break;
        case '\t': *p++ = '\\'; *p++ = 't'; break;
        case '\b': *p++ = '\\'; *p++ = 'b'; break;
        case '\f': *p++ = '\\'; *p++ = 'f'; break;
        default:
            memcpy(p, "\\u00", 4);
            p[4] = hex[c >> 4];
            p[5] = hex[c & 15];
            p += 6;
        }
        i = run + 1;
    }
    *p++ = '"';
    return p;
}
