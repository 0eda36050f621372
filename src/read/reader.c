/* SPDX-License-Identifier: MIT */
/* Reading record files back (plain, or gzip members inflated as they are read), in constant memory,
 * a batch of rows at a time, and telling a file's kind from its first line. See reader.h. What the
 * bytes read become, rows, is reader_parse.c's. */
#include "config.h"
#include "torchwrapper/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "reader_parse.h"
#include "reader_row.h"

#define READ_BLOCK (1u << 20)        /* bytes read at a time */
#define RECORD_MAX (64u << 20)       /* a longer record is an error, not a reason to eat all memory */

/* ---- gzip input -------------------------------------------------------------------------------- */

/*
 * A gzip file (compress "gzip", or one gzipped by hand) is read as what it inflates to, member after
 * member (a concatenation of gzip files is one), in constant memory. A member cut short, as a killed
 * writer leaves its last file, ends the content where its data ends: the writer put a sync point at
 * each flush, so that is after the last flush's whole lines (a line cut in the middle is then a torn
 * last record, as in a plain file).
 */
#define GZ_IN (256u << 10) /* compressed bytes read at a time */

typedef struct gz_input {
    z_stream z;
    unsigned char *in;  /* compressed bytes read and not yet inflated: z.next_in, z.avail_in */
    size_t in_size;
    int in_eof;         /* read() said so */
    int member_open;    /* inside a member: its end not seen yet */
} gz_input_t;

static int is_gzip(const char *data, size_t len)
{
    return len >= 2 && (unsigned char)data[0] == 0x1f && (unsigned char)data[1] == 0x8b;
}

/* The input of a file whose first n bytes, already read, are first; NULL when out of memory. */
static gz_input_t *gz_input_new(const char *first, size_t n)
{
    gz_input_t *g = calloc(1, sizeof *g);
    size_t size = n > GZ_IN ? n : GZ_IN;
    if (g == NULL || (g->in = malloc(size)) == NULL || inflateInit2(&g->z, 15 + 16) != Z_OK) {
        if (g != NULL)
            free(g->in);
        free(g);
        return NULL;
    }
    g->in_size = size;
    memcpy(g->in, first, n);
    g->z.next_in = g->in;
    g->z.avail_in = (uInt)n;
    return g;
}

static void gz_input_free(gz_input_t *g)
{
    if (g == NULL)
        return;
    inflateEnd(&g->z);
    free(g->in);
    free(g);
}

/* read(), through EINTR: the bytes read, 0 at the end, or a negative errno value. */
static ssize_t read_raw(int fd, void *buf, size_t n)
{
    for (;;) {
        ssize_t got = read(fd, buf, n);
        if (got >= 0 || errno != EINTR)
            return got >= 0 ? got : -errno;
    }
}

/* Up to n inflated bytes into dst: how many (at least one unless the content ended: 0), or a negative
 * errno value (read's), or TW_EINVAL when the data is not gzip's (a message from zlib in *why). */
static ssize_t gz_read(gz_input_t *g, int fd, char *dst, size_t n, const char **why)
{
    z_stream *z = &g->z;
    z->next_out = (unsigned char *)dst;
    z->avail_out = (uInt)(n < UINT_MAX ? n : UINT_MAX);
    uInt want = z->avail_out;
    while (z->avail_out == want) {
        if (z->avail_in == 0) {
            if (g->in_eof)
                break; /* the end; inside a member: one cut short, whose data ends here */
            ssize_t got = read_raw(fd, g->in, g->in_size);
            if (got < 0)
                return got;
            g->in_eof = got == 0;
            z->next_in = g->in;
            z->avail_in = (uInt)got;
            continue;
        }
        if (!g->member_open) {
            inflateReset(z); /* the next member */
            g->member_open = 1;
        }
        int rc = inflate(z, Z_NO_FLUSH);
        if (rc == Z_STREAM_END)
            g->member_open = 0;
        else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            *why = z->msg != NULL ? z->msg : "corrupt data";
            return TW_EINVAL;
        }
    }
    return (ssize_t)(want - z->avail_out);
}

