/* SPDX-License-Identifier: MIT */
/* The writer's files: the size cap and rotation, names never overwritten, max_files, manifests,
 * forks and ranks, its idle sleep and its config checks. */
#include "writer_fixture.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void check_cap_and_contents(tw_format_t format, const char *ext)
{
    enum { N = 20000 };
    fixture_t f;
    tw_writer_config_t config = {.format = format, .file_max_size = 8192, .file_name_spec = "serial", .rank = -1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, N);
    close_fixture(&f);
    readback_t r = read_back(f.dir, ext, getpid());
    assert_true(r.header_ok);
    assert_int_equal(r.rows, N);
    assert_int_equal(r.unknown, 0);
    assert_int_equal(r.pid_rows, N);
    for (size_t i = 0; i < WEIRD_COUNT; i++)
        assert_int_equal(r.per_name[i], N / WEIRD_COUNT);
    assert_true(r.max_file_size <= 8192);
    assert_true(r.files > 100);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, N);
    assert_int_equal(ws.records_dropped, 0);
    /* the manifest lists every file with its count, and the totals */
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    assert_non_null(m);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "records_written")), N);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "files")), r.files);
    uint64_t listed = 0;
    cJSON *file;
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(m, "files"))
        listed += (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(file, "records"));
    assert_int_equal(listed, N);
    cJSON_Delete(m);
    /* the summary counts every call per API */
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    cJSON *s = read_json_file(path);
    assert_non_null(s);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(s, "apis")), WEIRD_COUNT);
    cJSON *api;
    cJSON_ArrayForEach(api, cJSON_GetObjectItem(s, "apis"))
        assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls")), N / WEIRD_COUNT);
    cJSON_Delete(s);
    free_fixture(&f);
}

static void csv_files_never_exceed_the_cap_and_read_back_identical(void **state)
{
    check_cap_and_contents(TW_FORMAT_CSV, ".csv");
}

static void json_files_never_exceed_the_cap_and_read_back_identical(void **state)
{
    check_cap_and_contents(TW_FORMAT_JSON, ".jsonl");
}

static void an_existing_name_is_never_overwritten(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 4096, .file_name_spec = "fixed-{index}",
                                 .rank = -1};
    open_fixture(&f, config);
    char path[512];
    snprintf(path, sizeof path, "%s/fixed-0001.csv", f.dir);
    FILE *fp = fopen(path, "w");
    fputs("not ours\n", fp);
    fclose(fp);
    /* a symlink planted at the next name is not followed either */
    snprintf(path, sizeof path, "%s/fixed-0002.csv", f.dir);
    assert_int_equal(symlink("/tmp/tw-test-writer-target-must-not-exist", path), 0);
    record_calls(f.rec, f.ids, 100);
    close_fixture(&f);
    snprintf(path, sizeof path, "%s/fixed-0001.csv", f.dir);
    fp = fopen(path, "r");
    char line[64];
    assert_non_null(fgets(line, sizeof line, fp));
    fclose(fp);
    assert_string_equal(line, "not ours\n");
    assert_int_equal(access("/tmp/tw-test-writer-target-must-not-exist", F_OK), -1);
    snprintf(path, sizeof path, "%s/fixed-0003.csv", f.dir);
    assert_int_equal(access(path, F_OK), 0);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, 100);
    assert_int_equal(ws.file_names_skipped, 2); /* the file and the link, counted */
    assert_int_equal(ws.symlinks_refused, 1);
    free_fixture(&f);
}

typedef struct manifest_reader {
    const char *path;
    int stop; /* atomic accesses: set by the test thread, polled by the reader */
    int reads, complete, incomplete;
} manifest_reader_t;

static void *read_manifests(void *arg)
{
    manifest_reader_t *m = arg;
    while (!__atomic_load_n(&m->stop, __ATOMIC_RELAXED)) {
        FILE *fp = fopen(m->path, "r");
        if (fp == NULL)
            continue;
        /* The whole file, however long the list of files grows. */
        static char text[4 << 20];
        size_t n = fread(text, 1, sizeof text - 1, fp);
        fclose(fp);
        text[n] = '\0';
        cJSON *root = cJSON_Parse(text);
        m->reads++;
        if (root != NULL && cJSON_GetObjectItemCaseSensitive(root, "files") != NULL)
            m->complete++;
        else
            m->incomplete++;
        cJSON_Delete(root);
    }
    return NULL;
}

static void a_manifest_read_during_rotation_is_always_complete(void **state)
{
    /* 4096-byte files: hundreds of rotations, each rewriting the manifest, while a reader polls it. */
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 4096, .rank = -1});
    char path[600];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    manifest_reader_t m = {.path = path};
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, read_manifests, &m), 0);
    for (int i = 0; i < 20; i++)
        record_calls(f.rec, f.ids, 2000);
    close_fixture(&f);
    __atomic_store_n(&m.stop, 1, __ATOMIC_RELAXED);
    pthread_join(reader, NULL);
    assert_true(m.reads > 0);
    assert_int_equal(m.incomplete, 0);
    free_fixture(&f);
}

