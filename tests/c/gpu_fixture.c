/* SPDX-License-Identifier: MIT */
/* The GPU tests' fixture (test_gpu*.c): the fake CUPTI (fake_cupti.c) loaded through
 * TW_CUPTI_LIBRARY as the real one would be, and its controls; a writer with a GPU session on it; the
 * wrapper's part of a call (tw_call_begin, the GPU hooks' push and pop, tw_call_end); and the files
 * read back (GPU rows in CSV or JSON lines, the manifest, summary.json). */
#include "gpu_fixture.h"

#include <csv.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the fake's controls --------------------------------------------------------------------------- */

fake_cupti_t fake;
const char *fake_path;

static void load_fake(void)
{
    void *h = dlopen(fake_path, RTLD_NOW);
    assert_non_null(h);
    struct {
        const char *name;
        void **slot;
    } s[] = {
        {"fake_cupti_reset", (void **)&fake.reset},
        {"fake_cupti_set_busy", (void **)&fake.set_busy},
        {"fake_cupti_set_no_api_records", (void **)&fake.set_no_api_records},
        {"fake_cupti_set_enable_error", (void **)&fake.set_enable_error},
        {"fake_cupti_subscribed", (void **)&fake.subscribed},
        {"fake_cupti_enabled", (void **)&fake.enabled},
        {"fake_cupti_calls", (void **)&fake.calls},
        {"fake_cupti_flushes", (void **)&fake.flushes},
        {"fake_cupti_depth", (void **)&fake.depth},
        {"fake_cupti_now", (void **)&fake.now},
        {"fake_cupti_drop", (void **)&fake.drop},
        {"fake_cupti_launch", (void **)&fake.launch},
        {"fake_cupti_complete_api_buffer", (void **)&fake.complete_api_buffer},
        {"fake_cupti_complete_device_buffer", (void **)&fake.complete_device_buffer},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        *s[i].slot = dlsym(h, s[i].name);
        assert_non_null(*s[i].slot);
    }
}

int load_fake_cupti(void)
{
    fake_path = getenv("FAKE_CUPTI");
    if (fake_path == NULL || access(fake_path, R_OK) != 0) {
        fprintf(stderr, "SKIP: FAKE_CUPTI (the fake CUPTI module) is not set or not readable\n");
        return 77;
    }
    setenv("TW_CUPTI_LIBRARY", fake_path, 1);
    load_fake();
    return 0;
}

/* ---- a writer and a GPU session -------------------------------------------------------------------- */

void open_writer(fixture_t *f, tw_format_t format)
{
    memset(f, 0, sizeof *f);
    strcpy(f->dir, "/tmp/tw-test-gpu-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    static const char *const names[] = {"torch.matmul", "torch.nn.Linear.forward", "torch.conv2d",
                                        "api, \"quoted\""};
    for (int i = 0; i < 4; i++)
        assert_int_equal(tw_api_intern(names[i], &f->api[i]), 0);
    assert_int_equal(tw_recorder_create(&f->rec), 0);
    assert_int_equal(tw_clock_calibrate(&f->clock), 0);
    tw_writer_config_t config = {.out_dir = f->dir, .format = format, .file_max_size = 1 << 20,
                                 .file_name_spec = "serial", .rank = -1};
    char err[512];
    assert_int_equal(tw_writer_create(&config, tw_recorder_queue(f->rec), &f->clock, &f->writer, err, sizeof err), 0);
    f->t = tw_recorder_attach(f->rec);
    assert_non_null(f->t);
}

int start_gpu(fixture_t *f, uint64_t flush_interval_ns, char *reason, size_t size)
{
    tw_gpu_config_t config = {.candidates = NULL, .device_available = 1, .flush_interval_ns = flush_interval_ns};
    tw_gpu_rows_t rows;
    tw_writer_gpu_rows(f->writer, &rows);
    int rc = tw_gpu_start(&config, &rows, &f->clock, &f->gpu, reason, size);
    f->hooks = rc == 0 ? tw_gpu_hooks(f->gpu) : NULL;
    return rc;
}

