/* SPDX-License-Identifier: MIT */
/* Record text into rows (see reader_parse.h): the CSV splitter, CSV records and JSON lines, and a
 * buffer read at once (tw_read_buffer). The file reader (reader.c) feeds it what it reads. */
#include "config.h"

#include "reader_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CSV --------------------------------------------------------------------------------------- */

/* The bytes that end an unquoted field (a quote there is an error). */
static const unsigned char csv_special[256] = {[','] = 1, ['\n'] = 1, ['"'] = 1};

/* tw_csv_split, and in *quoted the bit 1 << i of each field i < 64 that was quoted: a quoted empty
 * field ("") is text, an unquoted one is no value (the root module vs no module). */
static long csv_split(const char *data, size_t len, tw_str_t *fields, size_t max_fields, size_t *nfields,
                      char *scratch, size_t scratch_size, uint64_t *quoted)
{
    const char *p = data, *end = data + len;
    size_t n = 0, used = 0;
    *nfields = 0;
    *quoted = 0;
    for (;;) {
        if (n == max_fields)
            return -1;
        tw_str_t field;
        if (p < end && *p == '"') {
            if (n < 64)
                *quoted |= 1ull << n;
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

TW_HOT_ALIGNED long tw_csv_split(const char *data, size_t len, tw_str_t *fields, size_t max_fields, size_t *nfields,
                                 char *scratch, size_t scratch_size)
{
    uint64_t quoted;
    return csv_split(data, len, fields, max_fields, nfields, scratch, scratch_size, &quoted);
}

/* ---- records ----------------------------------------------------------------------------------- */

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
    int rc = r->fn(r->ctx, row);
    if (rc == 0 && r->limit != 0 && ++r->delivered == r->limit) {
        r->paused = 1;
        return 1; /* stops process() right after this row */
    }
    return rc;
}

/* Handles one complete CSV record (line end included); quoted: its fields' bits (csv_split). */
static int csv_record(reader_t *r, const tw_str_t *fields, size_t n, uint64_t quoted, const char *raw,
                      size_t raw_len)
{
    if (r->kind == 0) {
        uint64_t present = 0;
        for (size_t i = 0; i < n; i++) {
            r->columns[i] = tw_column_of(fields[i].ptr, fields[i].len);
            present |= 1ull << r->columns[i];
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
    row.step = -1;       /* files older than the step column */
    row.has_module = -1; /* and than the module column */
    /* A row with fewer fields than the header is torn or corrupt; more is a newer writer's. */
    if (n < r->ncolumns) {
        r->stats->malformed++;
        return 0;
    }
    for (size_t i = 0; i < r->ncolumns; i++) {
        if (r->columns[i] == COL_MODULE && fields[i].len == 0 && !(quoted >> i & 1)) {
            row.has_module = 0; /* an empty field: no module; the root module is written "" */
            continue;
        }
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
    row.step = -1;       /* files older than the step column */
    row.has_module = -1; /* and than the module column */
    uint64_t present;
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
    if (row.has_module < 0 && (present & 1ull << COL_MODULE))
        row.has_module = 0; /* "module": null */
    return deliver(r, &row);
}

/* Handles the complete records at the start of data[0..len); *used receives the bytes consumed.
 * At eof, what is left is a torn last record. Aligned, as are the splitter and the number parser:
 * tw-report's rate moved by 4-7% with where the linker happened to put these loops in their cache
 * lines (measured: with process() at offset 48 of a 64-byte block every build was the slow one). */
TW_HOT_ALIGNED int tw_parse(reader_t *r, const char *data, size_t len, int eof, size_t *used)
{
    size_t pos = 0;
    int rc = 0;
    if (r->json < 0 && len > 0) {
        const char *first = tw_skip_ws(data, data + len);
        r->json = first < data + len && *first == '{';
    }
    while (pos < len && pos < r->stop && rc == 0) {
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
        uint64_t quoted;
        long got = csv_split(data + pos, len - pos, fields, MAX_COLUMNS, &n, r->scratch, r->scratch_size, &quoted);
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
        rc = csv_record(r, fields, n, quoted, data + pos, (size_t)got);
        pos += (size_t)got;
    }
    if (rc == 0 && eof && pos < r->stop && pos < len && tw_skip_ws(data + pos, data + len) < data + len) {
        /* A torn last record; if it is the first one, it must at least start like our header. */
        const char *text = tw_skip_ws(data + pos, data + len);
        size_t rest = (size_t)(data + len - text);
        const char *head = r->json ? "{\"call_id\"" : "call_id";
        size_t head_len = strlen(head);
        if (r->kind == 0 && memcmp(text, head, rest < head_len ? rest : head_len) != 0)
            return not_ours(r, "its only line is", text, rest);
        r->stats->truncated++;
    }
    if (rc == 0 && eof && pos < r->stop)
        pos = len;
    *used = pos;
    return rc;
}

int tw_parse_init(reader_t *r, const char *name, tw_row_fn fn, void *ctx, tw_read_stats_t *stats,
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
    r->stop = SIZE_MAX;
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
    int rc = tw_parse_init(&r, name, fn, ctx, stats, &local, err, err_size, len);
    if (rc != 0)
        return rc;
    size_t used;
    rc = tw_parse(&r, data, len, 1, &used);
    r.stats->bytes += len;
    free(r.scratch);
    return rc;
}
