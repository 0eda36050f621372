/* SPDX-License-Identifier: MIT */
/*
 * The real CUPTI library, without a GPU: the one at $TW_REAL_CUPTI (make check-cupti-lib points it at
 * the nvidia-cuda-cupti wheels torch's CUDA 12 and 13 builds install; skipped when unset). It loads
 * from the wheel's layout with every entry point torchwrapper calls, and its version call works; then
 * GPU timing, asked for as if torch had seen a device, fails with one line that names the cause, and
 * the session's CPU records are written as usual. On a machine with a GPU the start succeeds instead
 * and is stopped cleanly (tests/python/test_gpu.py is the test there).
 */
#include "tw_test.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/gpu/cupti_lib.h"

static const char *real_path;

/* Whether this machine can load a CUDA driver (then CUPTI may start for real). */
static int have_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h != NULL)
        dlclose(h);
    return h != NULL;
}

static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = 0;
    for (int c; (c = fgetc(f)) != EOF;)
        n += c == '\n';
    fclose(f);
    return n;
}

static void the_real_cupti_loads_and_says_in_one_line_why_gpu_timing_cannot_start(void **state)
{
    (void)state;
    char dir[] = "/tmp/tw-test-cupti-lib-XXXXXX";
    assert_non_null(mkdtemp(dir));
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_clock_t clock;
    assert_int_equal(tw_clock_calibrate(&clock), 0);
    tw_writer_config_t wc = {.out_dir = dir, .format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                             .file_name_spec = "serial", .rank = -1};
    tw_writer_t *writer;
    char err[512];
    assert_int_equal(tw_writer_create(&wc, tw_recorder_queue(rec), &clock, &writer, err, sizeof err), 0);

    /* as the Python side would, with the wheel's library first among the candidates */
    const char *candidates[] = {real_path, NULL};
    tw_gpu_config_t config = {.candidates = candidates, .device_available = 1};
    tw_gpu_t *gpu = NULL;
    char reason[1024] = "";
    unsetenv("TW_CUPTI_LIBRARY");
    tw_gpu_rows_t rows;
    tw_writer_gpu_rows(writer, &rows);
    int rc = tw_gpu_start(&config, &rows, &clock, &gpu, reason, sizeof reason);

    /* loaded from the wheel's path: tw_cupti_load takes a library only when every entry point resolves */
    assert_string_equal(tw_gpu_library_path(), real_path);
    assert_non_null(tw_cupti.handle);
    uint32_t version = UINT32_MAX;
    assert_int_equal(tw_cupti.get_version(&version), CUPTI_SUCCESS);
    assert_int_equal(version, CUPTI_API_VERSION); /* the library of the header it was built with */
    const char *text = NULL;
    assert_int_equal(tw_cupti.get_result_string(CUPTI_ERROR_NOT_INITIALIZED, &text), CUPTI_SUCCESS);
    assert_string_equal(text, "CUPTI_ERROR_NOT_INITIALIZED");
    uint64_t now = 0;
    assert_int_equal(tw_cupti.timestamp(&now), CUPTI_SUCCESS);
    assert_true(now > 0);
    printf("# %s: cuptiGetVersion() = %u (built against CUPTI_API_VERSION %d); start: %s\n", real_path, version,
           CUPTI_API_VERSION, rc == 0 ? "GPU timing on" : reason);

    if (!have_driver()) {
        assert_int_equal(rc, TW_EUNAVAIL);
        assert_null(gpu);
        /* one line, naming what failed, with CUPTI's error, and the cause */
        assert_null(strchr(reason, '\n'));
        assert_non_null(strstr(reason, "cuptiSubscribe failed: CUPTI_ERROR_"));
        assert_non_null(strstr(reason, "the CUDA driver, libcuda.so.1, cannot be loaded"));
    } else if (rc == 0) {
        tw_gpu_stop(gpu);
    }
    /* CPU records are written as usual */
    tw_thread_t *t = tw_recorder_attach(rec);
    uint32_t api;
    assert_int_equal(tw_api_intern("torch.matmul", &api), 0);
    for (int i = 0; i < 3; i++) {
        tw_frame_t *frame = tw_call_begin(t);
        uint64_t start = tw_clock_ticks(clock.source);
        tw_call_end(t, frame, api, start, tw_clock_ticks(clock.source), 0);
    }
    tw_recorder_collect(rec);
    tw_writer_close(writer);
    char path[512];
    snprintf(path, sizeof path, "%s/tw-%lld-0001.csv", dir, (long long)getpid());
    assert_int_equal(count_lines(path), 1 + 3); /* header and the three calls */
    tw_gpu_destroy(gpu);
    tw_writer_destroy(writer);
    tw_recorder_destroy(rec);
    rm_rf(dir);
}

int main(void)
{
    real_path = getenv("TW_REAL_CUPTI");
    if (real_path == NULL || real_path[0] == '\0') {
        printf("SKIP: TW_REAL_CUPTI (the path of a real libcupti.so) is not set: make check-cupti-lib sets it\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_real_cupti_loads_and_says_in_one_line_why_gpu_timing_cannot_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
