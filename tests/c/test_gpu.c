/* SPDX-License-Identifier: MIT */
/*
 * GPU timing against the fake CUPTI (fake_cupti.c), loaded through TW_CUPTI_LIBRARY as the real one
 * would be. The tests play the wrapper (tw_call_begin, the GPU hooks' push and pop, tw_call_end)
 * and the GPU (fake_cupti_launch, and when buffers come back), then read the files back.
 */
#include "tw_test.h"

#include <cjson/cJSON.h>
#include <csv.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "torchwrapper/gpu.h"

/* ---- the fake's controls --------------------------------------------------------------------------- */

static struct {
    void (*reset)(void);
    void (*set_busy)(int);
    void (*set_no_api_records)(int);
    void (*set_enable_error)(int);
    int (*subscribed)(void);
    uint64_t (*enabled)(void);
    uint64_t (*calls)(void);
    uint64_t (*flushes)(void);
    unsigned (*depth)(int);
    uint64_t (*now)(void);
    void (*drop)(size_t);
    uint32_t (*launch)(int, const char *, int, uint64_t, uint64_t, uint32_t, uint32_t);
    void (*complete_api_buffer)(void);
    void (*complete_device_buffer)(void);
} fake;

static const char *fake_path;

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

enum { KERNEL = 0, MEMCPY = 1, MEMSET = 2 };

/* ---- a writer and a GPU session -------------------------------------------------------------------- */

typedef struct {
    char dir[256];
    tw_recorder_t *rec;
    tw_writer_t *writer;
    tw_clock_t clock;
    tw_gpu_t *gpu;
    const tw_gpu_hooks_t *hooks;
    tw_thread_t *t;
    uint32_t api[4]; /* "torch.matmul", "torch.nn.Linear.forward", "torch.conv2d", "api, \"quoted\"" */
} fixture_t;

static void open_writer(fixture_t *f, tw_format_t format)
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

static int start_gpu(fixture_t *f, uint64_t flush_interval_ns, char *reason, size_t size)
{
    tw_gpu_config_t config = {.candidates = NULL, .device_available = 1, .flush_interval_ns = flush_interval_ns};
    int rc = tw_gpu_start(&config, f->writer, &f->clock, &f->gpu, reason, size);
    f->hooks = rc == 0 ? tw_gpu_hooks(f->gpu) : NULL;
    return rc;
}

/* A writer and a GPU session whose flush thread stays out of the way (tests flush themselves). */
static void open_fixture(fixture_t *f, tw_format_t format)
{
    fake.reset();
    open_writer(f, format);
    char reason[512] = "";
    int rc = start_gpu(f, 3600ull * 1000000000u, reason, sizeof reason);
    if (rc != 0)
        fail_msg("tw_gpu_start: %s (%s)", tw_strerror(rc), reason);
    assert_non_null(f->hooks);
}

static void close_fixture(fixture_t *f)
{
    tw_gpu_stop(f->gpu);
    tw_recorder_collect(f->rec);
    tw_writer_close(f->writer);
}

static void free_fixture(fixture_t *f)
{
    tw_gpu_destroy(f->gpu);
    tw_writer_destroy(f->writer);
    tw_recorder_destroy(f->rec);
    rm_rf(f->dir);
}

/* The wrapper's part: enter a call of api (push), ... leave it (pop, record). */
typedef struct {
    tw_frame_t *frame;
    uint64_t start;
    uint64_t end;
    uint64_t call_id;
    uint32_t api_id;
} call_t;

static call_t enter(fixture_t *f, uint32_t api_id)
{
    call_t c = {tw_call_begin(f->t), 0, 0, 0, api_id};
    c.call_id = c.frame->call_id;
    assert_int_equal(f->hooks->push(f->hooks->kind, tw_gpu_external_id(c.call_id, api_id)), 0);
    c.start = tw_clock_ticks(f->clock.source);
    return c;
}