static void max_files_keeps_the_newest(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 4096, .file_name_spec = "serial",
                                 .max_files = 3, .rank = -1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 5000);
    close_fixture(&f);
    readback_t r = read_back(f.dir, ".csv", getpid());
    assert_int_equal(r.files, 3);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    cJSON *files = cJSON_GetObjectItem(m, "files"); /* the files kept, the newest (serial names) */
    assert_int_equal(cJSON_GetArraySize(files), 3);
    const cJSON *removed = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "records"), "calls"),
                                               "removed");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(removed, "by")), "max_files");
    uint64_t gone = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(removed, "files"));
    assert_true(gone > 0);
    char first[64];
    snprintf(first, sizeof first, "tw-%ld-%04llu.csv", (long)getpid(), (unsigned long long)gone + 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(files, 0), "name")), first);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(removed, "records")) + r.rows, 5000);
    cJSON_Delete(m);
    free_fixture(&f);
}

/* A profile left on for days keeps its newest records within max_total_size, each file then at most
 * half of it; the manifest says which files went and why, and still counts every record written. */
static void max_total_size_keeps_the_newest_within_it(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .max_total_size = 32768, .rank = -1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 5000);
    close_fixture(&f);
    readback_t r = read_back(f.dir, ".csv", getpid());
    assert_true(r.files >= 1 && r.files <= 2); /* the one written last, and the one before where both fit */
    assert_true(r.max_file_size <= 16384);
    assert_true(r.rows > 0 && r.rows < 5000);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    const cJSON *file;
    uint64_t kept_records = 0, listed = 0;
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(m, "files")) { /* the files kept */
        kept_records += (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(file, "records"));
        listed++;
    }
    assert_int_equal(listed, r.files);
    assert_int_equal(kept_records, r.rows);
    const cJSON *removed = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "records"), "calls"),
                                               "removed");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(removed, "by")), "max_total_size");
    uint64_t gone = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(removed, "files"));
    char first[64]; /* only the oldest went: the first file kept is the one after them (serial names) */
    snprintf(first, sizeof first, "tw-%ld-%04llu.csv", (long)getpid(), (unsigned long long)gone + 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "files"),
                                                                                     0), "name")), first);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(removed, "records")) + kept_records, 5000);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "records_written")), 5000);
    cJSON_Delete(m);
    free_fixture(&f);
}

static void a_forked_child_writes_its_own_files(void **state)
{
    if (tw_test_sanitizer_cannot_fork_threads())
        skip(); /* (tw_test.h) */
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 3000); /* some in the queue, some in this thread's partial chunk */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        record_calls(f.rec, f.ids, 1234);
        tw_recorder_collect(f.rec);
        int rc = tw_writer_close(f.writer);
        tw_writer_stats_t ws;
        tw_writer_stats(f.writer, &ws);
        _exit(rc == 0 && ws.records_written == 1234 ? 0 : 1);
    }
    record_calls(f.rec, f.ids, 1000);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close_fixture(&f);
    readback_t mine = read_back(f.dir, ".csv", getpid());
    readback_t theirs = read_back(f.dir, ".csv", child);
    assert_int_equal(mine.pid_rows, 4000);   /* nothing of the parent's written twice */
    assert_int_equal(theirs.pid_rows, 1234);
    assert_int_equal(mine.rows, 5234);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest-%ld.json", f.dir, (long)child);
    assert_int_equal(access(path, F_OK), 0);
    free_fixture(&f);
}

static void ranks_sharing_out_dir_write_their_own_manifests_and_ranked_names(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = 1, .per_process_names = 1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 10);
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/tw-rank1-%ld-0001.csv", f.dir, (long)getpid());
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    assert_int_equal(access(path, F_OK), -1); /* left to the process that owns out_dir */
    snprintf(path, sizeof path, "%s/summary-%ld.json", f.dir, (long)getpid());
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/manifest-%ld.json", f.dir, (long)getpid());
    cJSON *m = read_json_file(path);
    assert_int_equal(cJSON_GetObjectItem(m, "rank")->valuedouble, 1);
    assert_int_equal(cJSON_GetObjectItem(m, "records_written")->valuedouble, 10);
    cJSON_Delete(m);
    free_fixture(&f);
}

static void a_manifest_key_set_while_writing_is_in_the_final_manifest(void **state)
{
    /* The clock's offset to rank 0's is known only once the process group is up, after the writer
     * started: set then, it joins the caller's keys, and a replaced value replaces the key. */
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1, .manifest_json = "{\"torch\": \"2.x\"}"};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 3);
    assert_int_equal(tw_writer_set_manifest_key(f.writer, "clock_sync", "{\"start\": {\"offset_ns\": 5}}"), 0);
    assert_int_equal(tw_writer_set_manifest_key(f.writer, "clock_sync", "{\"start\": {\"offset_ns\": -7}}"), 0);
    assert_int_equal(tw_writer_set_manifest_key(f.writer, "clock_sync", "{not json"), TW_EINVAL);
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    assert_string_equal(cJSON_GetObjectItem(m, "torch")->valuestring, "2.x");
    cJSON *sync = cJSON_GetObjectItem(m, "clock_sync");
    assert_non_null(sync);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(sync, "start"), "offset_ns")->valuedouble, -7);
    assert_int_equal(cJSON_GetObjectItem(m, "records_written")->valuedouble, 3);
    cJSON_Delete(m);
    free_fixture(&f);
}

