/* SPDX-License-Identifier: MIT */
/* The writer tests' fixture: a recorder and a writer in a temporary directory, calls of weird API
 * names, and the files read back (CSV, JSON lines, gzip) for the tests to count. */
#include "writer_fixture.h"

#include <csv.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

const char *const weird_names[] = {
    "torch.add", "torch.Tensor.__add__", "api,with,commas", "api \"with\" quotes", "api\nwith\nnewlines",
    "ünïcödé.名前", " leading and trailing ", "back\\slash\ttab",
};
_Static_assert(sizeof weird_names / sizeof weird_names[0] == WEIRD_COUNT, "WEIRD_COUNT counts weird_names");

void open_fixture(fixture_t *f, tw_writer_config_t config)
{
    strcpy(f->dir, "/tmp/tw-test-writer-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    config.out_dir = f->dir;
    for (size_t i = 0; i < WEIRD_COUNT; i++)
        assert_int_equal(tw_api_intern(weird_names[i], &f->ids[i]), 0);
    assert_int_equal(tw_recorder_create(&f->rec), 0);
    tw_clock_init_manual(&f->clock, TW_CLOCK_MONOTONIC, 0, 1700000000000000000LL, 1.0);
    char err[512] = "";
    assert_int_equal(tw_writer_create(&config, tw_recorder_queue(f->rec), &f->clock, &f->writer, err, sizeof err), 0);
}

void record_calls(tw_recorder_t *rec, const uint32_t *ids, uint64_t n)
{
    tw_thread_t *t = tw_recorder_attach(rec);
    assert_non_null(t);
    for (uint64_t i = 0; i < n; i++) {
        tw_frame_t *frame = tw_call_begin(t);
        tw_call_end(t, frame, ids[i % WEIRD_COUNT], 1000 * i, 1000 * i + 10 + i % 7, i % 5 == 0 ? TW_RECORD_ERROR : 0);
    }
}

void close_fixture(fixture_t *f)
{
    tw_recorder_collect(f->rec);
    tw_writer_close(f->writer);
}

FILE *open_first_records(const fixture_t *f, const char *ext)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tw-%ld-0001%s", f->dir, (long)getpid(), ext);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    return fp;
}

void free_fixture(fixture_t *f)
{
    tw_writer_destroy(f->writer);
    tw_recorder_destroy(f->rec);
    rm_rf(f->dir);
}

static void on_field(void *data, size_t len, void *arg)
{
    readback_t *r = arg;
    if (r->in_header) {
        static const char *const header[] = {"call_id", "api", "start_ns", "cost_ns", "self_ns", "gpu_ns", "pid",
                                             "tid", "depth", "parent_id", "error", "args", "module"};
        if (r->field < 13 && (strlen(header[r->field]) != len || memcmp(header[r->field], data, len) != 0))
            r->header_ok = 0;
    } else if (r->field == 1) {
        size_t i = 0;
        while (i < WEIRD_COUNT && (strlen(weird_names[i]) != len || memcmp(weird_names[i], data, len) != 0))
            i++;
        if (i < WEIRD_COUNT)
            r->per_name[i]++;
        else
            r->unknown++;
    } else if (r->field == 6) {
        char number[32];
        snprintf(number, sizeof number, "%.*s", (int)len, (const char *)data);
        r->pid_rows += strtol(number, NULL, 10) == r->pid;
    }
    r->field++;
}

static void on_row(int c, void *arg)
{
    readback_t *r = arg;
    if (!r->in_header)
        r->rows++;
    r->in_header = 0;
    r->field = 0;
}

static void read_json_line(readback_t *r, const char *line)
{
    cJSON *o = cJSON_Parse(line);
    assert_non_null(o);
    const char *api = cJSON_GetStringValue(cJSON_GetObjectItem(o, "api"));
    assert_non_null(api);
    size_t i = 0;
    while (i < WEIRD_COUNT && strcmp(weird_names[i], api) != 0)
        i++;
    if (i < WEIRD_COUNT)
        r->per_name[i]++;
    else
        r->unknown++;
    if ((long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "pid")) == r->pid)
        r->pid_rows++;
    assert_true(cJSON_IsBool(cJSON_GetObjectItem(o, "error")));
    r->rows++;
    cJSON_Delete(o);
}

