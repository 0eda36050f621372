/* SPDX-License-Identifier: MIT */
/* Reading record files back, in constant memory. See reader.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torchwrapper/reader.h"

#define READ_BLOCK (1u << 20)        /* bytes read at a time */
#define RECORD_MAX (64u << 20)       /* a longer record is an error, not a reason to eat all memory */
#define MAX_COLUMNS 64               /* columns per record we look at; more is not one of our files */

/* ---- columns ----------------------------------------------------------------------------------- */

typedef enum {
    COL_UNKNOWN = 0,
    COL_CALL_ID,
    COL_API,
    COL_START_NS,
    COL_COST_NS,
    COL_SELF_NS,
    COL_GPU_NS,
    COL_PID,
    COL_TID,
    COL_DEPTH,
    COL_PARENT_ID,
    COL_ERROR,
    COL_ARGS,
    COL_KIND,
    COL_NAME,
    COL_END_NS,
    COL_DEVICE,
    COL_STREAM,
    COL_CORRELATION_ID,
    COL_MODULE,
    COL_COUNT
} column_t;

static const char *const column_names[COL_COUNT] = {
    [COL_CALL_ID] = "call_id", [COL_API] = "api",         [COL_START_NS] = "start_ns", [COL_COST_NS] = "cost_ns",
    [COL_SELF_NS] = "self_ns", [COL_GPU_NS] = "gpu_ns",   [COL_PID] = "pid",           [COL_TID] = "tid",
    [COL_DEPTH] = "depth",     [COL_PARENT_ID] = "parent_id", [COL_ERROR] = "error",   [COL_ARGS] = "args",
    [COL_KIND] = "kind",       [COL_NAME] = "name",       [COL_END_NS] = "end_ns",     [COL_DEVICE] = "device",
    [COL_STREAM] = "stream",   [COL_CORRELATION_ID] = "correlation_id", [COL_MODULE] = "module",
};

static column_t column_of(const char *s, size_t len)
{
    for (int c = 1; c < COL_COUNT; c++)
        if (strlen(column_names[c]) == len && memcmp(column_names[c], s, len) == 0)
            return (column_t)c;
    return COL_UNKNOWN;
}

/* The kind of a file with these columns (a bit set), or 0 if it is not one of ours. */
static tw_file_kind_t kind_of(uint32_t present)
{
    const uint32_t calls = 1u << COL_CALL_ID | 1u << COL_API | 1u << COL_START_NS | 1u << COL_COST_NS;
    const uint32_t gpu = 1u << COL_CALL_ID | 1u << COL_KIND | 1u << COL_START_NS | 1u << COL_END_NS;
    if ((present & calls) == calls)
        return TW_FILE_CALLS;
    if ((present & gpu) == gpu)
        return TW_FILE_GPU;
    return 0;
}

static int parse_u64(const char *s, size_t len, uint64_t *out)
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
static int set_field(tw_row_t *row, column_t col, const char *s, size_t len)
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
    case COL_DEVICE: return parse_i64(s, len, &row->device);
    case COL_STREAM: return parse_i64(s, len, &row->stream);
    case COL_CORRELATION_ID: return parse_u64(s, len, &row->correlation_id);
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
    case COL_MODULE: row->module = (tw_str_t){s, len}; return 0;
    default: return 0; /* a column of a newer version */
    }
}

/* ---- CSV --------------------------------------------------------------------------------------- */

/* The bytes that end an unquoted field (a quote there is an error). */
static const unsigned char csv_special[256] = {[','] = 1, ['\n'] = 1, ['"'] = 1};

