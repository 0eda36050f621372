/* SPDX-License-Identifier: MIT */
/*
 * One row of a record file, field by field: the columns by name, each field's text parsed into a
 * tw_row_t, and a JSON-lines object read as a row. The reader (reader_parse.c) splits text into
 * records and calls these; see reader_row.h.
 */
#include "config.h"
#include "reader_row.h"

#include <stdint.h>
#include <string.h>

/* ---- columns ----------------------------------------------------------------------------------- */


static const char *const column_names[COL_COUNT] = {
    [COL_CALL_ID] = "call_id", [COL_API] = "api",         [COL_START_NS] = "start_ns", [COL_COST_NS] = "cost_ns",
    [COL_SELF_NS] = "self_ns", [COL_GPU_NS] = "gpu_ns",   [COL_PID] = "pid",           [COL_TID] = "tid",
    [COL_DEPTH] = "depth",     [COL_PARENT_ID] = "parent_id", [COL_ERROR] = "error",   [COL_ARGS] = "args",
    [COL_KIND] = "kind",       [COL_NAME] = "name",       [COL_END_NS] = "end_ns",     [COL_DEVICE] = "device",
    [COL_STREAM] = "stream",   [COL_CORRELATION_ID] = "correlation_id", [COL_MODULE] = "module", [COL_STEP] = "step",
    [COL_SITE] = "site",       [COL_FWD_CALL_ID] = "fwd_call_id", [COL_FWD_API] = "fwd_api",
    [COL_FLOPS] = "flops",     [COL_FLOPS_TOTAL] = "flops_total", [COL_MEM_ALLOC] = "mem_alloc",
    [COL_MEM_SELF] = "mem_self", [COL_MEM_FREED] = "mem_freed", [COL_MEM_PEAK] = "mem_peak",
    [COL_LAUNCH_START_NS] = "launch_start_ns", [COL_LAUNCH_END_NS] = "launch_end_ns", [COL_LAUNCH] = "launch",
};
_Static_assert(COL_COUNT <= 64, "columns are bits of a 64-bit set");

column_t tw_column_of(const char *s, size_t len)
{
    for (int c = 1; c < COL_COUNT; c++)
        if (strlen(column_names[c]) == len && memcmp(column_names[c], s, len) == 0)
            return (column_t)c;
    return COL_UNKNOWN;
}

/* The kind of a file with these columns (a bit set), or 0 if it is not one of ours. */
tw_file_kind_t tw_kind_of(uint64_t present)
{
    const uint64_t calls = 1ull << COL_CALL_ID | 1ull << COL_API | 1ull << COL_START_NS | 1ull << COL_COST_NS;
    const uint64_t gpu = 1ull << COL_CALL_ID | 1ull << COL_KIND | 1ull << COL_START_NS | 1ull << COL_END_NS;
    if ((present & calls) == calls)
        return TW_FILE_CALLS;
    if ((present & gpu) == gpu)
        return TW_FILE_GPU;
    return 0;
}

