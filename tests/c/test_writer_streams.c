/* SPDX-License-Identifier: MIT */
/* The extra record streams (GPU rows and the like): rotation per kind, concurrent writers, the
 * per-API GPU totals, rows refused, and forks. */
#include "writer_fixture.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    uint64_t files;
    uint64_t rows;          /* lines after the header */
    uint64_t max_file_size;
    int headers_ok;
    uint64_t manifest_rows; /* the manifest's per-file counts, summed */
} kind_readback_t;

/* Reads back the files of one kind listed in the manifest at manifest_name. With seen (n_threads x
 * per_thread flags), rows "T,S,..." mark seen[T * per_thread + S]. */
static kind_readback_t read_kind(const char *dir, const char *manifest_name, const char *kind, const char *header,
                                 unsigned char *seen, uint64_t per_thread)
{
    kind_readback_t r = {0, 0, 0, 1, 0};
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, manifest_name);
    cJSON *m = read_json_file(path);
    assert_non_null(m);
    cJSON *file;
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(m, "files"))
    {
        const char *k = cJSON_GetStringValue(cJSON_GetObjectItem(file, "kind"));
        assert_non_null(k);
        if (strcmp(k, kind) != 0)
            continue;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(file, "name"));
        r.manifest_rows += (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(file, "records"));
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        r.files++;
        char line[TW_STREAM_ROW_MAX + 1];
        uint64_t size = 0, n = 0;
        while (fgets(line, sizeof line, fp) != NULL) {
            size += strlen(line);
            if (n++ == 0 && header != NULL) {
                if (strncmp(line, header, strlen(header)) != 0)
                    r.headers_ok = 0;
                continue;
            }
            assert_true(line[strlen(line) - 1] == '\n'); /* whole lines only */
            r.rows++;
            if (seen != NULL) {
                char *end;
                int json = line[0] == '{'; /* {"t":T,"s":S,... or T,S,... */
                unsigned long t = strtoul(line + (json ? 5 : 0), &end, 10);
                unsigned long q = strtoul(end + (json ? 5 : 1), NULL, 10);
                assert_true(q < per_thread);
                seen[t * per_thread + q]++;
            }
        }
        fclose(fp);
        if (size > r.max_file_size)
            r.max_file_size = size;
    }
    cJSON_Delete(m);
    return r;
}

static size_t gpu_row(tw_format_t format, char *out, size_t size, unsigned thread, uint64_t seq)
{
    int n = format == TW_FORMAT_CSV
                ? snprintf(out, size, "%u,%llu,kernel,\"void gemm<float, 128>(float*, int)\",1,2,0,7,42,1\n", thread,
                           (unsigned long long)seq)
                : snprintf(out, size, "{\"t\":%u,\"s\":%llu,\"kind\":\"kernel\",\"name\":\"gemm\"}\n", thread,
                           (unsigned long long)seq);
    return (size_t)n;
}

static void check_stream_rotation(tw_format_t format, const char *ext)
{
    enum { N = 3000 };
    fixture_t f;
    tw_writer_config_t config = {.format = format, .file_max_size = 8192, .file_name_spec = "serial", .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", format == TW_FORMAT_CSV ? GPU_HEADER : NULL, &s), 0);
    assert_int_equal(tw_writer_stream_format(s), format);
    record_calls(f.rec, f.ids, 500);
    unsigned char *seen = calloc(N, 1);
    char row[256];
    for (uint64_t i = 0; i < N; i++)
        assert_int_equal(tw_writer_stream_write(s, row, gpu_row(format, row, sizeof row, 0, i)), 0);
    close_fixture(&f);
    kind_readback_t r = read_kind(f.dir, "manifest.json", "gpu", format == TW_FORMAT_CSV ? GPU_HEADER : NULL, seen, N);
    assert_int_equal(r.rows, N);
    assert_int_equal(r.manifest_rows, N);
    assert_true(r.headers_ok);
    assert_true(r.files > 10);
    assert_true(r.max_file_size <= 8192);
    for (uint64_t i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
    /* the call records are untouched, listed as "calls", and their files are not the stream's */
    kind_readback_t calls = read_kind(f.dir, "manifest.json", "calls", NULL, NULL, 0);
    assert_int_equal(calls.manifest_rows, 500);
    char path[512];
    snprintf(path, sizeof path, "%s/tw-%ld-0001.gpu%s", f.dir, (long)getpid(), ext);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/tw-%ld-0001%s", f.dir, (long)getpid(), ext);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    cJSON *gpu = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "streams"), "gpu");
    assert_non_null(gpu);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(gpu, "records_written")), N);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(gpu, "records_dropped")), 0);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "records_written")), 500);
    cJSON_Delete(m);
    tw_writer_stream_stats_t ss;
    tw_writer_stream_stats(s, &ss);
    assert_int_equal(ss.records_written, N);
    assert_int_equal(ss.records_dropped, 0);
    free(seen);
    free_fixture(&f);
}