/* The first size bytes (or fewer) of what the file at path holds, inflated when it is gzip, into
 * head: *len receives how many, *gz whether it was gzip. 0, TW_EIO (errno kept) or TW_EINVAL (corrupt
 * gzip data) with a message in err. */
static int read_prefix(const char *path, char *head, size_t size, size_t *len, int *gz, char *err, size_t err_size)
{
    *len = 0;
    *gz = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int saved = errno;
        snprintf(err, err_size, "cannot open %s: %s", path, strerror(saved));
        errno = saved;
        return TW_EIO;
    }
    ssize_t got = 0;
    while ((size_t)got < size) {
        ssize_t more = read_raw(fd, head + got, size - (size_t)got);
        if (more <= 0) {
            got = more < 0 ? more : got;
            break;
        }
        got += more;
    }
    int rc = 0;
    const char *why = NULL;
    if (got > 0 && is_gzip(head, (size_t)got)) {
        *gz = 1;
        gz_input_t *g = gz_input_new(head, (size_t)got);
        got = g == NULL ? TW_ENOMEM : 0;
        while (g != NULL && (size_t)got < size) {
            ssize_t more = gz_read(g, fd, head + got, size - (size_t)got, &why);
            if (more <= 0) {
                got = more < 0 ? more : got;
                break;
            }
            got += more;
        }
        gz_input_free(g);
    }
    close(fd);
    if (got == TW_EINVAL) {
        snprintf(err, err_size, "%s: its gzip data is corrupt (%s)", path, why);
        rc = TW_EINVAL;
    } else if (got < 0) {
        snprintf(err, err_size, "reading %s: %s", path, tw_strerror((int)got));
        rc = got == TW_ENOMEM ? TW_ENOMEM : TW_EIO;
    } else {
        *len = (size_t)got;
    }
    return rc;
}

/* ---- a file read a batch of rows at a time --------------------------------------------------------- */

struct tw_reader {
    reader_t r;
    tw_read_stats_t local;  /* the counters when the caller gave none */
    char *path;
    int fd;
    char *buf;              /* have bytes not yet consumed, from buf[0] */
    gz_input_t *gz;         /* a gzip file: its bytes inflated as they are read; NULL: as they are */
    int sniffed;            /* the first bytes were looked at (gzip's magic) */
    size_t capacity, have;
    int eof;                /* read() said so: what is left in buf is all there is */
    int done;               /* every row was delivered */
    int failed;             /* the error that ended the reading, returned again by later calls */
    uint64_t pos;           /* the file offset of buf[0] */
    /* A byte range (tw_reader_open_range): the records that start in [from, range_end). */
    int ranged;
    int skipping;           /* from > 0: the bytes up to the first line end are the previous range's */
    uint64_t range_end;
    uint64_t first, end;    /* where the range's records begin and end (end: once done) */
};

int tw_reader_open(const char *path, tw_read_stats_t *stats, tw_reader_t **out, char *err, size_t err_size)
{
    *out = NULL;
    tw_reader_t *rd = calloc(1, sizeof *rd);
    char *copy = rd != NULL ? strdup(path) : NULL;
    char *buf = copy != NULL ? malloc(READ_BLOCK) : NULL;
    if (buf == NULL) {
        snprintf(err, err_size, "reading %s: %s", path, tw_strerror(TW_ENOMEM));
        free(copy);
        free(rd);
        return TW_ENOMEM;
    }
    int rc = tw_parse_init(&rd->r, copy, NULL, NULL, stats, &rd->local, err, err_size, READ_BLOCK);
    if (rc != 0) {
        free(buf);
        free(copy);
        free(rd);
        return rc;
    }
    rd->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (rd->fd < 0) {
        int saved = errno;
        snprintf(err, err_size, "cannot open %s: %s", path, strerror(saved));
        free(rd->r.scratch);
        free(buf);
        free(copy);
        free(rd);
        errno = saved; /* for callers that raise by errno (FileNotFoundError) */
        return TW_EIO;
    }
    rd->path = copy;
    rd->buf = buf;
    rd->capacity = READ_BLOCK;
    *out = rd;
    return 0;
}