static void leave(fixture_t *f, call_t *c)
{
    uint64_t end = c->end = tw_clock_ticks(f->clock.source);
    uint64_t last = 0;
    assert_int_equal(f->hooks->pop(f->hooks->kind, &last), 0);
    assert_int_equal(last, tw_gpu_external_id(c->call_id, c->api_id));
    tw_call_end(f->t, c->frame, c->api_id, c->start, end, 0);
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- reading the files back ------------------------------------------------------------------------ */

typedef struct {
    uint64_t call_id;
    char api[256];
    char kind[256];
    char name[256];
    int64_t start_ns;
    int64_t end_ns;
    uint64_t device;
    uint64_t stream;
    uint64_t correlation_id;
    int64_t pid;
    int64_t launch_start_ns; /* the CUDA call that launched it */
    int64_t launch_end_ns;
    char launch[64];
} gpu_row_t;

typedef struct {
    gpu_row_t rows[4096];
    size_t count;
    int field;
    int header;
    int header_ok;
} gpu_rows_t;

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

static cJSON *read_json(const char *dir, const char *name)
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
static gpu_rows_t *read_gpu_rows(const char *dir)
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

static const gpu_row_t *row_of(const gpu_rows_t *r, uint32_t correlation_id)
{
    for (size_t i = 0; i < r->count; i++)
        if (r->rows[i].correlation_id == correlation_id)
            return &r->rows[i];
    fail_msg("no GPU row with correlation id %u", correlation_id);
    return NULL;
}

/* summary.json's gpu_ns of an API (-1 when it is not listed). */
static int64_t summary_gpu_ns(const char *dir, const char *api)
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

static cJSON *gpu_stream_of_manifest(cJSON *m)
{
    return cJSON_GetObjectItem(cJSON_GetObjectItem(m, "streams"), "gpu");
}

/* ---- tests: why GPU timing is unavailable ---------------------------------------------------------- */

/* First: the library is loaded once per process, so a bad path must be tried before the fake. */
static void an_unusable_cupti_library_is_named_in_the_reason(void **state)
{
    fixture_t f;
    open_writer(&f, TW_FORMAT_CSV);
    char reason[2048];
    setenv("TW_CUPTI_LIBRARY", "/no/such/libcupti.so", 1);
    assert_int_equal(start_gpu(&f, 0, reason, sizeof reason), TW_EUNAVAIL);
    assert_non_null(strstr(reason, "TW_CUPTI_LIBRARY=/no/such/libcupti.so cannot be used"));
    setenv("TW_CUPTI_LIBRARY", "libc.so.6", 1); /* loads, but is no CUPTI */
    assert_int_equal(start_gpu(&f, 0, reason, sizeof reason), TW_EUNAVAIL);
    assert_non_null(strstr(reason, "not a CUPTI library"));
    assert_string_equal(tw_gpu_library_path(), "");
    setenv("TW_CUPTI_LIBRARY", fake_path, 1);
    assert_null(f.gpu);
    close_fixture(&f);
    free_fixture(&f);
}

static void no_device_means_unavailable_and_nothing_left_behind(void **state)
{
    fixture_t f;
    fake.reset();
    open_writer(&f, TW_FORMAT_CSV);
    tw_gpu_config_t config = {.device_available = 0};
    char reason[512];
    assert_int_equal(tw_gpu_start(&config, f.writer, &f.clock, &f.gpu, reason, sizeof reason), TW_EUNAVAIL);
    assert_string_equal(reason, "no CUDA device (torch.cuda.is_available() is False)");
    assert_null(f.gpu);
    assert_string_equal(tw_gpu_library_path(), fake_path); /* loaded, then found no device */
    assert_int_equal(fake.subscribed(), 0);
    assert_int_equal(fake.enabled(), 0);
    close_fixture(&f);
    cJSON *m = read_json(f.dir, "manifest.json");
    assert_null(gpu_stream_of_manifest(m)); /* no GPU files, CPU records as usual */
    cJSON_Delete(m);
    free_fixture(&f);
}

static void cupti_refusing_to_enable_is_reported_with_its_error(void **state)
{
    fixture_t f;
    fake.reset();
    open_writer(&f, TW_FORMAT_CSV);
    fake.set_enable_error(CUPTI_ERROR_NOT_INITIALIZED); /* what the real CUPTI says without a GPU */
    char reason[512];
    assert_int_equal(start_gpu(&f, 0, reason, sizeof reason), TW_EUNAVAIL);
    assert_non_null(strstr(reason, "cuptiActivityEnable(CONCURRENT_KERNEL) failed: CUPTI_ERROR_NOT_INITIALIZED"));
    assert_non_null(strstr(reason, "no usable GPU"));
    assert_int_equal(fake.subscribed(), 0);
    assert_int_equal(fake.enabled(), 0);
    fake.reset();
    close_fixture(&f);
    free_fixture(&f);
}

static void another_subscriber_means_cpu_only_profiling(void **state)
{
    fixture_t f;
    fake.reset();
    open_writer(&f, TW_FORMAT_CSV);
    fake.set_busy(1); /* torch.profiler, Nsight... */
    char reason[512];
    assert_int_equal(start_gpu(&f, 0, reason, sizeof reason), TW_EBUSY);
    assert_non_null(strstr(reason, "another CUPTI client holds CUPTI (torch.profiler"));
    assert_int_equal(fake.enabled(), 0);
    tw_frame_t *frame = tw_call_begin(f.t); /* CPU profiling goes on */
    tw_call_end(f.t, frame, f.api[0], 1, 2, 0);
    close_fixture(&f);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, 1);
    fake.reset();
    free_fixture(&f);
}