/* A writer and a GPU session whose flush thread stays out of the way (tests flush themselves). */
void open_fixture(fixture_t *f, tw_format_t format)
{
    fake.reset();
    open_writer(f, format);
    char reason[512] = "";
    int rc = start_gpu(f, 3600ull * 1000000000u, reason, sizeof reason);
    if (rc != 0)
        fail_msg("tw_gpu_start: %s (%s)", tw_strerror(rc), reason);
    assert_non_null(f->hooks);
}

void close_fixture(fixture_t *f)
{
    tw_gpu_stop(f->gpu);
    tw_recorder_collect(f->rec);
    tw_writer_close(f->writer);
}

void free_fixture(fixture_t *f)
{
    tw_gpu_destroy(f->gpu);
    tw_writer_destroy(f->writer);
    tw_recorder_destroy(f->rec);
    rm_rf(f->dir);
}

call_t enter(fixture_t *f, uint32_t api_id)
{
    call_t c = {tw_call_begin(f->t), 0, 0, 0, api_id};
    c.call_id = c.frame->call_id;
    assert_int_equal(f->hooks->push(f->hooks->kind, tw_gpu_external_id(c.call_id, api_id)), 0);
    c.start = tw_clock_ticks(f->clock.source);
    return c;
}

void leave(fixture_t *f, call_t *c)
{
    uint64_t end = c->end = tw_clock_ticks(f->clock.source);
    uint64_t last = 0;
    assert_int_equal(f->hooks->pop(f->hooks->kind, &last), 0);
    assert_int_equal(last, tw_gpu_external_id(c->call_id, c->api_id));
    tw_call_end(f->t, c->frame, c->api_id, c->start, end, 0);
}

void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- reading the files back ------------------------------------------------------------------------ */

static const char *const gpu_columns[] = {"call_id", "api",      "kind",         "name",          "start_ns",
                                          "end_ns",  "device",   "stream",       "correlation_id", "pid",
                                          "launch_start_ns", "launch_end_ns", "launch"};
#define GPU_COLUMNS 13

static void on_gpu_field(void *data, size_t len, void *arg)
{
    gpu_rows_t *r = arg;
    char text[256];
    snprintf(text, sizeof text, "%.*s", (int)(len < 255 ? len : 255), (const char *)data);
    if (r->header) {
        if (r->field >= GPU_COLUMNS || strcmp(text, gpu_columns[r->field]) != 0)
            r->header_ok = 0;
        r->field++;
        return;
    }
    assert_true(r->count < 4096);
    gpu_row_t *row = &r->rows[r->count];
    switch (r->field++) {
    case 0: row->call_id = strtoull(text, NULL, 10); break;
    case 1: snprintf(row->api, sizeof row->api, "%s", text); break;
    case 2: snprintf(row->kind, sizeof row->kind, "%s", text); break;
    case 3: snprintf(row->name, sizeof row->name, "%s", text); break;
    case 4: row->start_ns = strtoll(text, NULL, 10); break;
    case 5: row->end_ns = strtoll(text, NULL, 10); break;
    case 6: row->device = strtoull(text, NULL, 10); break;
    case 7: row->stream = strtoull(text, NULL, 10); break;
    case 8: row->correlation_id = strtoull(text, NULL, 10); break;
    case 9: row->pid = strtoll(text, NULL, 10); break;
    case 10: row->launch_start_ns = strtoll(text, NULL, 10); break;
    case 11: row->launch_end_ns = strtoll(text, NULL, 10); break;
    case 12: snprintf(row->launch, sizeof row->launch, "%s", text); break;
    default: fail_msg("a GPU row has more than %d fields", GPU_COLUMNS);
    }
}

static void on_gpu_row(int c, void *arg)
{
    gpu_rows_t *r = arg;
    if (r->header)
        assert_int_equal(r->field, GPU_COLUMNS);
    else
        assert_int_equal(r->field, GPU_COLUMNS), r->count++;
    r->header = 0;
    r->field = 0;
}

