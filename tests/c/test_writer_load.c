/* SPDX-License-Identifier: MIT */
/* The writer under load: many producers, and a writer thread starved of CPU, which the producers
 * help so that the budget drops nothing. */
#include "writer_fixture.h"

#include "torchwrapper/clock.h"
#include "torchwrapper/recorder.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PRODUCERS 8
#define PER_PRODUCER 1000000

static void *produce(void *arg)
{
    fixture_t *f = arg;
    record_calls(f->rec, f->ids, PER_PRODUCER);
    return NULL;
}

static void eight_producers_lose_nothing(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 64 << 20, .file_name_spec = "serial",
                                 .block_when_full = 1, .buffer_bytes = 8 << 20, .rank = -1};
    open_fixture(&f, config);
    pthread_t threads[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, produce, &f), 0);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(threads[i], NULL);
    close_fixture(&f);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    tw_recorder_stats_t rs;
    tw_recorder_stats(f.rec, &rs);
    assert_int_equal(rs.dropped, 0);
    assert_int_equal(ws.records_dropped, 0);
    assert_int_equal(ws.records_written, (uint64_t)PRODUCERS * PER_PRODUCER);
    readback_t r = read_back(f.dir, ".csv", getpid());
    assert_int_equal(r.rows, (uint64_t)PRODUCERS * PER_PRODUCER);
    free_fixture(&f);
}

/* ---- a writer thread starved of CPU ------------------------------------------------------------ */

/* The tid of the writer thread (it names itself tw-writer when it starts; one at a time here), once
 * it has started; -1 where /proc has no such thread. */
static pid_t writer_tid(void)
{
    for (int tries = 0; tries < 100000; tries++) {
        DIR *d = opendir("/proc/self/task");
        if (d == NULL)
            return -1;
        pid_t found = -1;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && found < 0) {
            char path[300], comm[32] = "";
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
            FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
            if (f != NULL && fgets(comm, sizeof comm, f) != NULL && strcmp(comm, "tw-writer\n") == 0)
                found = (pid_t)atol(e->d_name);
            if (f != NULL)
                fclose(f);
        }
        closedir(d);
        if (found > 0)
            return found;
        usleep(100); /* not started yet */
    }
    return -1;
}

/* This thread's CPUs in *allowed; the first of them in *writer_cpu, the second (the first again on
 * one CPU: the threads share it) in *producer_cpu. */
static void split_cpus(cpu_set_t *allowed, cpu_set_t *writer_cpu, cpu_set_t *producer_cpu)
{
    assert_int_equal(sched_getaffinity(0, sizeof *allowed, allowed), 0);
    int a = -1, b = -1;
    for (int i = 0; i < CPU_SETSIZE && b < 0; i++)
        if (CPU_ISSET(i, allowed)) {
            if (a < 0)
                a = i;
            else
                b = i;
        }
    if (b < 0)
        b = a;
    CPU_ZERO(writer_cpu);
    CPU_SET(a, writer_cpu);
    CPU_ZERO(producer_cpu);
    CPU_SET(b, producer_cpu);
}

static int spin_stop; /* atomic accesses */

/* A thread that never sleeps, on the CPU of *arg. */
static void *spin(void *arg)
{
    sched_setaffinity(0, sizeof(cpu_set_t), arg);
    while (!__atomic_load_n(&spin_stop, __ATOMIC_RELAXED))
        ;
    return NULL;
}

/* Clears (on 0) or sets again CAP_SYS_NICE in this thread's effective capabilities, which let it
 * raise the writer thread from the lowest priority: 0, or -1 where it cannot. */
static int effective_sys_nice(int on)
{
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data) != 0)
        return -1;
    if (on)
        data[0].effective |= data[0].permitted & (1u << CAP_SYS_NICE);
    else
        data[0].effective &= ~(1u << CAP_SYS_NICE);
    return (int)syscall(SYS_capset, &header, data);
}

#define STARVED_RECORDS (256u * 1024) /* 8 times what a budget of 4 MiB holds */