static void a_second_gpu_session_at_once_is_refused(void **state)
{
    fixture_t a, b;
    open_fixture(&a, TW_FORMAT_CSV);
    open_writer(&b, TW_FORMAT_CSV);
    char reason[512];
    assert_int_equal(start_gpu(&b, 0, reason, sizeof reason), TW_EBUSY);
    assert_non_null(strstr(reason, "another profiling session of this process is timing the GPU"));
    close_fixture(&a);
    assert_int_equal(start_gpu(&b, 0, reason, sizeof reason), 0); /* once the first stopped */
    close_fixture(&b);
    free_fixture(&a);
    free_fixture(&b);
}

/* ---- tests: attribution ----------------------------------------------------------------------------- */

static void external_ids_carry_the_call_and_the_api(void **state)
{
    uint64_t id = tw_gpu_external_id(123456789, (1u << 20) - 1);
    assert_int_equal(tw_gpu_external_call_id(id), 123456789);
    assert_int_equal(tw_gpu_external_api_id(id), (1u << 20) - 1);
    id = tw_gpu_external_id(TW_GPU_CALL_MASK, 7);
    assert_int_equal(tw_gpu_external_call_id(id), TW_GPU_CALL_MASK);
    assert_int_equal(tw_gpu_external_api_id(id), 7);
    id = tw_gpu_external_id(TW_GPU_CALL_MASK + 1, 7); /* does not fit: the API only */
    assert_int_equal(tw_gpu_external_call_id(id), 0);
    assert_int_equal(tw_gpu_external_api_id(id), 7);
}

