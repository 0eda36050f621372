/* SPDX-License-Identifier: MIT */
/* compress "gzip": files under the cap that each inflate alone to the plain rows, incompressible
 * arguments, and a killed writer's files read to its last flush. */
#include "writer_fixture.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The same records plain and compressed: every compressed file is at most the cap, one whole gzip
 * member on its own (its CSV header first), and the data rows of all of them, in name order, are the
 * plain files' byte for byte; the manifest says "gzip" and lists each file complete. */
static void check_gzip(tw_format_t format, const char *ext, const char *gz_ext)
{
    enum { N = 20000, CAP = 8192 };
    fixture_t plain, packed;
    tw_writer_config_t config = {.format = format, .file_max_size = CAP, .file_name_spec = "serial", .rank = -1};
    open_fixture(&plain, config);
    record_calls(plain.rec, plain.ids, N);
    close_fixture(&plain);
    config.compress = TW_COMPRESS_GZIP;
    open_fixture(&packed, config);
    record_calls(packed.rec, packed.ids, N);
    close_fixture(&packed);
    readback_t p = read_back_data(plain.dir, ext, getpid(), 1);
    readback_t z = read_back_data(packed.dir, gz_ext, getpid(), 1);
    assert_int_equal(z.rows, N);
    assert_true(z.header_ok);
    assert_int_equal(z.unknown, 0);
    assert_int_equal(z.incomplete, 0);
    assert_true(z.max_file_size <= CAP);
    assert_true(z.max_file_size > CAP * 3 / 4); /* filled, not rotated early */
    assert_true(z.files * 3 < p.files);         /* these rows deflate to a third and less */
    assert_int_equal(z.data_len, p.data_len);
    assert_memory_equal(z.data, p.data, p.data_len);
    assert_int_equal(read_back(packed.dir, ext, getpid()).files, 0); /* no plain file beside them */
    tw_writer_stats_t ws;
    tw_writer_stats(packed.writer, &ws);
    assert_int_equal(ws.records_written, N);
    assert_int_equal(ws.records_dropped, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", packed.dir);
    cJSON *m = read_json_file(path);
    assert_non_null(m);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "compress")), "gzip");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "files")), z.files);
    uint64_t bytes = 0;
    cJSON *file;
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(m, "files"))
    {
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(file, "complete")));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(file, "name"));
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", packed.dir, name);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(file, "bytes")), (uint64_t)st.st_size);
        bytes += (uint64_t)st.st_size;
    }
    assert_int_equal(ws.bytes_written, bytes); /* compressed bytes: what is on disk */
    cJSON_Delete(m);
    free(p.data);
    free(z.data);
    free_fixture(&plain);
    free_fixture(&packed);
}

static void gzip_csv_files_stay_under_the_cap_and_each_inflates_alone_to_the_plain_rows(void **state)
{
    check_gzip(TW_FORMAT_CSV, ".csv", ".csv.gz");
}

static void gzip_json_files_stay_under_the_cap_and_each_inflates_alone_to_the_plain_rows(void **state)
{
    check_gzip(TW_FORMAT_JSON, ".jsonl", ".jsonl.gz");
}

/* Arguments of random text deflate to most of their size (stored blocks at worst): the cap holds at
 * the smallest file size all the same, with every record whole. */
/* max_total_size counts compressed bytes too: the files kept hold at most it, each whole. */
static void gzip_files_kept_stay_within_max_total_size(void **state)
{
    enum { N = 40000, TOTAL = 16384 };
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .compress = TW_COMPRESS_GZIP, .max_total_size = TOTAL, .rank = -1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, N);
    close_fixture(&f);
    readback_t z = read_back(f.dir, ".csv.gz", getpid());
    assert_true(z.files >= 1 && z.files <= 2);
    assert_true(z.max_file_size <= TOTAL / 2);
    assert_int_equal(z.incomplete, 0);
    assert_true(z.rows > 0 && z.rows < N);
    free_fixture(&f);
}