static int read_head(const char *path, tw_file_kind_t *kind, int streams, reader_t *keep, char *err,
                     size_t err_size);

int tw_reader_open_range(const char *path, uint64_t offset, uint64_t length, tw_read_stats_t *stats,
                         tw_reader_t **out, char *err, size_t err_size)
{
    *out = NULL;
    reader_t head;
    tw_file_kind_t kind;
    int rc = 0;
    if (offset > 0 && (rc = read_head(path, &kind, 0, &head, err, err_size)) == 0 && kind == 0) {
        snprintf(err, err_size, "%s: no header line to read a range of it with", path);
        rc = TW_EINVAL;
    } else if (offset > 0 && rc == 0 && head.gz) {
        snprintf(err, err_size, "%s: a compressed file is read whole, not by byte ranges", path);
        rc = TW_EINVAL;
    }
    tw_reader_t *rd = NULL;
    if (rc != 0 || (rc = tw_reader_open(path, stats, &rd, err, err_size)) != 0)
        return rc;
    rd->ranged = 1;
    rd->range_end = length < UINT64_MAX - offset ? offset + length : UINT64_MAX;
    if (offset > 0) {
        /* The column order is the header's; the first record is the first line that starts at or
         * after offset: after the first line end found from offset - 1 on. */
        rd->r.json = head.json;
        rd->r.kind = head.kind;
        memcpy(rd->r.columns, head.columns, sizeof head.columns);
        rd->r.ncolumns = head.ncolumns;
        rd->skipping = 1;
        rd->sniffed = 1; /* not at the file's start: no magic to look for */
        rd->pos = offset - 1;
        if (lseek(rd->fd, (off_t)(offset - 1), SEEK_SET) < 0) {
            snprintf(err, err_size, "reading %s: %s", path, strerror(errno));
            tw_reader_close(rd);
            return TW_EIO;
        }
    }
    *out = rd;
    return 0;
}

void tw_reader_range(const tw_reader_t *rd, uint64_t *first, uint64_t *end)
{
    *first = rd->first;
    *end = rd->end;
}

/* Reads more of the file into the buffer, growing it when one record fills it. */
static int fill(tw_reader_t *rd)
{
    reader_t *r = &rd->r;
    if (rd->have == rd->capacity) {
        /* One record longer than the buffer: grow, within reason. */
        if (rd->capacity >= RECORD_MAX) {
            snprintf(r->err, r->err_size, "%s: a record longer than %u MiB at byte %llu: not a record file?",
                     rd->path, RECORD_MAX >> 20, (unsigned long long)r->stats->bytes);
            return TW_EINVAL;
        }
        char *bigger = realloc(rd->buf, rd->capacity * 2);
        if (bigger != NULL)
            rd->buf = bigger;
        char *scratch = bigger != NULL ? realloc(r->scratch, rd->capacity * 2) : NULL;
        if (scratch == NULL) {
            snprintf(r->err, r->err_size, "reading %s: %s", rd->path, tw_strerror(TW_ENOMEM));
            return TW_ENOMEM;
        }
        r->scratch = scratch;
        rd->capacity *= 2;
        r->scratch_size = rd->capacity;
    }
    char *dst = rd->buf + rd->have;
    size_t room = rd->capacity - rd->have;
    const char *why = NULL;
    ssize_t got;
    if (rd->gz != NULL) {
        got = gz_read(rd->gz, rd->fd, dst, room, &why);
    } else {
        got = read_raw(rd->fd, dst, room);
        if (!rd->sniffed && got > 0) {
            rd->sniffed = 1;
            if (is_gzip(dst, (size_t)got)) { /* from here on, what it inflates to */
                rd->gz = gz_input_new(dst, (size_t)got);
                got = rd->gz != NULL ? gz_read(rd->gz, rd->fd, dst, room, &why) : TW_ENOMEM;
            }
        }
    }
    if (got == TW_EINVAL) {
        snprintf(r->err, r->err_size, "%s: its gzip data is corrupt after %llu bytes of records (%s)", rd->path,
                 (unsigned long long)(rd->pos + rd->have), why);
        return TW_EINVAL;
    }
    if (got < 0) {
        snprintf(r->err, r->err_size, "reading %s: %s", rd->path, tw_strerror((int)got));
        return got == TW_ENOMEM ? TW_ENOMEM : TW_EIO;
    }
    rd->eof = got == 0;
    rd->have += (size_t)got;
    if (!rd->ranged) /* a range counts its records' bytes, once done: it reads past its end */
        r->stats->bytes += (uint64_t)got; /* of a gzip file, what it inflated to */
    return 0;
}