/*
 * The writer thread runs at the lowest priority; here it shares its one CPU with a thread that never
 * sleeps, so it gets almost none, while this thread records on another CPU (or the same, on one CPU)
 * 8 times what the budget holds, inside one outer call. The producer writes for it: every record
 * reaches the files, none is dropped (on_full "drop", the default), and with on_full "wait" too; the
 * time it writes is not the outer call's cost. No threshold on a time: the cost against the span
 * and the writing, both measured.
 * unprivileged: this thread may not raise the writer thread to normal priority (no CAP_SYS_NICE, and
 * RLIMIT_NICE 0, as for most users), which then stays at the lowest throughout.
 */
static void check_starved_writer(int block_when_full, int unprivileged)
{
    struct rlimit nice_limit;
    assert_int_equal(getrlimit(RLIMIT_NICE, &nice_limit), 0);
    if (unprivileged) {
        struct rlimit none = {0, nice_limit.rlim_max};
        if (effective_sys_nice(0) != 0 || setrlimit(RLIMIT_NICE, &none) != 0)
            skip();
    }
    fixture_t f;
    /* the defaults, but a smaller budget: 26 MB of files rather than 100 for the same proportions */
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 30, .file_name_spec = "serial",
                                 .block_when_full = block_when_full, .buffer_bytes = 4 << 20, .rank = -1};
    open_fixture(&f, config);
    pid_t tid = writer_tid();
    if (tid < 0) {
        free_fixture(&f);
        skip(); /* no /proc: not Linux */
    }
#ifdef SCHED_IDLE
    assert_int_equal(sched_getscheduler(tid), SCHED_IDLE);
#endif
    cpu_set_t allowed, writer_cpu, producer_cpu;
    split_cpus(&allowed, &writer_cpu, &producer_cpu);
    assert_int_equal(sched_setaffinity(tid, sizeof writer_cpu, &writer_cpu), 0);
    __atomic_store_n(&spin_stop, 0, __ATOMIC_RELAXED);
    pthread_t spinner;
    assert_int_equal(pthread_create(&spinner, NULL, spin, &writer_cpu), 0);
    assert_int_equal(sched_setaffinity(0, sizeof producer_cpu, &producer_cpu), 0);
    /* the calls inside one that the program is making (a model's forward): the producer's writing
     * happens inside it, and is not its cost */
    tw_clock_source_t source = tw_clock_source();
    tw_thread_t *t = tw_recorder_attach(f.rec);
    assert_non_null(t);
    tw_frame_t *outer = tw_call_begin(t);
    uint64_t begin = tw_clock_ticks(source);
    record_calls(f.rec, f.ids, STARVED_RECORDS);
    uint64_t end = tw_clock_ticks(source);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws); /* the writing done inside the outer call: before its end writes more */
    uint64_t helped = ws.helped, help_ns = ws.help_ns;
    tw_call_end(t, outer, f.ids[0], begin, end, 0);
    assert_non_null(t->chunk);
    const tw_record_t *outer_record = &t->chunk->records[t->chunk->count - 1];
    assert_int_equal(outer_record->depth, 0);
    tw_clock_t clock;
    assert_int_equal(tw_clock_calibrate(&clock), 0);
    uint64_t span_ns = tw_clock_duration_ns(&clock, end - begin);
    uint64_t cost_ns = tw_clock_duration_ns(&clock, outer_record->cost);
    /* all of the writing is left out of the cost (and a wait for room, under on_full "wait"): half of
     * it at least, whatever the two clocks' rates (help_ns is CLOCK_MONOTONIC's, the cost the ticks') */
    assert_true(cost_ns + help_ns / 2 <= span_ns);
    tw_recorder_collect(f.rec);
#ifdef SCHED_IDLE
    if (unprivileged) /* never raised */
        assert_int_equal(sched_getscheduler(tid), SCHED_IDLE);
#endif
    __atomic_store_n(&spin_stop, 1, __ATOMIC_RELAXED);
    pthread_join(spinner, NULL);
    assert_int_equal(sched_setaffinity(0, sizeof allowed, &allowed), 0);
    close_fixture(&f);
    if (unprivileged) {
        assert_int_equal(setrlimit(RLIMIT_NICE, &nice_limit), 0);
        effective_sys_nice(1);
    }
    tw_writer_stats(f.writer, &ws);
    tw_recorder_stats_t rs;
    tw_recorder_stats(f.rec, &rs);
    assert_int_equal(rs.dropped, 0);
    assert_int_equal(ws.records_dropped, 0);
    assert_int_equal(ws.records_written, STARVED_RECORDS + 1);
    readback_t r = read_back(f.dir, ".csv", getpid());
    assert_int_equal(r.rows, STARVED_RECORDS + 1);
    /* the producer wrote for the writer thread (valgrind runs one thread at a time, its own way) */
    if (getenv("TW_UNDER_VALGRIND") == NULL)
        assert_true(helped > 0);
    free_fixture(&f);
}