static void check_attribution(tw_format_t format)
{
    fixture_t f;
    open_fixture(&f, format);
    call_t c = enter(&f, f.api[3]);
    sleep_us(2000);
    uint64_t t0 = fake.now();
    uint32_t k = fake.launch(KERNEL, "gemm_kernel<float, 128>", 0, t0, t0 + 5000, 1, 7);
    uint32_t m = fake.launch(MEMCPY, NULL, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, t0 + 6000, t0 + 6500, 1, 7);
    uint32_t s = fake.launch(MEMSET, NULL, 0, t0 + 7000, t0 + 7100, 1, 8);
    assert_true(k != 0 && m != 0 && s != 0);
    sleep_us(2000);
    leave(&f, &c);
    assert_int_equal(tw_gpu_flush(f.gpu, 0), 0);
    close_fixture(&f);

    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, 3);
    const gpu_row_t *kr = row_of(r, k), *mr = row_of(r, m), *sr = row_of(r, s);
    for (const gpu_row_t *row = r->rows; row < r->rows + 3; row++) {
        assert_int_equal(row->call_id, c.call_id);
        assert_string_equal(row->api, "api, \"quoted\"");
        assert_int_equal(row->pid, getpid());
        assert_int_equal(row->device, 1);
    }
    assert_string_equal(kr->kind, "kernel");
    assert_string_equal(kr->name, "gemm_kernel<float, 128>");
    assert_int_equal(kr->stream, 7);
    assert_int_equal(kr->end_ns - kr->start_ns, 5000); /* durations exact */
    assert_string_equal(mr->kind, "memcpy");
    assert_string_equal(mr->name, "memcpy HtoD");
    assert_int_equal(mr->end_ns - mr->start_ns, 500);
    assert_string_equal(sr->kind, "memset");
    assert_int_equal(sr->stream, 8);
    assert_int_equal(sr->start_ns - kr->start_ns, 7000);
    /* CUPTI's clock was calibrated against ours: the kernel, launched at least 2 ms after the call
     * began and 2 ms before it ended, starts inside the call's record with 1 ms to spare either way
     * (a thousand times the calibration's error). */
    assert_true(kr->start_ns > tw_clock_epoch_ns(&f.clock, c.start) + 1000000);
    assert_true(kr->start_ns < tw_clock_epoch_ns(&f.clock, c.end) - 1000000);
    /* each row names the CUDA call that launched it (the fake's API records last 1 us), made while
     * the call ran */
    assert_string_equal(kr->launch, "cudaLaunchKernel");
    assert_string_equal(mr->launch, "cudaMemcpyAsync");
    assert_string_equal(sr->launch, "cudaMemsetAsync");
    for (const gpu_row_t *row = r->rows; row < r->rows + 3; row++) {
        assert_int_equal(row->launch_end_ns - row->launch_start_ns, 1000);
        assert_true(row->launch_start_ns > tw_clock_epoch_ns(&f.clock, c.start) + 1000000);
        assert_true(row->launch_end_ns < tw_clock_epoch_ns(&f.clock, c.end) - 1000000);
    }
    assert_int_equal(summary_gpu_ns(f.dir, "api, \"quoted\""), 5000 + 500 + 100);
    tw_gpu_stats_t gs;
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 1);
    assert_int_equal(gs.memcpys, 1);
    assert_int_equal(gs.memsets, 1);
    assert_int_equal(gs.unattributed, 0);
    free(r);
    free_fixture(&f);
}

static void kernels_copies_and_memsets_are_attributed_to_their_call_csv(void **state)
{
    check_attribution(TW_FORMAT_CSV);
}

static void kernels_copies_and_memsets_are_attributed_to_their_call_json(void **state)
{
    check_attribution(TW_FORMAT_JSON);
}

static void nested_calls_attribute_work_to_the_innermost(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    uint64_t t0 = fake.now();
    call_t outer = enter(&f, f.api[1]);
    uint32_t k1 = fake.launch(KERNEL, "before", 0, t0, t0 + 100, 0, 1);
    call_t inner = enter(&f, f.api[0]);
    uint32_t k2 = fake.launch(KERNEL, "inside", 0, t0 + 200, t0 + 1200, 0, 1);
    leave(&f, &inner);
    uint32_t k3 = fake.launch(KERNEL, "after", 0, t0 + 2000, t0 + 2010, 0, 1);
    leave(&f, &outer);
    assert_int_equal(fake.depth(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2), 0); /* balanced */
    close_fixture(&f);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, 3);
    assert_int_equal(row_of(r, k1)->call_id, outer.call_id);
    assert_int_equal(row_of(r, k2)->call_id, inner.call_id);
    assert_int_equal(row_of(r, k3)->call_id, outer.call_id);
    assert_string_equal(row_of(r, k2)->api, "torch.matmul");
    /* per-API totals are exclusive: each API gets the work of its own calls */
    assert_int_equal(summary_gpu_ns(f.dir, "torch.nn.Linear.forward"), 110);
    assert_int_equal(summary_gpu_ns(f.dir, "torch.matmul"), 1000);
    free(r);
    free_fixture(&f);
}