static uint64_t monotonic_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void an_idle_writer_sleeps_between_flushes(void **state)
{
    /* An idle writer wakes about once per flush interval. A wait on the wrong clock returned at
     * once and spun here hundreds of thousands of times, a third of a core. The bound is computed
     * from the time that really passed (a loaded VM may stretch the 300 ms), with room for a few
     * spurious wake-ups; a spinning writer exceeds it by orders of magnitude. */
    const uint64_t interval_ns = 100000000;
    fixture_t f;
    uint64_t t0 = monotonic_now_ns();
    open_fixture(&f, (tw_writer_config_t){.file_max_size = 1 << 20, .flush_interval_ns = interval_ns, .rank = -1});
    struct timespec pause = {0, 300000000};
    nanosleep(&pause, NULL);
    tw_writer_stats_t stats;
    tw_writer_stats(f.writer, &stats);
    uint64_t elapsed = monotonic_now_ns() - t0;
    close_fixture(&f);
    free_fixture(&f);
    assert_true(stats.wakeups <= elapsed / interval_ns + 10);
}

static void a_world_writable_out_dir_draws_a_warning(void **state)
{
    char dir[] = "/tmp/tw-test-open-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0777), 0);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    int saved = dup(2);
    dup2(pipefd[1], 2);
    tw_recorder_t *rec;
    tw_writer_t *w;
    tw_clock_t clock;
    char err[256];
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_clock_init_manual(&clock, TW_CLOCK_MONOTONIC, 0, 0, 1.0);
    tw_writer_config_t c = {.out_dir = dir, .file_max_size = 1 << 20, .rank = -1};
    int rc = tw_writer_create(&c, tw_recorder_queue(rec), &clock, &w, err, sizeof err);
    dup2(saved, 2);
    close(saved);
    close(pipefd[1]);
    char message[512] = "";
    ssize_t n = read(pipefd[0], message, sizeof message - 1);
    close(pipefd[0]);
    assert_int_equal(rc, 0); /* a warning, not an error */
    assert_true(n > 0);
    assert_non_null(strstr(message, "is writable by every user and has no sticky bit"));
    tw_writer_close(w);
    tw_writer_destroy(w);
    tw_recorder_destroy(rec);
    rm_rf(dir);
}

static void bad_configs_name_the_problem(void **state)
{
    tw_recorder_t *rec;
    tw_writer_t *w = NULL;
    tw_clock_t clock;
    char err[512];
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_clock_init_manual(&clock, TW_CLOCK_MONOTONIC, 0, 0, 1.0);
    tw_writer_config_t c = {.out_dir = "/proc/no/such/dir", .file_max_size = 1 << 20, .rank = -1};
    assert_int_equal(tw_writer_create(&c, tw_recorder_queue(rec), &clock, &w, err, sizeof err), TW_EIO);
    assert_non_null(strstr(err, "/proc/no/such/dir"));
    assert_non_null(strstr(err, "cannot be created"));
    c.out_dir = "/tmp";
    c.file_max_size = 100;
    assert_int_equal(tw_writer_create(&c, tw_recorder_queue(rec), &clock, &w, err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "config key 'file_max_size': 100 is too small"));
    c.file_max_size = 1 << 20;
    c.file_name_spec = "{nope}";
    assert_int_equal(tw_writer_create(&c, tw_recorder_queue(rec), &clock, &w, err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "unknown field {nope}"));
    assert_null(w);
    tw_recorder_destroy(rec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(csv_files_never_exceed_the_cap_and_read_back_identical),
        cmocka_unit_test(json_files_never_exceed_the_cap_and_read_back_identical),
        cmocka_unit_test(an_existing_name_is_never_overwritten),
        cmocka_unit_test(max_files_keeps_the_newest),
        cmocka_unit_test(max_total_size_keeps_the_newest_within_it),
        cmocka_unit_test(a_forked_child_writes_its_own_files),
        cmocka_unit_test(ranks_sharing_out_dir_write_their_own_manifests_and_ranked_names),
        cmocka_unit_test(a_manifest_key_set_while_writing_is_in_the_final_manifest),
        cmocka_unit_test(an_idle_writer_sleeps_between_flushes),
        cmocka_unit_test(a_manifest_read_during_rotation_is_always_complete),
        cmocka_unit_test(a_world_writable_out_dir_draws_a_warning),
        cmocka_unit_test(bad_configs_name_the_problem),
    };
    return cmocka_run_group_tests_name("writer", tests, NULL, NULL);
}
