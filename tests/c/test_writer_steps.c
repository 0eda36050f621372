/* SPDX-License-Identifier: MIT */
/* The writer and the steps: schedules, summary_only, captures to dirs of their own, and the
 * summary rewritten while the program runs. */
#include "writer_fixture.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Calls of steps 0..9, two per step; the writer keeps the schedule's active steps, and the summary
 * counts every call or those of active steps (summary_active); summary_only writes no record file. */
static void check_schedule(int summary_active, int summary_only)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1, .summary_only = summary_only,
                                 .schedule = {1, 1, 2, 1, 2, 1, summary_active}}; /* active: steps 4, 5 */
    open_fixture(&f, config);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (uint32_t step = 0; step < 10; step++) {
        tw_recorder_set_step(f.rec, step);
        for (int i = 0; i < 2; i++)
            tw_call_end(t, tw_call_begin(t), f.ids[0], 100 * step + i, 100 * step + i + 1, 0);
    }
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/tw-%ld-0001.csv", f.dir, (long)getpid());
    FILE *fp = fopen(path, "r");
    if (summary_only) {
        assert_null(fp);
    } else {
        assert_non_null(fp);
        char line[4096];
        assert_non_null(fgets(line, sizeof line, fp)); /* the header */
        /* step, then site (none), fwd_call_id and fwd_api (not a node) */
        const char *steps[] = {",4,0,0,\n", ",4,0,0,\n", ",5,0,0,\n", ",5,0,0,\n"};
        for (int i = 0; i < 4; i++) {
            assert_non_null(fgets(line, sizeof line, fp));
            cut_resource_columns(line);
            assert_string_equal(line + strlen(line) - 8, steps[i]);
        }
        assert_null(fgets(line, sizeof line, fp));
        fclose(fp);
    }
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    cJSON *s = read_json_file(path);
    assert_non_null(s);
    cJSON *api = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "apis"), 0);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls")), summary_active ? 4 : 20);
    cJSON_Delete(s);
    free_fixture(&f);
}

static void a_schedule_writes_the_records_of_active_steps_only(void **state)
{
    check_schedule(0, 0);
    check_schedule(1, 0);
}

static void summary_only_writes_the_summary_and_no_record_file(void **state)
{
    check_schedule(0, 1);
    /* nor a file of another stream (GPU rows): their time still reaches the summary */
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1, .summary_only = 1});
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &s), 0);
    const char row[] = "1,api,kernel,k,1,2,0,7,1,1\n";
    assert_int_equal(tw_writer_stream_write_gpu(s, row, sizeof row - 1, f.ids[0], 250), 0);
    close_fixture(&f);
    DIR *d = opendir(f.dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        assert_null(strstr(e->d_name, ".csv"));
    closedir(d);
    char path[512];
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    cJSON *summary = read_json_file(path);
    cJSON *api = cJSON_GetArrayItem(cJSON_GetObjectItem(summary, "apis"), 0);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "gpu_ns")), 250);
    cJSON_Delete(summary);
    free_fixture(&f);
}

/* The steps column of every line of a CSV record file, in order, into steps; returns the count. */
static size_t csv_steps(const char *path, uint32_t *steps, size_t max)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return 0;
    char line[4096];
    size_t n = 0;
    assert_non_null(fgets(line, sizeof line, fp)); /* the header */
    while (n < max && fgets(line, sizeof line, fp) != NULL) {
        /* the last columns are step, site, fwd_call_id, fwd_api (empty here), then the resources */
        cut_resource_columns(line);
        for (int cut = 0; cut < 3; cut++)
            *strrchr(line, ',') = '\0';
        steps[n++] = (uint32_t)strtoul(strrchr(line, ',') + 1, NULL, 10);
    }
    fclose(fp);
    return n;
}

/* Calls of steps 0..9, two per step, with a capture of steps 3..5: the capture's dir gets exactly
 * those, with a manifest and summary of their own; out_dir keeps what the schedule writes (every
 * step) and its manifest lists the capture. */