static void records_arriving_after_the_call_returned_are_attributed(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    uint64_t t0 = fake.now();
    call_t c = enter(&f, f.api[2]);
    uint32_t k = fake.launch(KERNEL, "conv", 0, t0, t0 + 300, 0, 1); /* asynchronous: runs later */
    leave(&f, &c);
    for (int i = 0; i < 10; i++) { /* the program goes on */
        call_t other = enter(&f, f.api[0]);
        leave(&f, &other);
    }
    tw_recorder_collect(f.rec);
    tw_gpu_stats_t gs;
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 0); /* nothing delivered yet */
    assert_int_equal(tw_gpu_flush(f.gpu, 0), 0);
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 1);
    close_fixture(&f);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, 1);
    assert_int_equal(row_of(r, k)->call_id, c.call_id);
    assert_string_equal(row_of(r, k)->api, "torch.conv2d");
    free(r);
    free_fixture(&f);
}

static void out_of_order_buffers_are_matched(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    uint64_t t0 = fake.now();
    call_t c = enter(&f, f.api[0]);
    uint32_t k = fake.launch(KERNEL, "k", 0, t0, t0 + 42, 0, 1);
    leave(&f, &c);
    fake.complete_device_buffer(); /* the kernel before the correlation of its launch */
    tw_gpu_stats_t gs;
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.buffers, 1);
    assert_int_equal(gs.kernels, 0); /* waiting for its correlation */
    fake.complete_api_buffer();
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 1);
    assert_int_equal(gs.unattributed, 0);
    close_fixture(&f);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, 1);
    assert_int_equal(row_of(r, k)->call_id, c.call_id);
    free(r);
    free_fixture(&f);
}

static void work_launched_outside_any_call_is_written_unattributed(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    uint64_t t0 = fake.now();
    uint32_t k = fake.launch(KERNEL, "autograd_thread_kernel", 0, t0, t0 + 77, 0, 3); /* nothing pushed */
    fake.complete_device_buffer();
    tw_gpu_stats_t gs;
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 0); /* its correlation might still be on its way */
    fake.complete_api_buffer();      /* the launch's API record, with no correlation before it */
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 1); /* settled: written at once */
    assert_int_equal(gs.unattributed, 1);
    close_fixture(&f);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, 1);
    assert_int_equal(row_of(r, k)->call_id, 0);
    assert_string_equal(row_of(r, k)->api, "");
    assert_int_equal(row_of(r, k)->end_ns - row_of(r, k)->start_ns, 77);
    free(r);
    free_fixture(&f);
}

static void without_its_api_record_unattributed_work_waits_one_whole_flush(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    fake.set_no_api_records(1); /* as when CUPTI dropped them */
    uint64_t t0 = fake.now();
    call_t c = enter(&f, f.api[0]);
    uint32_t attributed = fake.launch(KERNEL, "inside", 0, t0, t0 + 1, 0, 1);
    leave(&f, &c);
    uint32_t k = fake.launch(KERNEL, "outside", 0, t0, t0 + 1, 0, 1);
    fake.complete_device_buffer();
    assert_int_equal(tw_gpu_flush(f.gpu, 0), 0); /* the correlations arrive in this flush */
    tw_gpu_stats_t gs;
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 1);      /* "inside" met its correlation */
    assert_int_equal(gs.unattributed, 0); /* "outside" was parked during this flush: it waits */
    assert_int_equal(tw_gpu_flush(f.gpu, 0), 0);
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 2); /* a whole flush went by: none is coming */
    assert_int_equal(gs.unattributed, 1);
    fake.set_no_api_records(0);
    close_fixture(&f);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(row_of(r, attributed)->call_id, c.call_id);
    assert_int_equal(row_of(r, k)->call_id, 0);
    free(r);
    free_fixture(&f);
}

static void many_records_waiting_stay_bounded_and_in_order(void **state)
{
    enum { N = 70000 }; /* more than the 65,536 that may wait */
    fixture_t f;
    open_fixture(&f, TW_FORMAT_JSON);
    fake.set_no_api_records(1);
    uint64_t t0 = fake.now();
    for (uint32_t i = 0; i < N; i++) {
        fake.launch(KERNEL, "k", 0, t0 + i, t0 + i + 1, 0, 1);
        if (i % 4096 == 4095)
            fake.complete_device_buffer(); /* no API buffer: every record waits */
    }
    fake.complete_device_buffer();
    tw_gpu_stats_t gs;
    tw_gpu_stats(f.gpu, &gs);
    /* The oldest gave way, unattributed. (A writer slower than this loop, as under valgrind, makes
     * the stream refuse some rows: they are counted as dropped.) */
    assert_int_equal(gs.kernels + gs.dropped, N - 65536);
    assert_int_equal(gs.unattributed, gs.kernels);
    fake.set_no_api_records(0);
    close_fixture(&f); /* the rest at stop */
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels + gs.dropped, N);
    free_fixture(&f);
}

