/* SPDX-License-Identifier: MIT */
/* The record reader on any bytes: CSV (FUZZ_CSV: after a valid header, so rows get explored) or
 * JSON lines. Every row handed out must lie within the input or the reader's scratch, and the
 * counts must add up. With FUZZ_CSV, the splitter is also checked against libcsv. */
#include "fuzz.h"

#include <csv.h>

typedef struct seen {
    uint64_t rows;
    const char *begin, *end;
} seen_t;

static void check_str(tw_str_t s)
{
    /* Touch every byte: ASan reports a string that points outside live memory. */
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < s.len; i++)
        sink ^= (unsigned char)s.ptr[i];
    (void)sink;
}

static int on_row(void *ctx, const tw_row_t *row)
{
    seen_t *seen = ctx;
    seen->rows++;
    check_str(row->api);
    check_str(row->args);
    check_str(row->name);
    check_str(row->gpu_kind);
    FUZZ_CHECK(row->kind == TW_FILE_CALLS || row->kind == TW_FILE_GPU);
    return 0;
}

#ifdef FUZZ_CSV
typedef struct fields {
    char text[64][256];
    size_t len[64];
    size_t n;
    int overflow;
} fields_t;

static void libcsv_field(void *s, size_t len, void *ctx)
{
    fields_t *f = ctx;
    if (f->n >= 64 || len >= 256) {
        f->overflow = 1;
        return;
    }
    memcpy(f->text[f->n], s, len);
    f->len[f->n++] = len;
}

static void libcsv_row(int c, void *ctx)
{
    (void)c;
    (void)ctx;
}

/* Where our splitter accepts a record, libcsv (strict mode) must split it into the same fields.
 * libcsv trims spaces and tabs around unquoted fields and ends records at a lone CR; our writer
 * never writes either outside quotes, so such records are not compared. */
static void compare_with_libcsv(const char *data, size_t size)
{
    tw_str_t ours[64];
    size_t n;
    char scratch[4096];
    long used = tw_csv_split(data, size, ours, 64, &n, scratch, sizeof scratch);
    if (used <= 0 || (n == 1 && ours[0].len == 0))
        return; /* an empty line: libcsv skips it, the reader too */
    int quoted = 0;
    for (long i = 0; i < used; i++) {
        if (data[i] == '"')
            quoted = !quoted;
        else if (!quoted && (data[i] == ' ' || data[i] == '\t' || (data[i] == '\r' && data[i + 1] != '\n')))
            return;
    }
    for (size_t i = 0; i < n; i++)
        if (ours[i].len >= 256)
            return;
    struct csv_parser p;
    if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI) != 0)
        return;
    fields_t theirs = {0};
    size_t parsed = csv_parse(&p, data, (size_t)used, libcsv_field, libcsv_row, &theirs);
    csv_fini(&p, libcsv_field, libcsv_row, &theirs);
    csv_free(&p);
    if (parsed != (size_t)used || theirs.overflow)
        return; /* libcsv's strict mode refuses some records ours accepts (it is stricter on CR) */
    FUZZ_CHECK(theirs.n == n);
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(theirs.len[i] == ours[i].len);
        FUZZ_CHECK(memcmp(theirs.text[i], ours[i].ptr, ours[i].len) == 0);
    }
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
#ifdef FUZZ_CSV
    static const char header[] = "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n";
    compare_with_libcsv((const char *)data, size);
    char *buf = malloc(sizeof header - 1 + size);
    if (buf == NULL)
        return 0;
    memcpy(buf, header, sizeof header - 1);
    memcpy(buf + sizeof header - 1, data, size);
    size += sizeof header - 1;
#else
    /* An exact-size copy: ASan catches any read past the end. */
    char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
#endif
    seen_t seen = {0, buf, buf + size};
    tw_read_stats_t stats = {0};
    char err[512];
    int rc = tw_read_buffer("fuzz", buf, size, on_row, &seen, &stats, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == TW_EINVAL);
    FUZZ_CHECK(stats.rows == seen.rows);
    FUZZ_CHECK(stats.bytes == size);
    FUZZ_CHECK(stats.truncated <= 1);
    if (rc == TW_EINVAL)
        FUZZ_CHECK(strstr(err, "fuzz") != NULL);
    free(buf);
    return 0;
}