static void csv_stream_files_rotate_under_the_cap_with_their_header(void **state)
{
    check_stream_rotation(TW_FORMAT_CSV, ".csv");
}

static void json_stream_files_rotate_under_the_cap(void **state)
{
    check_stream_rotation(TW_FORMAT_JSON, ".jsonl");
}

static void max_files_keeps_the_newest_of_each_kind(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 4096, .file_name_spec = "serial",
                                 .max_files = 2, .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER "\n", &s), 0);
    char row[256];
    for (uint64_t i = 0; i < 2000; i++)
        assert_int_equal(tw_writer_stream_write(s, row, gpu_row(TW_FORMAT_CSV, row, sizeof row, 0, i)), 0);
    record_calls(f.rec, f.ids, 3000);
    close_fixture(&f);
    kind_readback_t gpu = read_kind(f.dir, "manifest.json", "gpu", GPU_HEADER, NULL, 0);
    kind_readback_t calls = read_kind(f.dir, "manifest.json", "calls", NULL, NULL, 0);
    assert_int_equal(gpu.files, 2);
    assert_int_equal(calls.files, 2);
    /* on disk as well: two files of each kind, the rest removed */
    readback_t all = read_back(f.dir, ".csv", getpid());
    assert_int_equal(all.files, 4);
    free_fixture(&f);
}

#define STREAM_THREADS 4
#define PER_STREAM_THREAD 50000

typedef struct {
    tw_writer_stream_t *stream;
    unsigned thread;
    uint64_t refused;
} stream_producer_t;

static void *produce_rows(void *arg)
{
    stream_producer_t *p = arg;
    char row[256];
    for (uint64_t i = 0; i < PER_STREAM_THREAD; i++) {
        size_t len = gpu_row(TW_FORMAT_JSON, row, sizeof row, p->thread, i);
        int rc;
        while ((rc = tw_writer_stream_write(p->stream, row, len)) == TW_EFULL) {
            p->refused++; /* bounded memory: the writer is behind; try again */
            sched_yield();
        }
        assert_int_equal(rc, 0);
    }
    return NULL;
}