/* A range that starts inside the file: drops what the buffer holds up to and including the first
 * line end (the previous range's last record, or a part of it), or all of it when there is none. */
static void skip_to_line(tw_reader_t *rd)
{
    const char *nl = memchr(rd->buf, '\n', rd->have);
    size_t n = nl != NULL ? (size_t)(nl + 1 - rd->buf) : rd->have;
    memmove(rd->buf, rd->buf + n, rd->have - n);
    rd->have -= n;
    rd->pos += n;
    if (nl != NULL || rd->eof) {
        rd->skipping = 0;
        rd->first = rd->pos;
    }
}

int tw_reader_next(tw_reader_t *rd, tw_row_fn fn, void *ctx, size_t max_rows, int *more, char *err,
                   size_t err_size)
{
    reader_t *r = &rd->r;
    *more = 0;
    if (rd->failed != 0) {
        snprintf(err, err_size, "%s: reading already failed", rd->path);
        return rd->failed;
    }
    r->fn = fn;
    r->ctx = ctx;
    r->err = err;
    r->err_size = err_size;
    r->limit = max_rows;
    r->delivered = 0;
    r->paused = 0;
    int rc = 0;
    while (!rd->done) {
        if (rd->skipping)
            skip_to_line(rd);
        /* What the last call left (it paused), or what was just read. */
        if (!rd->skipping && (rd->have > 0 || rd->eof)) {
            size_t used = 0;
            if (rd->ranged) {
                uint64_t left = rd->range_end > rd->pos ? rd->range_end - rd->pos : 0;
                r->stop = left < SIZE_MAX ? (size_t)left : SIZE_MAX;
            }
            rc = tw_parse(r, rd->buf, rd->have, rd->eof, &used);
            memmove(rd->buf, rd->buf + used, rd->have - used);
            rd->have -= used;
            rd->pos += used;
            if (r->paused) {
                *more = 1;
                return 0;
            }
            if (rc != 0)
                break;
            if (rd->eof || (rd->ranged && rd->pos >= rd->range_end)) {
                rd->done = 1;
                if (rd->ranged) {
                    rd->end = rd->pos;
                    r->stats->bytes += rd->end - rd->first;
                }
                break;
            }
        }
        if ((rc = fill(rd)) != 0)
            break;
    }
    if (rc < 0)
        rd->failed = rc;
    return rc;
}

tw_file_kind_t tw_reader_kind(const tw_reader_t *rd)
{
    return rd->r.kind;
}

const tw_read_stats_t *tw_reader_stats(const tw_reader_t *rd)
{
    return rd->r.stats;
}

void tw_reader_close(tw_reader_t *rd)
{
    if (rd == NULL)
        return;
    close(rd->fd);
    gz_input_free(rd->gz);
    free(rd->r.scratch);
    free(rd->buf);
    free(rd->path);
    free(rd);
}

int tw_read_file(const char *path, tw_row_fn fn, void *ctx, tw_read_stats_t *stats, char *err, size_t err_size)
{
    tw_reader_t *rd;
    int rc = tw_reader_open(path, stats, &rd, err, err_size), more;
    if (rc != 0)
        return rc;
    rc = tw_reader_next(rd, fn, ctx, 0, &more, err, err_size);
    tw_reader_close(rd);
    return rc;
}