/* What gzip data inflates to (malloc'd, NUL-terminated, *out_len bytes); *complete: whether it is
 * whole members and nothing else (a member cut short is read to where its data ends). */
static char *inflate_all(const char *raw, size_t len, size_t *out_len, int *complete)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
    size_t cap = 4 * len + 4096, used = 0;
    char *out = malloc(cap);
    z.next_in = (unsigned char *)raw;
    z.avail_in = (uInt)len;
    int rc = Z_OK;
    *complete = 0;
    while (z.avail_in > 0) {
        if (cap - used < 65536) {
            out = realloc(out, cap *= 2);
            assert_non_null(out);
        }
        z.next_out = (unsigned char *)out + used;
        z.avail_out = (uInt)(cap - used - 1);
        rc = inflate(&z, Z_NO_FLUSH);
        used = (size_t)((char *)z.next_out - out);
        assert_true(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR);
        if (rc == Z_STREAM_END && z.avail_in > 0)
            inflateReset(&z); /* the next member */
        else if (rc == Z_BUF_ERROR && z.avail_out > 0)
            break; /* cut short */
    }
    *complete = rc == Z_STREAM_END;
    inflateEnd(&z);
    out[used] = '\0';
    *out_len = used;
    return out;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

readback_t read_back_data(const char *dir, const char *ext, long pid, int keep_data)
{
    readback_t r;
    memset(&r, 0, sizeof r);
    r.header_ok = 1;
    r.pid = pid;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char path[512];
    char *names[4096];
    size_t count = 0;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < strlen(ext) || strcmp(e->d_name + n - strlen(ext), ext) != 0)
            continue;
        assert_true(count < 4096);
        names[count++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, count, sizeof names[0], compare_names);
    int gz = strlen(ext) > 3 && strcmp(ext + strlen(ext) - 3, ".gz") == 0;
    int csv = strncmp(ext, ".csv", 4) == 0;
    for (size_t k = 0; k < count; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        free(names[k]);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        fseek(fp, 0, SEEK_END);
        long size = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        char *text = malloc((size_t)size + 1);
        assert_int_equal(fread(text, 1, (size_t)size, fp), (size_t)size);
        text[size] = '\0';
        fclose(fp);
        r.files++;
        if ((uint64_t)size > r.max_file_size)
            r.max_file_size = (uint64_t)size;
        if (gz) {
            size_t inflated;
            int complete;
            char *plain = inflate_all(text, (size_t)size, &inflated, &complete);
            r.incomplete += !complete;
            free(text);
            text = plain;
            size = (long)inflated;
        }
        if (keep_data) {
            const char *rows = csv ? strchr(text, '\n') + 1 : text;
            size_t n = (size_t)(text + size - rows);
            r.data = realloc(r.data, r.data_len + n + 1);
            memcpy(r.data + r.data_len, rows, n);
            r.data_len += n;
            r.data[r.data_len] = '\0';
        }
        if (csv) {
            struct csv_parser p;
            assert_int_equal(csv_init(&p, CSV_STRICT | CSV_STRICT_FINI), 0);
            r.in_header = 1;
            r.field = 0;
            assert_int_equal(csv_parse(&p, text, (size_t)size, on_field, on_row, &r), (size_t)size);
            csv_fini(&p, on_field, on_row, &r);
            csv_free(&p);
        } else {
            for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n"))
                read_json_line(&r, line);
        }
        free(text);
    }
    return r;
}

readback_t read_back(const char *dir, const char *ext, long pid)
{
    return read_back_data(dir, ext, pid, 0);
}

cJSON *read_json_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return NULL;
    char *text = calloc(1, 1 << 22);
    size_t n = fread(text, 1, (1 << 22) - 1, fp);
    fclose(fp);
    text[n] = '\0';
    cJSON *o = cJSON_Parse(text);
    free(text);
    return o;
}

/* The resource columns (flops .. mem_peak) cut off a CSV line, its newline kept: the tests of the
 * columns before them read the line's end. */
char *cut_resource_columns(char *line)
{
    for (int i = 0; i < 6; i++) {
        char *comma = strrchr(line, ',');
        assert_non_null(comma);
        *comma = '\0';
    }
    strcat(line, "\n");
    return line;
}