long tw_csv_split(const char *data, size_t len, tw_str_t *fields, size_t max_fields, size_t *nfields, char *scratch,
                  size_t scratch_size)
{
    const char *p = data, *end = data + len;
    size_t n = 0, used = 0;
    *nfields = 0;
    for (;;) {
        if (n == max_fields)
            return -1;
        tw_str_t field;
        if (p < end && *p == '"') {
            /* Quoted: runs between doubled quotes are copied into scratch only when there is one. */
            const char *run = ++p;
            char *copy = NULL;
            for (;;) {
                const char *q = memchr(p, '"', (size_t)(end - p));
                if (q == NULL || q + 1 >= end)
                    return 0; /* the closing quote, or what follows it, is not here yet */
                if (q[1] == '"') {
                    size_t part = (size_t)(q + 1 - p);
                    if (copy == NULL) {
                        copy = scratch + used;
                        part = (size_t)(q + 1 - run);
                        p = run;
                    }
                    if (used + part > scratch_size)
                        return -1;
                    memcpy(scratch + used, p, part);
                    used += part;
                    p = q + 2;
                    continue;
                }
                if (copy != NULL) {
                    size_t part = (size_t)(q - p);
                    if (used + part > scratch_size)
                        return -1;
                    memcpy(scratch + used, p, part);
                    used += part;
                    field = (tw_str_t){copy, (size_t)(scratch + used - copy)};
                } else {
                    field = (tw_str_t){run, (size_t)(q - run)};
                }
                p = q + 1;
                break;
            }
        } else {
            const char *q = p;
            while (q < end && !csv_special[(unsigned char)*q])
                q++;
            if (q == end)
                return 0;
            if (*q == '"')
                return -1;
            size_t flen = (size_t)(q - p);
            if (*q == '\n' && flen > 0 && q[-1] == '\r')
                flen--;
            field = (tw_str_t){p, flen};
            p = q;
        }
        fields[n++] = field;
        if (p >= end)
            return 0;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '\r') {
            if (p + 1 >= end)
                return 0;
            if (p[1] != '\n')
                return -1;
            p++;
        }
        if (*p != '\n')
            return -1;
        *nfields = n;
        return (long)(p + 1 - data);
    }
}

/* ---- JSON lines -------------------------------------------------------------------------------- */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

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
        p = skip_ws(p, end);
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
static int json_row(const char *p, const char *end, tw_row_t *row, uint32_t *present, char *scratch)
{
    *present = 0;
    p = skip_ws(p, end);
    if (p >= end || *p++ != '{')
        return -1;
    p = skip_ws(p, end);
    if (p < end && *p == '}')
        return skip_ws(p + 1, end) == end ? 0 : -1;
    for (;;) {
        tw_str_t key;
        p = skip_ws(p, end);
        if (p >= end || *p != '"' || (p = json_string(p + 1, end, &key, &scratch)) == NULL)
            return -1;
        p = skip_ws(p, end);
        if (p >= end || *p++ != ':')
            return -1;
        p = skip_ws(p, end);
        if (p >= end)
            return -1;
        column_t col = column_of(key.ptr, key.len);
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
            if (!null && set_field(row, col, value.ptr, value.len) != 0)
                return -1;
            *present |= 1u << col;
        }
        p = skip_ws(p, end);
        if (p >= end)
            return -1;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p != '}')
            return -1;
        return skip_ws(p + 1, end) == end ? 0 : -1;
    }
}

/* ---- files ------------------------------------------------------------------------------------- */

typedef struct reader {
    const char *name;
    tw_row_fn fn;
    void *ctx;
    tw_read_stats_t *stats;
    char *err;
    size_t err_size;
    int json;                   /* -1 until the first byte is seen */
    tw_file_kind_t kind;        /* 0 until the header (CSV) or first object (JSON) is read */
    column_t columns[MAX_COLUMNS];
    size_t ncolumns;
    char *scratch;
    size_t scratch_size;
} reader_t;

static int not_ours(reader_t *r, const char *what, const char *text, size_t len)
{
    if (len > 120)
        len = 120;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
        len--;
    snprintf(r->err, r->err_size, "%s is not a TorchWrapper record file: %s '%.*s' (expected the columns of call "
             "records: call_id,api,start_ns,cost_ns,... or of GPU records: call_id,api,kind,name,start_ns,end_ns,...)",
             r->name, what, (int)len, text);
    return TW_EINVAL;
}

static int deliver(reader_t *r, tw_row_t *row)
{
    row->kind = r->kind;
    if (r->kind == TW_FILE_GPU)
        row->cost_ns = row->end_ns > row->start_ns ? row->end_ns - row->start_ns : 0;
    r->stats->rows++;
    return r->fn(r->ctx, row);
}