TW_HOT_ALIGNED static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20)
        return -1;
    uint64_t v = 0;
    /* Up to 19 digits cannot overflow: check only the 20th. */
    size_t safe = len < 19 ? len : 19;
    for (size_t i = 0; i < safe; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (d > 9)
            return -1;
        v = v * 10 + d;
    }
    if (len == 20) {
        unsigned d = (unsigned)(s[19] - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int parse_i64(const char *s, size_t len, int64_t *out)
{
    uint64_t v;
    if (len > 0 && s[0] == '-') {
        if (parse_u64(s + 1, len - 1, &v) != 0 || v > (uint64_t)INT64_MAX + 1)
            return -1;
        *out = (int64_t)(0 - v);
        return 0;
    }
    if (parse_u64(s, len, &v) != 0 || v > (uint64_t)INT64_MAX)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* Stores one field's text in row; -1 when it does not parse. */
int tw_set_field(tw_row_t *row, column_t col, const char *s, size_t len)
{
    switch (col) {
    case COL_CALL_ID: return parse_u64(s, len, &row->call_id);
    case COL_PARENT_ID: return parse_u64(s, len, &row->parent_id);
    case COL_START_NS: {
        /* Epoch nanoseconds are written signed (a clock before 1970 is not an error to write). */
        int64_t v;
        if (parse_i64(s, len, &v) != 0)
            return -1;
        row->start_ns = (uint64_t)v;
        return 0;
    }
    case COL_END_NS: {
        int64_t v;
        if (parse_i64(s, len, &v) != 0)
            return -1;
        row->end_ns = (uint64_t)v;
        return 0;
    }
    case COL_COST_NS: return parse_u64(s, len, &row->cost_ns);
    case COL_SELF_NS: return parse_u64(s, len, &row->self_ns);
    case COL_GPU_NS: return parse_u64(s, len, &row->gpu_ns);
    case COL_PID: return parse_i64(s, len, &row->pid);
    case COL_TID: return parse_u64(s, len, &row->tid);
    case COL_DEPTH: return parse_u64(s, len, &row->depth);
    case COL_STEP: return parse_i64(s, len, &row->step);
    case COL_SITE: return parse_u64(s, len, &row->site);
    case COL_FWD_CALL_ID: return parse_u64(s, len, &row->fwd_call_id);
    /* resources: an empty field is a record that carries none (format.c) */
    case COL_FLOPS: return len == 0 ? 0 : parse_u64(s, len, &row->flops);
    case COL_FLOPS_TOTAL: return len == 0 ? 0 : parse_u64(s, len, &row->flops_total);
    case COL_MEM_ALLOC: return len == 0 ? 0 : parse_u64(s, len, &row->mem_alloc);
    case COL_MEM_SELF: return len == 0 ? 0 : parse_u64(s, len, &row->mem_self);
    case COL_MEM_FREED: return len == 0 ? 0 : parse_u64(s, len, &row->mem_freed);
    case COL_MEM_PEAK: return len == 0 ? 0 : parse_u64(s, len, &row->mem_peak);
    case COL_DEVICE: return parse_i64(s, len, &row->device);
    case COL_STREAM: return parse_i64(s, len, &row->stream);
    case COL_CORRELATION_ID: return parse_u64(s, len, &row->correlation_id);
    /* the CUDA call that launched GPU work: 0 (and empty) when not known */
    case COL_LAUNCH_START_NS: return len == 0 ? 0 : parse_i64(s, len, &row->launch_start_ns);
    case COL_LAUNCH_END_NS: return len == 0 ? 0 : parse_i64(s, len, &row->launch_end_ns);
    case COL_ERROR:
        if ((len == 1 && s[0] == '1') || (len == 4 && memcmp(s, "true", 4) == 0))
            row->error = 1;
        else if ((len == 1 && s[0] == '0') || (len == 5 && memcmp(s, "false", 5) == 0))
            row->error = 0;
        else
            return -1;
        return 0;
    case COL_API: row->api = (tw_str_t){s, len}; return 0;
    case COL_ARGS: row->args = (tw_str_t){s, len}; return 0;
    case COL_KIND: row->gpu_kind = (tw_str_t){s, len}; return 0;
    case COL_NAME: row->name = (tw_str_t){s, len}; return 0;
    case COL_MODULE:
        row->module = (tw_str_t){s, len};
        row->has_module = 1;
        return 0;
    case COL_FWD_API: row->fwd_api = (tw_str_t){s, len}; return 0;
    case COL_LAUNCH: row->launch = (tw_str_t){s, len}; return 0;
    default: return 0; /* a column of a newer version */
    }
}

/* ---- JSON lines -------------------------------------------------------------------------------- */

static int hex4(const char *p, const char *end, unsigned *out)
{
    if (end - p < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | cp >> 6);
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | cp >> 12);
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | cp >> 18);
        *o++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *o++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* Parses the JSON string at p (after its opening quote) into out (the text itself when it has no
 * escape, else unescaped into *scratch, which advances; an escape never lengthens the text).
 * Returns the position after the closing quote, or NULL. */
static const char *json_string(const char *p, const char *end, tw_str_t *out, char **scratch)
{
    const char *start = p;
    while (p < end && *p != '"' && *p != '\\')
        p++;
    if (p < end && *p == '"') {
        *out = (tw_str_t){start, (size_t)(p - start)};
        return p + 1;
    }
    char *o = *scratch, *begin = o;
    memcpy(o, start, (size_t)(p - start));
    o += p - start;
    while (p < end && *p != '"') {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        if (++p >= end)
            return NULL;
        char c = *p++;
        switch (c) {
        case '"': case '\\': case '/': *o++ = c; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, low;
            if (hex4(p, end, &cp) != 0)
                return NULL;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
                hex4(p + 2, end, &low) == 0 && low >= 0xDC00 && low < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                p += 6;
            } else if (cp >= 0xD800 && cp < 0xE000) {
                cp = 0xFFFD; /* a lone surrogate */
            }
            /* \uXXXX is 6 bytes, its UTF-8 at most 3; a pair is 12 for 4: never longer. */
            o = put_utf8(o, cp);
            break;
        }
        default: return NULL;
        }
    }
    if (p >= end)
        return NULL;
    *out = (tw_str_t){begin, (size_t)(o - begin)};
    *scratch = o;
    return p + 1;
}

