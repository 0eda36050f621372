/* SPDX-License-Identifier: MIT */
/* Writes that fail (a full disk, I/O errors, plain and gzip): records dropped and counted, and the
 * writer goes on. */
#include "writer_fixture.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* write() as the library sees it: the executable's definition interposes on libc's, so errors can
 * be injected into the writer thread's writes. */
static int inject_errno; /* set by the test thread, read by the writer thread: atomic accesses */

ssize_t write(int fd, const void *buf, size_t count)
{
    int injected = __atomic_load_n(&inject_errno, __ATOMIC_RELAXED);
    if (injected != 0 && fd > 2) {
        errno = injected;
        return -1;
    }
    return syscall(SYS_write, fd, buf, count);
}

static void a_full_disk_drops_and_counts_and_goes_on(void **state)
{
    static const int errors[] = {ENOSPC, EIO};
    for (int k = 0; k < 2; k++) {
        fixture_t f;
        tw_writer_config_t config = {.format = TW_FORMAT_JSON, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                     .rank = -1};
        open_fixture(&f, config);
        record_calls(f.rec, f.ids, 3000);
        tw_recorder_collect(f.rec);
        __atomic_store_n(&inject_errno, errors[k], __ATOMIC_RELAXED);
        record_calls(f.rec, f.ids, 2000); /* the program goes on recording */
        tw_recorder_collect(f.rec);
        assert_int_equal(tw_writer_close(f.writer), TW_EIO);
        __atomic_store_n(&inject_errno, 0, __ATOMIC_RELAXED);
        tw_writer_stats_t ws;
        tw_writer_stats(f.writer, &ws);
        assert_int_equal(ws.write_errno, errors[k]);
        /* Every record is accounted for: written or dropped, never silently lost. */
        assert_int_equal(ws.records_written + ws.records_dropped, 5000);
        assert_true(ws.records_dropped >= 2000);
        readback_t r = read_back(f.dir, ".jsonl", getpid());
        assert_int_equal(r.rows, ws.records_written);
        free_fixture(&f);
    }
}

/* A write that fails leaves a hole in its member: the records of that flush are dropped and counted,
 * that file ends there (read to its hole), and the next records go to a new, whole file. */
static void a_failed_gzip_write_drops_its_flush_and_goes_on_in_a_new_file(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1, .compress = TW_COMPRESS_GZIP, .flush_interval_ns = 5 * 1000 * 1000};
    open_fixture(&f, config);
    tw_writer_stats_t ws;
    record_calls(f.rec, f.ids, 3000);
    tw_recorder_collect(f.rec);
    do { /* written: deflated, and on disk */
        usleep(1000);
        tw_writer_stats(f.writer, &ws);
    } while (ws.records_written < 3000);
    __atomic_store_n(&inject_errno, ENOSPC, __ATOMIC_RELAXED);
    record_calls(f.rec, f.ids, 2000);
    tw_recorder_collect(f.rec);
    do {
        usleep(1000);
        tw_writer_stats(f.writer, &ws);
    } while (ws.records_dropped < 2000);
    __atomic_store_n(&inject_errno, 0, __ATOMIC_RELAXED);
    record_calls(f.rec, f.ids, 1000);
    tw_recorder_collect(f.rec);
    assert_int_equal(tw_writer_close(f.writer), TW_EIO);
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, 4000);
    assert_int_equal(ws.records_dropped, 2000);
    readback_t r = read_back(f.dir, ".csv.gz", getpid());
    assert_true(r.files >= 2);
    assert_int_equal(r.incomplete, r.files - 1); /* each ends at its hole; the last one is whole */
    assert_int_equal(r.rows, 4000);
    free_fixture(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_full_disk_drops_and_counts_and_goes_on),
        cmocka_unit_test(a_failed_gzip_write_drops_its_flush_and_goes_on_in_a_new_file),
    };
    return cmocka_run_group_tests_name("writer_failures", tests, NULL, NULL);
}