/* Handles one complete CSV record (line end included). */
static int csv_record(reader_t *r, const tw_str_t *fields, size_t n, const char *raw, size_t raw_len)
{
    if (r->kind == 0) {
        uint32_t present = 0;
        for (size_t i = 0; i < n; i++) {
            r->columns[i] = column_of(fields[i].ptr, fields[i].len);
            present |= 1u << r->columns[i];
        }
        r->ncolumns = n;
        r->kind = kind_of(present);
        if (r->kind == 0)
            return not_ours(r, "its first line is", raw, raw_len);
        return 0;
    }
    if (n == 1 && fields[0].len == 0)
        return 0; /* an empty line */
    tw_row_t row;
    memset(&row, 0, sizeof row);
    /* A row with fewer fields than the header is torn or corrupt; more is a newer writer's. */
    if (n < r->ncolumns) {
        r->stats->malformed++;
        return 0;
    }
    for (size_t i = 0; i < r->ncolumns; i++) {
        if (set_field(&row, r->columns[i], fields[i].ptr, fields[i].len) != 0) {
            r->stats->malformed++;
            return 0;
        }
    }
    return deliver(r, &row);
}

static int json_record(reader_t *r, const char *line, size_t len)
{
    tw_row_t row;
    memset(&row, 0, sizeof row);
    uint32_t present;
    if (skip_ws(line, line + len) == line + len)
        return 0; /* an empty line */
    if (json_row(line, line + len, &row, &present, r->scratch) != 0) {
        if (r->kind == 0)
            return not_ours(r, "its first line is not a JSON object of records:", line, len);
        r->stats->malformed++;
        return 0;
    }
    if (r->kind == 0) {
        r->kind = kind_of(present);
        if (r->kind == 0)
            return not_ours(r, "its first object is", line, len);
    } else if (kind_of(present) != r->kind) {
        r->stats->malformed++;
        return 0;
    }
    return deliver(r, &row);
}

/* Handles the complete records at the start of data[0..len); *used receives the bytes consumed.
 * At eof, what is left is a torn last record. */
static int process(reader_t *r, const char *data, size_t len, int eof, size_t *used)
{
    size_t pos = 0;
    int rc = 0;
    if (r->json < 0 && len > 0) {
        const char *first = skip_ws(data, data + len);
        r->json = first < data + len && *first == '{';
    }
    while (pos < len && rc == 0) {
        if (r->json) {
            const char *nl = memchr(data + pos, '\n', len - pos);
            if (nl == NULL)
                break;
            rc = json_record(r, data + pos, (size_t)(nl - (data + pos)));
            pos = (size_t)(nl + 1 - data);
            continue;
        }
        tw_str_t fields[MAX_COLUMNS];
        size_t n;
        long got = tw_csv_split(data + pos, len - pos, fields, MAX_COLUMNS, &n, r->scratch, r->scratch_size);
        if (got == 0)
            break;
        if (got < 0) {
            /* Resynchronise at the next line end: a corrupt row costs itself only. */
            const char *nl = memchr(data + pos, '\n', len - pos);
            if (nl == NULL && !eof)
                break;
            if (r->kind == 0)
                return not_ours(r, "its first line is", data + pos, nl ? (size_t)(nl - (data + pos)) : len - pos);
            r->stats->malformed++;
            pos = nl ? (size_t)(nl + 1 - data) : len;
            continue;
        }
        rc = csv_record(r, fields, n, data + pos, (size_t)got);
        pos += (size_t)got;
    }
    if (rc == 0 && eof && pos < len && skip_ws(data + pos, data + len) < data + len) {
        /* A torn last record; if it is the first one, it must at least start like our header. */
        const char *text = skip_ws(data + pos, data + len);
        size_t rest = (size_t)(data + len - text);
        const char *head = r->json ? "{\"call_id\"" : "call_id";
        size_t head_len = strlen(head);
        if (r->kind == 0 && memcmp(text, head, rest < head_len ? rest : head_len) != 0)
            return not_ours(r, "its only line is", text, rest);
        r->stats->truncated++;
    }
    if (rc == 0 && eof)
        pos = len;
    *used = pos;
    return rc;
}

static int reader_init(reader_t *r, const char *name, tw_row_fn fn, void *ctx, tw_read_stats_t *stats,
                       tw_read_stats_t *local, char *err, size_t err_size, size_t scratch_size)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    r->fn = fn;
    r->ctx = ctx;
    r->stats = stats ? stats : local;
    r->err = err;
    r->err_size = err_size;
    r->json = -1;
    r->scratch_size = scratch_size;
    r->scratch = malloc(scratch_size ? scratch_size : 1);
    if (r->scratch == NULL) {
        snprintf(err, err_size, "reading %s: %s", name, tw_strerror(TW_ENOMEM));
        return TW_ENOMEM;
    }
    return 0;
}