static void concurrent_stream_writers_lose_and_tear_nothing(void **state)
{
    fixture_t f;
    /* Streams take at most half of the budget: the call records keep 2 MiB (16 chunks) whatever
     * the streams do. */
    tw_writer_config_t config = {.format = TW_FORMAT_JSON, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .buffer_bytes = 4 << 20, .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", NULL, &s), 0);
    pthread_t threads[STREAM_THREADS];
    stream_producer_t producers[STREAM_THREADS];
    for (unsigned i = 0; i < STREAM_THREADS; i++) {
        producers[i] = (stream_producer_t){s, i, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, produce_rows, &producers[i]), 0);
    }
    record_calls(f.rec, f.ids, 10000); /* call records meanwhile, on this thread */
    uint64_t refused = 0;
    for (unsigned i = 0; i < STREAM_THREADS; i++) {
        pthread_join(threads[i], NULL);
        refused += producers[i].refused;
    }
    close_fixture(&f);
    unsigned char *seen = calloc((size_t)STREAM_THREADS * PER_STREAM_THREAD, 1);
    kind_readback_t r = read_kind(f.dir, "manifest.json", "gpu", NULL, seen, PER_STREAM_THREAD);
    assert_int_equal(r.rows, (uint64_t)STREAM_THREADS * PER_STREAM_THREAD);
    for (size_t i = 0; i < (size_t)STREAM_THREADS * PER_STREAM_THREAD; i++)
        assert_int_equal(seen[i], 1);
    tw_writer_stream_stats_t ss;
    tw_writer_stream_stats(s, &ss);
    assert_int_equal(ss.records_written, (uint64_t)STREAM_THREADS * PER_STREAM_THREAD);
    assert_int_equal(ss.records_dropped, refused); /* every refusal counted, nothing else lost */
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, 10000);
    free(seen);
    free_fixture(&f);
}

static void gpu_rows_add_to_the_per_api_gpu_totals(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &s), 0);
    record_calls(f.rec, f.ids, 80);
    const char row[] = "1,torch.add,kernel,k,1,2,0,7,42,1";
    for (int i = 0; i < 10; i++) {
        assert_int_equal(tw_writer_stream_write_gpu(s, row, sizeof row - 1, f.ids[0], 1000), 0);
        assert_int_equal(tw_writer_stream_write_gpu(s, row, sizeof row - 1, f.ids[1], 7), 0);
    }
    assert_int_equal(tw_writer_stream_write_gpu(s, row, sizeof row - 1, TW_API_ID_NONE, 5), 0); /* unattributed */
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    cJSON *summary = read_json_file(path);
    assert_non_null(summary);
    cJSON *api;
    int found = 0;
    cJSON_ArrayForEach(api, cJSON_GetObjectItem(summary, "apis"))
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(api, "api"));
        uint64_t gpu = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "gpu_ns"));
        uint64_t calls = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls"));
        assert_int_equal(calls, 10); /* GPU rows count no calls */
        if (strcmp(name, weird_names[0]) == 0)
            found++, assert_int_equal(gpu, 10000);
        else if (strcmp(name, weird_names[1]) == 0)
            found++, assert_int_equal(gpu, 70);
        else
            assert_int_equal(gpu, 0);
    }
    assert_int_equal(found, 2);
    cJSON_Delete(summary);
    free_fixture(&f);
}

static void stream_rows_are_refused_and_counted_when_bad_or_late(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 4096, .file_name_spec = "serial",
                                 .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s, *other;
    /* kinds: [a-z0-9_], at most 16 bytes, not "calls", each once; a CSV writer needs a header */
    assert_int_equal(tw_writer_add_stream(f.writer, "calls", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "../x", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "a.b", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "GPU", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "a_very_long_kind_name", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", NULL, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", "a\nb", &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &s), 0);
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &other), TW_EBUSY);
    assert_int_equal(tw_writer_add_stream(f.writer, "trace_2", "a,b", &other), 0);
    /* a row with a line break inside, or too long for a file */
    assert_int_equal(tw_writer_stream_write(s, "a\nb", 3), TW_EINVAL);
    char *big = malloc(5000);
    memset(big, 'x', 5000);
    assert_int_equal(tw_writer_stream_write(s, big, 5000), TW_EINVAL);
    free(big);
    assert_int_equal(tw_writer_stream_write(s, "1,2", 3), 0);
    close_fixture(&f);
    assert_int_equal(tw_writer_stream_write(s, "1,2", 3), TW_ECLOSED);
    assert_int_equal(tw_writer_add_stream(f.writer, "late", "a", &other), TW_ECLOSED);
    tw_writer_stream_add_dropped(s, 5);
    tw_writer_stream_stats_t ss;
    tw_writer_stream_stats(s, &ss);
    assert_int_equal(ss.records_written, 1);
    assert_int_equal(ss.records_lost_upstream, 5);
    assert_int_equal(ss.records_dropped, 3 + 5);
    free_fixture(&f);
}

