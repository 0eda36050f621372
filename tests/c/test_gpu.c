/* SPDX-License-Identifier: MIT */
/*
 * A GPU timing session against the fake CUPTI (gpu_fixture.c): why it is unavailable (no library, no
 * device, CUPTI refusing, another subscriber, a second session), stop and what it leaves, recording
 * turned off and on, the flush thread, and a forked child. The tests play the wrapper and the GPU,
 * then read the files back. test_gpu_attribution.c has which call each record goes to.
 */
#include "gpu_fixture.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cupti.h>

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
    tw_gpu_rows_t rows;
    tw_writer_gpu_rows(f.writer, &rows);
    char reason[512];
    assert_int_equal(tw_gpu_start(&config, &rows, &f.clock, &f.gpu, reason, sizeof reason), TW_EUNAVAIL);
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

/* ---- tests: stopping, pausing, the flush thread, a fork -------------------------------------------- */

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
    if (tw_test_sanitizer_cannot_fork_threads())
        skip(); /* (tw_test.h) */
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
    int rc = load_fake_cupti();
    if (rc != 0)
        return rc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_unusable_cupti_library_is_named_in_the_reason),
        cmocka_unit_test(no_device_means_unavailable_and_nothing_left_behind),
        cmocka_unit_test(cupti_refusing_to_enable_is_reported_with_its_error),
        cmocka_unit_test(another_subscriber_means_cpu_only_profiling),
        cmocka_unit_test(a_second_gpu_session_at_once_is_refused),
        cmocka_unit_test(stop_flushes_everything_and_leaves_cupti_as_it_was),
        cmocka_unit_test(recording_turns_off_and_on_again_and_says_when_cupti_refuses),
        cmocka_unit_test(the_flush_thread_writes_without_being_asked),
        cmocka_unit_test(a_forked_child_makes_no_cupti_call),
    };
    return cmocka_run_group_tests_name("gpu", tests, NULL, NULL);
}