static void dropped_records_are_counted_in_the_manifest(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    fake.drop(7); /* CUPTI ran out of buffer space */
    call_t c = enter(&f, f.api[0]);
    uint64_t t0 = fake.now();
    fake.launch(KERNEL, "k", 0, t0, t0 + 1, 0, 1);
    leave(&f, &c);
    assert_int_equal(tw_gpu_flush(f.gpu, 0), 0);
    tw_gpu_stats_t gs;
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.dropped, 7);
    close_fixture(&f);
    cJSON *m = read_json(f.dir, "manifest.json");
    cJSON *gpu = gpu_stream_of_manifest(m);
    assert_non_null(gpu);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(gpu, "records_lost_upstream")), 7);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(gpu, "records_dropped")), 7);
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(gpu, "records_written")), 1);
    cJSON_Delete(m);
    free_fixture(&f);
}

static void a_kernel_still_running_at_a_forced_flush_has_end_0(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    uint64_t t0 = fake.now();
    call_t c = enter(&f, f.api[0]);
    uint32_t k = fake.launch(KERNEL, "endless", 0, t0, 0, 0, 1);
    leave(&f, &c);
    assert_int_equal(tw_gpu_flush(f.gpu, 0), 0);
    tw_gpu_stats_t gs;
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 0); /* a plain flush leaves a buffer with a running kernel alone */
    close_fixture(&f);               /* stop forces it out */
    tw_gpu_stats(f.gpu, &gs);
    assert_int_equal(gs.kernels, 1);
    assert_int_equal(gs.incomplete, 1);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, 1);
    assert_int_equal(row_of(r, k)->call_id, c.call_id);
    assert_true(row_of(r, k)->start_ns > 0);
    assert_int_equal(row_of(r, k)->end_ns, 0);
    assert_int_equal(summary_gpu_ns(f.dir, "torch.matmul"), 0); /* unknown duration counts 0 */
    free(r);
    free_fixture(&f);
}