int tw_read_buffer(const char *name, const char *data, size_t len, tw_row_fn fn, void *ctx, tw_read_stats_t *stats,
                   char *err, size_t err_size)
{
    reader_t r;
    tw_read_stats_t local = {0};
    int rc = reader_init(&r, name, fn, ctx, stats, &local, err, err_size, len);
    if (rc != 0)
        return rc;
    size_t used;
    rc = process(&r, data, len, 1, &used);
    r.stats->bytes += len;
    free(r.scratch);
    return rc;
}

int tw_read_file(const char *path, tw_row_fn fn, void *ctx, tw_read_stats_t *stats, char *err, size_t err_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "cannot open %s: %s", path, strerror(errno));
        return TW_EIO;
    }
    reader_t r;
    tw_read_stats_t local = {0};
    size_t capacity = READ_BLOCK;
    char *buf = malloc(capacity);
    int rc = buf ? reader_init(&r, path, fn, ctx, stats, &local, err, err_size, capacity) : TW_ENOMEM;
    if (rc != 0) {
        if (rc == TW_ENOMEM && buf == NULL)
            snprintf(err, err_size, "reading %s: %s", path, tw_strerror(TW_ENOMEM));
        free(buf);
        close(fd);
        return rc;
    }
    size_t have = 0;
    for (int eof = 0; rc == 0 && !eof;) {
        if (have == capacity) {
            /* One record longer than the buffer: grow, within reason. */
            if (capacity >= RECORD_MAX) {
                snprintf(err, err_size, "%s: a record longer than %u MiB at byte %llu: not a record file?", path,
                         RECORD_MAX >> 20, (unsigned long long)r.stats->bytes);
                rc = TW_EINVAL;
                break;
            }
            char *bigger = realloc(buf, capacity * 2), *scratch = bigger ? realloc(r.scratch, capacity * 2) : NULL;
            if (bigger)
                buf = bigger;
            if (scratch == NULL) {
                snprintf(err, err_size, "reading %s: %s", path, tw_strerror(TW_ENOMEM));
                rc = TW_ENOMEM;
                break;
            }
            r.scratch = scratch;
            capacity *= 2;
            r.scratch_size = capacity;
        }
        ssize_t got = read(fd, buf + have, capacity - have);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            snprintf(err, err_size, "reading %s: %s", path, strerror(errno));
            rc = TW_EIO;
            break;
        }
        eof = got == 0;
        have += (size_t)got;
        r.stats->bytes += (uint64_t)got;
        size_t used = 0;
        rc = process(&r, buf, have, eof, &used);
        memmove(buf, buf + used, have - used);
        have -= used;
    }
    free(r.scratch);
    free(buf);
    close(fd);
    return rc;
}

static int ignore_row(void *ctx, const tw_row_t *row)
{
    (void)ctx;
    (void)row;
    return 0;
}

int tw_read_kind(const char *path, tw_file_kind_t *kind, char *err, size_t err_size)
{
    *kind = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, err_size, "cannot open %s: %s", path, strerror(errno));
        return TW_EIO;
    }
    char head[64 * 1024];
    size_t len = fread(head, 1, sizeof head, f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        snprintf(err, err_size, "reading %s: %s", path, strerror(EIO));
        return TW_EIO;
    }
    const char *nl = memchr(head, '\n', len);
    if (len == 0)
        return 0; /* empty: created by a process that died before writing anything */
    if (nl == NULL) {
        if (len == sizeof head) {
            snprintf(err, err_size, "%s is not a TorchWrapper record file: no line end in its first %zu bytes", path,
                     sizeof head);
            return TW_EINVAL;
        }
        nl = head + len - 1; /* a torn first line: judged as such */
    }
    reader_t r;
    tw_read_stats_t local = {0};
    int rc = reader_init(&r, path, ignore_row, NULL, NULL, &local, err, err_size, (size_t)(nl + 1 - head));
    if (rc != 0)
        return rc;
    size_t used;
    rc = process(&r, head, (size_t)(nl + 1 - head), 1, &used);
    free(r.scratch);
    if (rc == 0)
        *kind = r.kind;
    return rc;
}