cJSON *read_json(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return NULL;
    char *text = calloc(1, 1 << 22);
    if (fread(text, 1, (1 << 22) - 1, fp) == 0)
        text[0] = '\0';
    fclose(fp);
    cJSON *o = cJSON_Parse(text);
    free(text);
    return o;
}

static char *slurp(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    assert_int_equal(fread(text, 1, (size_t)n, fp), (size_t)n);
    text[n] = '\0';
    fclose(fp);
    *size = (size_t)n;
    return text;
}

/* Every GPU row of the files the manifest lists with "kind": "gpu" (CSV or JSON lines). */
gpu_rows_t *read_gpu_rows(const char *dir)
{
    gpu_rows_t *r = calloc(1, sizeof *r);
    cJSON *m = read_json(dir, "manifest.json");
    assert_non_null(m);
    cJSON *file;
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(m, "files"))
    {
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(file, "kind")), "gpu") != 0)
            continue;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(file, "name"));
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        size_t size;
        char *text = slurp(path, &size);
        if (strstr(name, ".gpu.csv") != NULL) {
            struct csv_parser p;
            assert_int_equal(csv_init(&p, CSV_STRICT | CSV_STRICT_FINI), 0);
            r->header = 1;
            r->header_ok = 1;
            r->field = 0;
            assert_int_equal(csv_parse(&p, text, size, on_gpu_field, on_gpu_row, r), size);
            csv_fini(&p, on_gpu_field, on_gpu_row, r);
            csv_free(&p);
            assert_true(r->header_ok);
        } else {
            assert_non_null(strstr(name, ".gpu.jsonl"));
            for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
                cJSON *o = cJSON_Parse(line);
                assert_non_null(o);
                gpu_row_t *row = &r->rows[r->count++];
                /* Integers read exactly from the text: cJSON keeps numbers as doubles. */
                for (int i = 0; i < GPU_COLUMNS; i++)
                    assert_non_null(cJSON_GetObjectItem(o, gpu_columns[i]));
                row->call_id = strtoull(strstr(line, "\"call_id\":") + 10, NULL, 10);
                snprintf(row->api, sizeof row->api, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "api")));
                snprintf(row->kind, sizeof row->kind, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "kind")));
                snprintf(row->name, sizeof row->name, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")));
                row->start_ns = strtoll(strstr(line, "\"start_ns\":") + 11, NULL, 10);
                row->end_ns = strtoll(strstr(line, "\"end_ns\":") + 9, NULL, 10);
                row->device = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "device"));
                row->stream = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "stream"));
                row->correlation_id = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "correlation_id"));
                row->pid = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "pid"));
                row->launch_start_ns = strtoll(strstr(line, "\"launch_start_ns\":") + 18, NULL, 10);
                row->launch_end_ns = strtoll(strstr(line, "\"launch_end_ns\":") + 16, NULL, 10);
                snprintf(row->launch, sizeof row->launch, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "launch")));
                cJSON_Delete(o);
            }
        }
        free(text);
    }
    cJSON_Delete(m);
    return r;
}

const gpu_row_t *row_of(const gpu_rows_t *r, uint32_t correlation_id)
{
    for (size_t i = 0; i < r->count; i++)
        if (r->rows[i].correlation_id == correlation_id)
            return &r->rows[i];
    fail_msg("no GPU row with correlation id %u", correlation_id);
    return NULL;
}

/* summary.json's gpu_ns of an API (-1 when it is not listed). */
int64_t summary_gpu_ns(const char *dir, const char *api)
{
    cJSON *s = read_json(dir, "summary.json");
    assert_non_null(s);
    int64_t out = -1;
    cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(s, "apis"))
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "api")), api) == 0)
            out = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(a, "gpu_ns"));
    cJSON_Delete(s);
    return out;
}

cJSON *gpu_stream_of_manifest(cJSON *m)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(m, "streams"), "gpu");
}