static void stop_flushes_everything_and_leaves_cupti_as_it_was(void **state)
{
    enum { N = 2000 };
    fixture_t f;
    open_fixture(&f, TW_FORMAT_JSON);
    assert_int_equal(fake.subscribed(), 1);
    assert_true(fake.enabled() & (UINT64_C(1) << CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    assert_true(fake.enabled() & (UINT64_C(1) << CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION));
    uint64_t t0 = fake.now();
    for (int i = 0; i < N; i++) { /* several buffers' worth, none flushed by hand */
        call_t c = enter(&f, f.api[i % 2]);
        fake.launch(KERNEL, "k", 0, t0 + 10 * (uint64_t)i, t0 + 10 * (uint64_t)i + 5, 0, 1);
        leave(&f, &c);
    }
    close_fixture(&f);
    assert_int_equal(fake.subscribed(), 0);
    assert_int_equal(fake.enabled(), 0);
    assert_int_equal(fake.depth(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2), 0);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, N);
    for (size_t i = 0; i < r->count; i++)
        assert_true(r->rows[i].call_id > 0);
    assert_int_equal(summary_gpu_ns(f.dir, "torch.matmul"), 5 * N / 2);
    free(r);
    free_fixture(&f);
}

static void recording_turns_off_and_on_again_and_says_when_cupti_refuses(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_JSON);
    uint64_t started = fake.enabled();
    assert_true(started & (UINT64_C(1) << CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    assert_int_equal(tw_gpu_set_recording(f.gpu, 0), 0);
    assert_int_equal(fake.enabled(), 0); /* every kind: no record, no cost per launch */
    assert_int_equal(tw_gpu_set_recording(f.gpu, 0), 0); /* idempotent */
    uint64_t t0 = fake.now();
    call_t c = enter(&f, f.api[0]);
    assert_int_equal(fake.launch(KERNEL, "unrecorded", 0, t0, t0 + 5, 0, 1), 0);
    leave(&f, &c);
    fake.set_enable_error(CUPTI_ERROR_NOT_INITIALIZED);
    assert_int_equal(tw_gpu_set_recording(f.gpu, 1), TW_EIO);
    assert_int_equal(fake.enabled(), 0);
    fake.set_enable_error(CUPTI_SUCCESS);
    assert_int_equal(tw_gpu_set_recording(f.gpu, 1), 0); /* asked again: the kinds it paused */
    assert_int_equal(fake.enabled(), started);
    c = enter(&f, f.api[1]);
    assert_true(fake.launch(KERNEL, "recorded", 0, t0 + 10, t0 + 15, 0, 1) != 0);
    leave(&f, &c);
    assert_int_equal(tw_gpu_set_recording(f.gpu, 0), 0);
    tw_gpu_stats_t stats;
    tw_gpu_stats(f.gpu, &stats);
    assert_int_equal(stats.pauses, 2);
    close_fixture(&f); /* stopped while off: nothing left enabled */
    assert_int_equal(fake.enabled(), 0);
    assert_int_equal(fake.subscribed(), 0);
    assert_int_equal(tw_gpu_set_recording(f.gpu, 1), 0); /* stopped: nothing */
    assert_int_equal(fake.enabled(), 0);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, 1);
    free(r);
    free_fixture(&f);
}

#define THREADS 4
#define PER_THREAD 300

typedef struct {
    fixture_t *f;
    int index;
    uint64_t call_ids[PER_THREAD];
    uint32_t correlations[PER_THREAD];
} worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    tw_thread_t *t = tw_recorder_attach(w->f->rec);
    const tw_gpu_hooks_t *h = w->f->hooks;
    for (int i = 0; i < PER_THREAD; i++) {
        tw_frame_t *frame = tw_call_begin(t);
        w->call_ids[i] = frame->call_id;
        h->push(h->kind, tw_gpu_external_id(frame->call_id, w->f->api[w->index]));
        uint64_t t0 = fake.now();
        w->correlations[i] = fake.launch(KERNEL, "k", 0, t0, t0 + 1, 0, (uint32_t)w->index);
        h->pop(h->kind, NULL);
        tw_call_end(t, frame, w->f->api[w->index], 1, 2, 0);
    }
    return NULL;
}

