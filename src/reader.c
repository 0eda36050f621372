/* SPDX-License-Identifier: MIT */
/* Reading record files back, in constant memory. See reader.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reader_row.h"
#include "torchwrapper/reader.h"

#define READ_BLOCK (1u << 20)        /* bytes read at a time */
#define RECORD_MAX (64u << 20)       /* a longer record is an error, not a reason to eat all memory */
#define MAX_COLUMNS 64               /* columns per record we look at; more is not one of our files */

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
            r->columns[i] = tw_column_of(fields[i].ptr, fields[i].len);
            present |= 1u << r->columns[i];
        }
        r->ncolumns = n;
        r->kind = tw_kind_of(present);
        if (r->kind == 0)
            return not_ours(r, "its first line is", raw, raw_len);
        return 0;
    }
    if (n == 1 && fields[0].len == 0)
        return 0; /* an empty line */
    tw_row_t row;
    memset(&row, 0, sizeof row);
    row.step = -1; /* files older than the step column */
    /* A row with fewer fields than the header is torn or corrupt; more is a newer writer's. */
    if (n < r->ncolumns) {
        r->stats->malformed++;
        return 0;
    }
    for (size_t i = 0; i < r->ncolumns; i++) {
        if (tw_set_field(&row, r->columns[i], fields[i].ptr, fields[i].len) != 0) {
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
    row.step = -1; /* files older than the step column */
    uint32_t present;
    if (tw_skip_ws(line, line + len) == line + len)
        return 0; /* an empty line */
    if (tw_json_row(line, line + len, &row, &present, r->scratch) != 0) {
        if (r->kind == 0)
            return not_ours(r, "its first line is not a JSON object of records:", line, len);
        r->stats->malformed++;
        return 0;
    }
    if (r->kind == 0) {
        r->kind = tw_kind_of(present);
        if (r->kind == 0)
            return not_ours(r, "its first object is", line, len);
    } else if (tw_kind_of(present) != r->kind) {
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
        const char *first = tw_skip_ws(data, data + len);
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
    if (rc == 0 && eof && pos < len && tw_skip_ws(data + pos, data + len) < data + len) {
        /* A torn last record; if it is the first one, it must at least start like our header. */
        const char *text = tw_skip_ws(data + pos, data + len);
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