/* GPU rows know when they were launched, not in which step: the writer says which step that was. */
static void the_step_of_a_moment_is_the_step_in_progress_then(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.file_max_size = 1 << 20, .rank = -1});
    int64_t before = tw_clock_epoch_ns(&f.clock, tw_clock_ticks(TW_CLOCK_MONOTONIC)) - 1000000;
    int64_t begun[6];
    for (uint64_t step = 1; step <= 5; step++) {
        usleep(2000);
        tw_writer_set_step(f.writer, step);
        begun[step] = tw_clock_epoch_ns(&f.clock, tw_clock_ticks(TW_CLOCK_MONOTONIC));
    }
    assert_int_equal(tw_writer_step(f.writer), 5);
    for (uint64_t step = 1; step <= 4; step++) {
        assert_int_equal(tw_writer_step_at(f.writer, begun[step] + 10), step);
        assert_int_equal(tw_writer_step_at(f.writer, begun[step + 1] - 1000000), step); /* 1 ms before the next */
    }
    assert_int_equal(tw_writer_step_at(f.writer, begun[5] + 1000000000), 5);
    assert_int_equal(tw_writer_step_at(f.writer, before), 0); /* before step 1: step 0, from the start */
    /* Only the last 256 boundaries are remembered: an older moment gets the oldest step known. */
    for (uint64_t step = 6; step <= 300; step++)
        tw_writer_set_step(f.writer, step);
    assert_int_equal(tw_writer_step_at(f.writer, before), 300 - 256 + 1);
    close_fixture(&f);
    free_fixture(&f);
}

static void a_forked_child_writes_its_own_stream_files(void **state)
{
    if (tw_test_sanitizer_cannot_fork_threads())
        skip(); /* (tw_test.h) */
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &s), 0);
    char row[256];
    for (uint64_t i = 0; i < 100; i++) /* queued in the parent at the fork */
        tw_writer_stream_write(s, row, gpu_row(TW_FORMAT_CSV, row, sizeof row, 0, i));
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        for (uint64_t i = 0; i < 10; i++)
            tw_writer_stream_write(s, row, gpu_row(TW_FORMAT_CSV, row, sizeof row, 1, i));
        tw_recorder_collect(f.rec);
        int rc = tw_writer_close(f.writer);
        tw_writer_stream_stats_t ss;
        tw_writer_stream_stats(s, &ss);
        _exit(rc == 0 && ss.records_written == 10 ? 0 : 1);
    }
    for (uint64_t i = 100; i < 200; i++)
        tw_writer_stream_write(s, row, gpu_row(TW_FORMAT_CSV, row, sizeof row, 0, i));
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close_fixture(&f);
    kind_readback_t mine = read_kind(f.dir, "manifest.json", "gpu", GPU_HEADER, NULL, 0);
    char name[64];
    snprintf(name, sizeof name, "manifest-%ld.json", (long)child);
    kind_readback_t theirs = read_kind(f.dir, name, "gpu", GPU_HEADER, NULL, 0);
    assert_int_equal(mine.rows, 200);  /* the parent's queued rows, once */
    assert_int_equal(theirs.rows, 10); /* the child's own only */
    free_fixture(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(csv_stream_files_rotate_under_the_cap_with_their_header),
        cmocka_unit_test(json_stream_files_rotate_under_the_cap),
        cmocka_unit_test(max_files_keeps_the_newest_of_each_kind),
        cmocka_unit_test(concurrent_stream_writers_lose_and_tear_nothing),
        cmocka_unit_test(gpu_rows_add_to_the_per_api_gpu_totals),
        cmocka_unit_test(stream_rows_are_refused_and_counted_when_bad_or_late),
        cmocka_unit_test(a_forked_child_writes_its_own_stream_files),
        cmocka_unit_test(the_step_of_a_moment_is_the_step_in_progress_then),
    };
    return cmocka_run_group_tests_name("writer_streams", tests, NULL, NULL);
}