static void threads_attribute_work_to_their_own_calls(void **state)
{
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    pthread_t threads[THREADS];
    static worker_t workers[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (worker_t){.f = &f, .index = i};
        assert_int_equal(pthread_create(&threads[i], NULL, worker, &workers[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    close_fixture(&f);
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, THREADS * PER_THREAD);
    static const char *const names[] = {"torch.matmul", "torch.nn.Linear.forward", "torch.conv2d",
                                        "api, \"quoted\""};
    for (int i = 0; i < THREADS; i++) {
        for (int j = 0; j < PER_THREAD; j++) {
            const gpu_row_t *row = row_of(r, workers[i].correlations[j]);
            assert_int_equal(row->call_id, workers[i].call_ids[j]);
            assert_string_equal(row->api, names[i]);
        }
    }
    free(r);
    free_fixture(&f);
}

static void the_flush_thread_writes_without_being_asked(void **state)
{
    fixture_t f;
    fake.reset();
    open_writer(&f, TW_FORMAT_CSV);
    char reason[512];
    assert_int_equal(start_gpu(&f, 5 * 1000000, reason, sizeof reason), 0); /* every 5 ms */
    uint64_t flushes = fake.flushes();
    call_t c = enter(&f, f.api[0]);
    uint64_t t0 = fake.now();
    fake.launch(KERNEL, "k", 0, t0, t0 + 1, 0, 1);
    leave(&f, &c);
    tw_gpu_stats_t gs = {0};
    for (int i = 0; i < 10000 && gs.kernels == 0; i++) { /* up to 10 s on a loaded machine */
        sleep_us(1000);
        tw_gpu_stats(f.gpu, &gs);
    }
    assert_int_equal(gs.kernels, 1);
    assert_true(fake.flushes() > flushes);
    close_fixture(&f);
    free_fixture(&f);
}

static void a_forked_child_makes_no_cupti_call(void **state)
{
    if (getenv("TW_UNDER_TSAN") != NULL)
        skip(); /* ThreadSanitizer cannot follow a fork of a threaded process ("dup thread") */
    fixture_t f;
    open_fixture(&f, TW_FORMAT_CSV);
    call_t c = enter(&f, f.api[0]);
    uint64_t t0 = fake.now();
    fake.launch(KERNEL, "k", 0, t0, t0 + 1, 0, 1);
    leave(&f, &c);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        uint64_t before = fake.calls();
        tw_gpu_stop(f.gpu);
        tw_gpu_destroy(f.gpu);
        fixture_t g;
        open_writer(&g, TW_FORMAT_CSV);
        char reason[512];
        int rc = start_gpu(&g, 0, reason, sizeof reason);
        int ok = fake.calls() == before && rc == TW_EUNAVAIL && strstr(reason, "forked child") != NULL;
        rm_rf(g.dir);
        /* Leave through exec: under valgrind (make check-valgrind) an exit would leak-check this
         * copy of the parent, whose thread stacks glibc reclaims at fork, and report them. */
        execl("/bin/sh", "sh", "-c", ok ? "exit 0" : "exit 1", (char *)NULL);
        _exit(ok ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    close_fixture(&f); /* the parent's session is whole */
    gpu_rows_t *r = read_gpu_rows(f.dir);
    assert_int_equal(r->count, 1);
    assert_int_equal(r->rows[0].call_id, c.call_id);
    free(r);
    free_fixture(&f);
}

int main(void)
{
    fake_path = getenv("FAKE_CUPTI");
    if (fake_path == NULL || access(fake_path, R_OK) != 0) {
        fprintf(stderr, "SKIP: FAKE_CUPTI (the fake CUPTI module) is not set or not readable\n");
        return 77;
    }
    setenv("TW_CUPTI_LIBRARY", fake_path, 1);
    load_fake();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_unusable_cupti_library_is_named_in_the_reason),
        cmocka_unit_test(no_device_means_unavailable_and_nothing_left_behind),
        cmocka_unit_test(cupti_refusing_to_enable_is_reported_with_its_error),
        cmocka_unit_test(another_subscriber_means_cpu_only_profiling),
        cmocka_unit_test(a_second_gpu_session_at_once_is_refused),
        cmocka_unit_test(external_ids_carry_the_call_and_the_api),
        cmocka_unit_test(kernels_copies_and_memsets_are_attributed_to_their_call_csv),
        cmocka_unit_test(kernels_copies_and_memsets_are_attributed_to_their_call_json),
        cmocka_unit_test(nested_calls_attribute_work_to_the_innermost),
        cmocka_unit_test(records_arriving_after_the_call_returned_are_attributed),
        cmocka_unit_test(out_of_order_buffers_are_matched),
        cmocka_unit_test(work_launched_outside_any_call_is_written_unattributed),
        cmocka_unit_test(without_its_api_record_unattributed_work_waits_one_whole_flush),
        cmocka_unit_test(many_records_waiting_stay_bounded_and_in_order),
        cmocka_unit_test(dropped_records_are_counted_in_the_manifest),
        cmocka_unit_test(a_kernel_still_running_at_a_forced_flush_has_end_0),
        cmocka_unit_test(stop_flushes_everything_and_leaves_cupti_as_it_was),
        cmocka_unit_test(recording_turns_off_and_on_again_and_says_when_cupti_refuses),
        cmocka_unit_test(threads_attribute_work_to_their_own_calls),
        cmocka_unit_test(the_flush_thread_writes_without_being_asked),
        cmocka_unit_test(a_forked_child_makes_no_cupti_call),
    };
    return cmocka_run_group_tests_name("gpu", tests, NULL, NULL);
}
