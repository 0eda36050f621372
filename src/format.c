/* SPDX-License-Identifier: MIT */
/*
 * Record formatting: call records as CSV or JSON lines (exact int64 values), and the CSV quoting and
 * JSON escaping under them (tw_csv_field, tw_json_escape, also used by the GPU rows and tw-report).
 * Pure functions: no files, no threads, no allocation.
 */
#include "config.h"
#include "format.h"

#include <string.h>

#include "torchwrapper/common.h"

/* CSV text field: as is when nothing needs quoting, else through libcsv's quoting. */
static char *put_csv_text(char *p, const char *s, size_t len)
{
    return tw_csv_field(p, s, len);
}

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

size_t tw_format_record(char *line, tw_format_t format, const tw_clock_t *clock, int64_t pid, const tw_chunk_t *chunk,
                        const tw_record_t *r, size_t args_max)
{
    const char *args = chunk->text + r->args_offset;
    size_t args_len;
    /* A backward node: its text is the link to the forward call that created it, not arguments. */
    uint64_t fwd_call_id = 0;
    uint32_t fwd_api_id = 0;
    const char *fwd_api = NULL;
    if ((r->flags & TW_RECORD_BACKWARD) && r->args_len == TW_BACKWARD_LINK_SIZE) {
        tw_backward_link_unpack(args, &fwd_call_id, &fwd_api_id);
        fwd_api = fwd_call_id != 0 ? tw_api_name(fwd_api_id) : NULL;
        args_len = 0;
    } else {
        args_len = tw_utf8_cut(args, r->args_len, args_max);
    }
    size_t fwd_api_len = fwd_api != NULL ? strnlen(fwd_api, TW_API_NAME_MAX) : 0;
    const char *api = tw_api_name(r->api_id);
    if (api == NULL)
        api = "?";
    size_t api_len = strnlen(api, TW_API_NAME_MAX);
    const char *module = tw_module_path(r->module_id); /* NULL: not a module call */
    size_t module_len = module != NULL ? strnlen(module, TW_API_NAME_MAX) : 0;
    char *p = line;
    int64_t start = tw_clock_epoch_ns(clock, r->start);
    uint64_t cost = tw_clock_duration_ns(clock, r->cost);
    uint64_t self = tw_clock_duration_ns(clock, r->self);
    tw_resources_t res;
    int has_res = tw_record_resources(chunk, r, &res);
    if (format == TW_FORMAT_CSV) {
        p = tw_format_u64(p, r->call_id);
        *p++ = ',';
        p = put_csv_text(p, api, api_len);
        *p++ = ',';
        p = tw_format_i64(p, start);
        *p++ = ',';
        p = tw_format_u64(p, cost);
        *p++ = ',';
        p = tw_format_u64(p, self);
        *p++ = ',';
        *p++ = '0'; /* gpu_ns: readers join it from the GPU records */
        *p++ = ',';
        p = tw_format_i64(p, pid);
        *p++ = ',';
        p = tw_format_u64(p, chunk->tid);
        *p++ = ',';
        p = tw_format_u64(p, r->depth);
        *p++ = ',';
        p = tw_format_u64(p, r->parent_id);
        *p++ = ',';
        *p++ = (r->flags & TW_RECORD_ERROR) ? '1' : '0';
        *p++ = ',';
        p = put_csv_text(p, args, args_len);
        *p++ = ',';
        if (module != NULL && module_len == 0) { /* the root module: "" tells it from no module */
            *p++ = '"';
            *p++ = '"';
        } else if (module != NULL) {
            p = put_csv_text(p, module, module_len);
        }
        *p++ = ',';
        p = tw_format_u64(p, r->step);
        *p++ = ',';
        p = tw_format_u64(p, r->site);
        *p++ = ',';
        p = tw_format_u64(p, fwd_call_id);
        *p++ = ',';
        if (fwd_api != NULL)
            p = put_csv_text(p, fwd_api, fwd_api_len);
        /* the resources: empty fields for the (many) records that carry none, which read as 0 */
        if (has_res) {
            const uint64_t fields[] = {res.flops, res.flops_total, res.mem_alloc, res.mem_self, res.mem_freed, res.mem_peak};
            for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
                *p++ = ',';
                p = tw_format_u64(p, fields[i]);
            }
        } else {
            memcpy(p, ",,,,,,", 6);
            p += 6;
        }
        *p++ = '\n';
    } else {
        memcpy(p, "{\"call_id\":", 11);
        p = tw_format_u64(p + 11, r->call_id);
        memcpy(p, ",\"api\":", 7);
        p = tw_json_escape(p + 7, api, api_len);
        memcpy(p, ",\"start_ns\":", 12);
        p = tw_format_i64(p + 12, start);
        memcpy(p, ",\"cost_ns\":", 11);
        p = tw_format_u64(p + 11, cost);
        memcpy(p, ",\"self_ns\":", 11);
        p = tw_format_u64(p + 11, self);
        memcpy(p, ",\"gpu_ns\":0", 11); /* joined from the GPU records by readers */
        p += 11;
        memcpy(p, ",\"pid\":", 7);
        p = tw_format_i64(p + 7, pid);
        memcpy(p, ",\"tid\":", 7);
        p = tw_format_u64(p + 7, chunk->tid);
        memcpy(p, ",\"depth\":", 9);
        p = tw_format_u64(p + 9, r->depth);
        memcpy(p, ",\"parent_id\":", 13);
        p = tw_format_u64(p + 13, r->parent_id);
        if (r->flags & TW_RECORD_ERROR) {
            memcpy(p, ",\"error\":true", 13);
            p += 13;
        } else {
            memcpy(p, ",\"error\":false", 14);
            p += 14;
        }
        memcpy(p, ",\"args\":", 8);
        p = tw_json_escape(p + 8, args, args_len);
        memcpy(p, ",\"module\":", 10);
        p += 10;
        if (module != NULL) {
            p = tw_json_escape(p, module, module_len);
        } else {
            memcpy(p, "null", 4);
            p += 4;
        }
        memcpy(p, ",\"step\":", 8);
        p = tw_format_u64(p + 8, r->step);
        memcpy(p, ",\"site\":", 8);
        p = tw_format_u64(p + 8, r->site);
        memcpy(p, ",\"fwd_call_id\":", 15);
        p = tw_format_u64(p + 15, fwd_call_id);
        memcpy(p, ",\"fwd_api\":", 11);
        p = tw_json_escape(p + 11, fwd_api != NULL ? fwd_api : "", fwd_api_len);
        /* the resources, only in the records that carry some: a key left out reads as 0 */
        static const struct {
            const char *key; /* ,"name": */
            size_t len;
        } keys[] = {{",\"flops\":", 9},     {",\"flops_total\":", 15}, {",\"mem_alloc\":", 13},
                    {",\"mem_self\":", 12}, {",\"mem_freed\":", 13},   {",\"mem_peak\":", 12}};
        const uint64_t fields[] = {res.flops, res.flops_total, res.mem_alloc, res.mem_self, res.mem_freed, res.mem_peak};
        for (size_t i = 0; has_res && i < sizeof fields / sizeof fields[0]; i++) {
            memcpy(p, keys[i].key, keys[i].len);
            p = tw_format_u64(p + keys[i].len, fields[i]);
        }
        *p++ = '}';
        *p++ = '\n';
    }
    return (size_t)(p - line);
}