static void gzip_of_incompressible_arguments_stays_under_the_cap(void **state)
{
    enum { N = 3000 };
    for (int format = 0; format < 2; format++) {
        fixture_t f;
        tw_writer_config_t config = {.format = (tw_format_t)format, .file_max_size = TW_CONFIG_MIN_FILE_SIZE,
                                     .file_name_spec = "serial", .rank = -1, .compress = TW_COMPRESS_GZIP};
        open_fixture(&f, config);
        tw_thread_t *t = tw_recorder_attach(f.rec);
        unsigned seed = 7;
        char args[TW_ARGS_MAX];
        for (uint64_t i = 0; i < N; i++) {
            uint32_t len = (uint32_t)(rand_r(&seed) % (i % 100 == 0 ? TW_ARGS_MAX : 400));
            for (uint32_t k = 0; k < len; k++)
                args[k] = (char)(' ' + rand_r(&seed) % 95); /* printable: a byte of text each */
            tw_frame_t *frame = tw_call_begin(t);
            tw_call_end_args(t, frame, f.ids[i % WEIRD_COUNT], 1000 * i, 1000 * i + 10, 0, args, len);
        }
        close_fixture(&f);
        readback_t r = read_back(f.dir, format == TW_FORMAT_CSV ? ".csv.gz" : ".jsonl.gz", getpid());
        assert_int_equal(r.rows, N);
        assert_int_equal(r.incomplete, 0);
        assert_true(r.max_file_size <= TW_CONFIG_MIN_FILE_SIZE);
        assert_true(r.max_file_size > TW_CONFIG_MIN_FILE_SIZE * 3 / 4);
        tw_writer_stats_t ws;
        tw_writer_stats(f.writer, &ws);
        assert_int_equal(ws.records_written, N);
        assert_int_equal(ws.records_truncated, 0);
        free_fixture(&f);
    }
}

static int count_row(void *ctx, const tw_row_t *row)
{
    (void)ctx;
    (void)row;
    return 0;
}

/* A process killed while writing (SIGKILL: no close, no member's end) leaves files that read, through
 * the library's reader, to its last flush: every record written before the kill. */
static void a_killed_gzip_writer_leaves_files_read_to_its_last_flush(void **state)
{
    if (tw_test_sanitizer_cannot_fork_threads())
        skip(); /* (tw_test.h) */
    enum { N = 30000 };
    char dir[] = "/tmp/tw-test-killed-XXXXXX";
    assert_non_null(mkdtemp(dir));
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        fixture_t f;
        tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 64 * 1024, .file_name_spec = "serial",
                                     .rank = -1, .compress = TW_COMPRESS_GZIP,
                                     .flush_interval_ns = 5 * 1000 * 1000};
        open_fixture(&f, config);
        record_calls(f.rec, f.ids, N);
        tw_recorder_collect(f.rec);
        tw_writer_stats_t ws;
        do {
            usleep(1000);
            tw_writer_stats(f.writer, &ws);
        } while (ws.records_written < N);
        char to[256];
        snprintf(to, sizeof to, "%s/out", dir); /* where the parent finds them */
        rename(f.dir, to);
        raise(SIGKILL);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    char out[256], path[512];
    snprintf(out, sizeof out, "%s/out", dir);
    readback_t r = read_back(out, ".csv.gz", child);
    assert_int_equal(r.rows, N);
    assert_int_equal(r.incomplete, 1); /* the last file: no member's end */
    assert_true(r.files > 1);          /* the others rotated, complete */
    /* The reader: every row, no torn line, no error. */
    uint64_t rows = 0;
    DIR *d = opendir(out);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strstr(e->d_name, ".csv.gz") == NULL)
            continue;
        snprintf(path, sizeof path, "%s/%s", out, e->d_name);
        tw_read_stats_t st = {0};
        char err[512];
        assert_int_equal(tw_read_file(path, count_row, NULL, &st, err, sizeof err), 0);
        assert_int_equal(st.truncated + st.malformed, 0);
        rows += st.rows;
    }
    closedir(d);
    assert_int_equal(rows, N);
    rm_rf(out);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gzip_csv_files_stay_under_the_cap_and_each_inflates_alone_to_the_plain_rows),
        cmocka_unit_test(gzip_json_files_stay_under_the_cap_and_each_inflates_alone_to_the_plain_rows),
        cmocka_unit_test(gzip_of_incompressible_arguments_stays_under_the_cap),
        cmocka_unit_test(gzip_files_kept_stay_within_max_total_size),
        cmocka_unit_test(a_killed_gzip_writer_leaves_files_read_to_its_last_flush),
    };
    return cmocka_run_group_tests_name("writer_gzip", tests, NULL, NULL);
}