static void a_capture_writes_its_steps_to_a_dir_of_its_own(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1});
    char dir[512], err[256] = "", path[600];
    snprintf(dir, sizeof dir, "%s/captures/first", f.dir); /* parents are made */
    uint32_t id = 0;
    assert_int_equal(tw_writer_capture(f.writer, 3, 3, dir, &id, err, sizeof err), 0);
    assert_int_equal(id, 1);
    /* one at a time: a capture that would begin inside it is refused, and says which runs */
    assert_int_equal(tw_writer_capture(f.writer, 5, 2, dir, &id, err, sizeof err), TW_EBUSY);
    assert_non_null(strstr(err, "capture 1 (steps 3-5) is still recording"));
    assert_int_equal(tw_writer_capture(f.writer, 6, 0, dir, &id, err, sizeof err), TW_EINVAL);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (uint32_t step = 0; step < 10; step++) {
        tw_recorder_set_step(f.rec, step);
        tw_writer_set_step(f.writer, step);
        for (int i = 0; i < 2; i++)
            tw_call_end(t, tw_call_begin(t), f.ids[0], 100 * step + i, 100 * step + i + 1, 0);
    }
    close_fixture(&f);
    uint32_t steps[64];
    snprintf(path, sizeof path, "%s/tw-%ld-0001.csv", dir, (long)getpid());
    assert_int_equal(csv_steps(path, steps, 64), 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(steps[i], 3 + i / 2);
    snprintf(path, sizeof path, "%s/tw-%ld-0001.csv", f.dir, (long)getpid());
    assert_int_equal(csv_steps(path, steps, 64), 20);

    snprintf(path, sizeof path, "%s/manifest.json", dir);
    cJSON *m = read_json_file(path);
    assert_non_null(m);
    cJSON *capture = cJSON_GetObjectItem(m, "capture");
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(capture, "steps"), 0)), 3);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(capture, "steps"), 1)), 5);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "records_written")), 6);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "files")), 1);
    assert_false(cJSON_IsNull(cJSON_GetObjectItem(m, "end_ns")));
    cJSON_Delete(m);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    cJSON *s = read_json_file(path);
    cJSON *api = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "apis"), 0);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls")), 6);
    cJSON_Delete(s);

    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    m = read_json_file(path);
    cJSON *listed = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "captures"), 0);
    assert_non_null(listed);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "captures")), 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(listed, "state")), "done");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(listed, "dir")), dir);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(listed, "records_written")), 6);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(listed, "steps"), 1)), 5);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(listed, "files")), 1);
    cJSON_Delete(m);
    free_fixture(&f);
}

/* While the program runs on: once its step is past a capture's steps, the capture is finished
 * (files closed, manifest final) about one flush interval later; records of its steps that come
 * after that are counted as late, not written; a second capture follows. */
static void a_capture_is_finished_while_the_program_runs_and_counts_late_records(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1,
                                          .flush_interval_ns = 10 * 1000 * 1000});
    char dir[512], err[256] = "";
    snprintf(dir, sizeof dir, "%s/capture-1", f.dir);
    uint32_t id = 0;
    assert_int_equal(tw_writer_capture(f.writer, 0, 2, dir, &id, err, sizeof err), 0);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (uint32_t step = 0; step < 2; step++) {
        tw_recorder_set_step(f.rec, step);
        tw_call_end(t, tw_call_begin(t), f.ids[0], step, step + 1, 0);
    }
    tw_recorder_set_step(f.rec, 2);
    tw_writer_set_step(f.writer, 2);
    tw_writer_capture_stats_t cs = {0};
    /* the partial chunk reaches the writer at this thread's next call after a flush request */
    for (int i = 0; i < 60000 && !cs.done; i++) {
        tw_call_end(t, tw_call_begin(t), f.ids[1], 0, 1, 0);
        assert_int_equal(tw_writer_capture_stats(f.writer, 1, &cs), 0);
        usleep(1000);
    }
    assert_true(cs.done);
    assert_int_equal(cs.records_written, 2);
    /* a record of step 1 that comes now: late */
    tw_recorder_set_step(f.rec, 1);
    tw_call_end(t, tw_call_begin(t), f.ids[0], 5, 6, 0);
    tw_recorder_set_step(f.rec, 3);
    tw_writer_set_step(f.writer, 3);
    char second[512];
    snprintf(second, sizeof second, "%s/capture-2", f.dir);
    assert_int_equal(tw_writer_capture(f.writer, 3, 1, second, &id, err, sizeof err), 0);
    assert_int_equal(id, 2);
    tw_call_end(t, tw_call_begin(t), f.ids[0], 7, 8, 0);
    close_fixture(&f);
    assert_int_equal(tw_writer_capture_stats(f.writer, 1, &cs), 0);
    assert_int_equal(cs.records_late, 1);
    assert_int_equal(cs.records_written, 2);
    assert_int_equal(tw_writer_capture_stats(f.writer, 2, &cs), 0);
    assert_true(cs.done);
    assert_int_equal(cs.records_written, 1);
    assert_int_equal(tw_writer_capture_stats(f.writer, 3, &cs), TW_EINVAL);
    free_fixture(&f);
}