/* Skips one JSON value of a key we do not know (nested objects and arrays included). */
static const char *json_skip(const char *p, const char *end, char **scratch)
{
    int depth = 0;
    do {
        p = tw_skip_ws(p, end);
        if (p >= end)
            return NULL;
        if (*p == '"') {
            tw_str_t ignored;
            char *mark = *scratch;
            p = json_string(p + 1, end, &ignored, scratch);
            *scratch = mark;
            if (p == NULL)
                return NULL;
        } else if (*p == '{' || *p == '[') {
            depth++;
            p++;
        } else if (*p == '}' || *p == ']') {
            if (--depth < 0)
                return NULL;
            p++;
        } else if (*p == ',' || *p == ':') {
            if (depth == 0)
                return NULL;
            p++;
        } else {
            const char *q = p;
            while (q < end && *q != ',' && *q != '}' && *q != ']' && *q != ' ' && *q != '\t' && *q != '\r')
                q++;
            if (q == p)
                return NULL;
            p = q;
        }
    } while (depth > 0);
    return p;
}

/* Parses one line holding a flat JSON object into row; *present gets the bit set of known keys.
 * Returns 0, or -1 when the line is not such an object or a known field does not parse. */
int tw_json_row(const char *p, const char *end, tw_row_t *row, uint64_t *present, char *scratch)
{
    *present = 0;
    p = tw_skip_ws(p, end);
    if (p >= end || *p++ != '{')
        return -1;
    p = tw_skip_ws(p, end);
    if (p < end && *p == '}')
        return tw_skip_ws(p + 1, end) == end ? 0 : -1;
    for (;;) {
        tw_str_t key;
        p = tw_skip_ws(p, end);
        if (p >= end || *p != '"' || (p = json_string(p + 1, end, &key, &scratch)) == NULL)
            return -1;
        p = tw_skip_ws(p, end);
        if (p >= end || *p++ != ':')
            return -1;
        p = tw_skip_ws(p, end);
        if (p >= end)
            return -1;
        column_t col = tw_column_of(key.ptr, key.len);
        if (col == COL_UNKNOWN) {
            if ((p = json_skip(p, end, &scratch)) == NULL)
                return -1;
        } else {
            tw_str_t value;
            int is_string = *p == '"';
            if (is_string) {
                if ((p = json_string(p + 1, end, &value, &scratch)) == NULL)
                    return -1;
            } else {
                const char *q = p;
                while (q < end && *q != ',' && *q != '}' && *q != ' ' && *q != '\t' && *q != '\r')
                    q++;
                value = (tw_str_t){p, (size_t)(q - p)};
                p = q;
            }
            /* null: the field is absent in this row (the root module's path, for one), not text. */
            int null = !is_string && value.len == 4 && memcmp(value.ptr, "null", 4) == 0;
            if (!null && tw_set_field(row, col, value.ptr, value.len) != 0)
                return -1;
            *present |= 1ull << col;
        }
        p = tw_skip_ws(p, end);
        if (p >= end)
            return -1;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p != '}')
            return -1;
        return tw_skip_ws(p + 1, end) == end ? 0 : -1;
    }
}
