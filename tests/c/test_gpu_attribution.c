/* SPDX-License-Identifier: MIT */
/*
 * GPU records against the fake CUPTI (gpu_fixture.c): each kernel, copy and memset attributed to the
 * innermost call that launched it, whatever order the buffers arrive in and on any thread; work
 * launched outside any call, records lost, waiting or still running. The tests play the wrapper
 * (tw_call_begin, the GPU hooks' push and pop, tw_call_end) and the GPU (fake_cupti_launch, and when
 * buffers come back), then read the files back. test_gpu.c has the session's life.
 */
#include "gpu_fixture.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cupti.h>

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

int main(void)
{
    int rc = load_fake_cupti();
    if (rc != 0)
        return rc;
    const struct CMUnitTest tests[] = {
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
        cmocka_unit_test(threads_attribute_work_to_their_own_calls),
    };
    return cmocka_run_group_tests_name("gpu_attribution", tests, NULL, NULL);
}