/* summary.json is there while the program runs (rewritten each flush interval), not only at close:
 * a summary-only job can be watched. */
static void the_summary_is_rewritten_while_the_program_runs(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1, .summary_only = 1,
                                          .flush_interval_ns = 10 * 1000 * 1000});
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (int i = 0; i < 5; i++)
        tw_call_end(t, tw_call_begin(t), f.ids[0], 10 * i, 10 * i + 3, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    double calls = 0;
    /* the partial chunk reaches the writer at this thread's next call after a flush request: calls
     * of another API keep coming while we look */
    for (int i = 0; i < 60000 && calls != 5; i++) {
        tw_call_end(t, tw_call_begin(t), f.ids[1], 0, 1, 0);
        cJSON *s = read_json_file(path);
        const cJSON *api;
        cJSON_ArrayForEach(api, cJSON_GetObjectItem(s, "apis"))
            if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(api, "api")), weird_names[0]) == 0)
                calls = cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls"));
        cJSON_Delete(s);
        usleep(1000);
    }
    assert_true(calls == 5);
    close_fixture(&f);
    free_fixture(&f);
}

/* Records reach the writer late (a thread's partial chunk): by then later captures may have begun;
 * each record still goes to the capture of its step, however many came since. */
static void records_find_their_capture_among_many(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1});
    char dir[512], err[256] = "";
    uint32_t id = 0;
    for (uint32_t k = 0; k < 5; k++) { /* captures of steps 0, 1, 2, 3, 4: one step each */
        snprintf(dir, sizeof dir, "%s/capture-%u", f.dir, k + 1);
        tw_writer_set_step(f.writer, k);
        assert_int_equal(tw_writer_capture(f.writer, k, 1, dir, &id, err, sizeof err), 0);
    }
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (uint32_t step = 0; step < 5; step++) { /* step k gets k + 1 calls, all in one late chunk */
        tw_recorder_set_step(f.rec, step);
        for (uint32_t i = 0; i <= step; i++)
            tw_call_end(t, tw_call_begin(t), f.ids[0], 10 * step + i, 10 * step + i + 1, 0);
    }
    tw_writer_set_step(f.writer, 5);
    close_fixture(&f);
    for (uint32_t k = 1; k <= 5; k++) {
        tw_writer_capture_stats_t cs;
        assert_int_equal(tw_writer_capture_stats(f.writer, k, &cs), 0);
        assert_true(cs.done);
        assert_int_equal(cs.records_written, k);
        assert_int_equal(cs.records_late, 0);
    }
    free_fixture(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_schedule_writes_the_records_of_active_steps_only),
        cmocka_unit_test(summary_only_writes_the_summary_and_no_record_file),
        cmocka_unit_test(a_capture_writes_its_steps_to_a_dir_of_its_own),
        cmocka_unit_test(the_summary_is_rewritten_while_the_program_runs),
        cmocka_unit_test(records_find_their_capture_among_many),
        cmocka_unit_test(a_capture_is_finished_while_the_program_runs_and_counts_late_records),
    };
    return cmocka_run_group_tests_name("writer_steps", tests, NULL, NULL);
}