static int ignore_row(void *ctx, const tw_row_t *row)
{
    (void)ctx;
    (void)row;
    return 0;
}

/* Whether the first line (CSV header or JSON object, torn or whole) names every key of keys: a
 * model watch's stream's, which the record reader does not read (their rows are no tw_row_t). */
static int names_keys(const char *line, size_t len, int json, const char *const *keys)
{
    tw_str_t fields[MAX_COLUMNS];
    size_t n = 0;
    char scratch[4096];
    if (!json && tw_csv_split(line, len, fields, MAX_COLUMNS, &n, scratch, sizeof scratch) <= 0)
        return 0;
    for (; *keys != NULL; keys++) {
        size_t key_len = strlen(*keys);
        int found = 0;
        for (size_t i = 0; !json && i < n && !found; i++)
            found = fields[i].len == key_len && memcmp(fields[i].ptr, *keys, key_len) == 0;
        /* JSON: "key" then a colon; a string value cannot hold that unescaped. */
        for (const char *p = line, *end = line + len; json && !found && p < end;) {
            const char *q = memchr(p, '"', (size_t)(end - p));
            if (q == NULL || (size_t)(end - q) < key_len + 2)
                break;
            if (memcmp(q + 1, *keys, key_len) == 0 && q[key_len + 1] == '"') {
                const char *after = tw_skip_ws(q + key_len + 2, end);
                while (after < end && *after == '\n')
                    after++;
                found = after < end && *after == ':';
            }
            p = q + 1;
        }
        if (!found)
            return 0;
    }
    return 1;
}

/* The kind of the file at path from its first line; keep (may be NULL) receives what the reader
 * learnt from it (CSV or JSON, the kind, the column order), for tw_reader_open_range. */
static int read_head(const char *path, tw_file_kind_t *kind, int streams, reader_t *keep, char *err,
                     size_t err_size)
{
    *kind = 0;
    char head[64 * 1024];
    size_t len;
    int gz;
    int rc = read_prefix(path, head, sizeof head, &len, &gz, err, err_size);
    if (rc != 0)
        return rc;
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
    rc = tw_parse_init(&r, path, ignore_row, NULL, NULL, &local, err, err_size, (size_t)(nl + 1 - head));
    if (rc != 0)
        return rc;
    r.gz = gz;
    size_t used, line_len = (size_t)(nl + 1 - head);
    rc = tw_parse(&r, head, line_len, 1, &used);
    free(r.scratch);
    r.scratch = NULL;
    if (keep != NULL)
        *keep = r;
    if (rc == 0)
        *kind = r.kind;
    /* not ours as records (or a torn first line, judged by the keys it has) */
    if (streams && (rc == TW_EINVAL || (rc == 0 && r.kind == 0))) {
        static const char *const stats[] = {"call_id", "step", "module", "tensor", NULL};
        static const char *const updates[] = {"call_id", "parameter", "version", NULL};
        if (head[line_len - 1] != '\n')
            head[line_len++] = '\n'; /* a torn first line (there is room: it ended before the buffer) */
        const char *first = tw_skip_ws(head, head + line_len);
        int json = first < head + line_len && *first == '{';
        if (names_keys(head, line_len, json, stats))
            *kind = TW_FILE_STATS;
        else if (names_keys(head, line_len, json, updates))
            *kind = TW_FILE_UPDATES;
        if (*kind != 0 && rc != 0) {
            err[0] = '\0';
            rc = 0;
        }
    }
    return rc;
}

int tw_read_kind(const char *path, tw_file_kind_t *kind, char *err, size_t err_size)
{
    return read_head(path, kind, 0, NULL, err, err_size);
}

int tw_read_any_kind(const char *path, tw_file_kind_t *kind, char *err, size_t err_size)
{
    return read_head(path, kind, 1, NULL, err, err_size);
}