/* Complete lines in dir's .csv files now (the writer may be writing the last one): rows + headers. */
static uint64_t csv_lines(const char *dir)
{
    uint64_t lines = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".csv") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        for (int c; (c = fgetc(fp)) != EOF;)
            lines += c == '\n';
        fclose(fp);
    }
    closedir(d);
    return lines;
}

/* Holds the writer thread's CPU (three threads that never sleep, on *cpu) until stop_spinners(). */
static pthread_t spinners[3];

static void start_spinners(cpu_set_t *cpu)
{
    __atomic_store_n(&spin_stop, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&spinners[i], NULL, spin, cpu), 0);
}

static void stop_spinners(void)
{
    __atomic_store_n(&spin_stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 3; i++)
        pthread_join(spinners[i], NULL);
}

/*
 * Below the high-water mark, with the writer thread starved (its CPU held by busy threads, as when
 * other programs keep every core busy): the records still reach the files while the program runs,
 * not only when it closes. The chunk handed over after 10 flush intervals finds the thread late
 * (no flush for 4 intervals), and its producer writes and flushes for it (waiting for the pen if the
 * thread holds it); or the thread flushed in the last 4 intervals, after the first chunk came, and so
 * wrote it first. Either way, whatever the scheduler gave the thread: no clock in the assertion.
 * Before, they stayed in memory for as long as the starvation lasted (a SIGKILL lost them, an
 * on-demand capture waited).
 */
static void a_starved_writer_s_records_reach_the_files_while_the_program_runs(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 30, .file_name_spec = "serial",
                                 .buffer_bytes = 32 << 20, .flush_interval_ns = 10 * 1000 * 1000, .rank = -1};
    open_fixture(&f, config);
    pid_t tid = writer_tid();
    if (tid < 0) {
        close_fixture(&f);
        free_fixture(&f);
        skip(); /* no /proc: not Linux */
    }
    cpu_set_t allowed, writer_cpu, producer_cpu;
    split_cpus(&allowed, &writer_cpu, &producer_cpu);
    assert_int_equal(sched_setaffinity(tid, sizeof writer_cpu, &writer_cpu), 0);
    start_spinners(&writer_cpu);
    assert_int_equal(sched_setaffinity(0, sizeof producer_cpu, &producer_cpu), 0);
    record_calls(f.rec, f.ids, TW_CHUNK_RECORDS + 1); /* one chunk handed over */
    usleep(100 * 1000);                                /* 10 flush intervals at least */
    record_calls(f.rec, f.ids, TW_CHUNK_RECORDS);     /* the next handover finds the thread late */
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    uint64_t lines = csv_lines(f.dir); /* before close: what the files hold now */
    stop_spinners();
    assert_int_equal(sched_setaffinity(0, sizeof allowed, &allowed), 0);
    close_fixture(&f);
    assert_true(ws.records_written >= TW_CHUNK_RECORDS);
    assert_true(lines >= TW_CHUNK_RECORDS + 1); /* the header, and the first chunk's rows */
    free_fixture(&f);
}

static void a_writer_starved_of_cpu_loses_nothing(void **state)
{
    check_starved_writer(0, 0);
}

static void a_writer_starved_of_cpu_loses_nothing_when_producers_wait(void **state)
{
    check_starved_writer(1, 0);
}

static void a_writer_starved_of_cpu_loses_nothing_where_it_may_not_be_raised(void **state)
{
    check_starved_writer(0, 1);
    check_starved_writer(1, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eight_producers_lose_nothing),
        cmocka_unit_test(a_writer_starved_of_cpu_loses_nothing),
        cmocka_unit_test(a_writer_starved_of_cpu_loses_nothing_when_producers_wait),
        cmocka_unit_test(a_writer_starved_of_cpu_loses_nothing_where_it_may_not_be_raised),
        cmocka_unit_test(a_starved_writer_s_records_reach_the_files_while_the_program_runs),
    };
    return cmocka_run_group_tests_name("writer_load", tests, NULL, NULL);
}
