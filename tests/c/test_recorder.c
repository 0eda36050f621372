/* SPDX-License-Identifier: MIT */
#include "tw_test.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tw_record_t *records;
    uint64_t count;
    uint64_t capacity;
    uint64_t tids[64];
    int tid_count;
} gathered_t;

static int gather_chunk(const tw_chunk_t *chunk, void *arg)
{
    gathered_t *g = arg;
    if (g->count + chunk->count > g->capacity)
        return -1;
    memcpy(g->records + g->count, chunk->records, chunk->count * sizeof(tw_record_t));
    g->count += chunk->count;
    int known = 0;
    for (int i = 0; i < g->tid_count; i++)
        known |= g->tids[i] == chunk->tid;
    if (!known && g->tid_count < 64)
        g->tids[g->tid_count++] = chunk->tid;
    return 0;
}

static gathered_t gather(tw_recorder_t *rec, uint64_t capacity)
{
    gathered_t g = {calloc(capacity, sizeof(tw_record_t)), 0, capacity, {0}, 0};
    assert_non_null(g.records);
    assert_int_equal(tw_recorder_foreach_chunk(rec, gather_chunk, &g), 0);
    return g;
}

static const tw_record_t *find(const gathered_t *g, uint32_t api_id)
{
    for (uint64_t i = 0; i < g->count; i++)
        if (g->records[i].api_id == api_id)
            return &g->records[i];
    return NULL;
}

/* outer [0, 100) contains a [10, 30) and b [40, 90); b contains c [50, 60). Ticks are synthetic. */
static void nested_calls_give_depth_parent_and_self_time(void **state)
{
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_thread_t *t = tw_recorder_attach(rec);
    assert_non_null(t);
    tw_frame_t *outer = tw_call_begin(t);
    tw_frame_t *a = tw_call_begin(t);
    tw_call_end(t, a, 1, 10, 30, 0);
    tw_frame_t *b = tw_call_begin(t);
    tw_frame_t *c = tw_call_begin(t);
    tw_call_end(t, c, 3, 50, 60, TW_RECORD_ERROR);
    tw_call_end(t, b, 2, 40, 90, 0);
    tw_call_end(t, outer, 0, 0, 100, 0);
    assert_int_equal(t->depth, 0);
    tw_recorder_collect(rec);

    gathered_t g = gather(rec, 16);
    assert_int_equal(g.count, 4);
    const tw_record_t *ro = find(&g, 0), *ra = find(&g, 1), *rb = find(&g, 2), *rc = find(&g, 3);
    assert_int_equal(ro->depth, 0);
    assert_int_equal(ro->parent_id, 0);
    assert_int_equal(ra->depth, 1);
    assert_int_equal(ra->parent_id, ro->call_id);
    assert_int_equal(rb->parent_id, ro->call_id);
    assert_int_equal(rc->depth, 2);
    assert_int_equal(rc->parent_id, rb->call_id);
    assert_int_equal(ro->cost, 100);
    assert_int_equal(ro->self, 100 - 20 - 50);
    assert_int_equal(rb->self, 50 - 10);
    assert_int_equal(rc->self, 10);
    assert_int_equal(rc->flags, TW_RECORD_ERROR);
    assert_int_equal(ro->flags, 0);
    /* Self times add up to the outermost call's cost. */
    assert_int_equal(ro->self + ra->self + rb->self + rc->self, ro->cost);
    assert_int_equal(g.tid_count, 1);
    assert_int_not_equal(g.tids[0], 0);
    free(g.records);
    tw_recorder_destroy(rec);
}

static void records_span_many_chunks_with_unique_ids(void **state)
{
    enum { N = TW_CHUNK_RECORDS * 5 + 17 };
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_thread_t *t = tw_recorder_attach(rec);
    for (uint64_t i = 0; i < N; i++) {
        tw_frame_t *f = tw_call_begin(t);
        tw_call_end(t, f, 5, i, i + 1, 0);
    }
    tw_recorder_collect(rec);
    tw_recorder_stats_t stats;
    tw_recorder_stats(rec, &stats);
    assert_int_equal(stats.records, N);
    assert_int_equal(stats.chunks, 6);
    assert_int_equal(stats.dropped, 0);
    gathered_t g = gather(rec, N);
    for (uint64_t i = 0; i < N; i++) {
        assert_int_equal(g.records[i].start, i); /* one thread: records keep their order */
        if (i > 0)
            assert_true(g.records[i].call_id > g.records[i - 1].call_id);
    }
    free(g.records);
    tw_recorder_destroy(rec);
}

static void nesting_deeper_than_the_stack_is_counted_not_recorded(void **state)
{
    enum { DEPTH = TW_MAX_DEPTH + 10 };
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_thread_t *t = tw_recorder_attach(rec);
    static tw_frame_t *frames[DEPTH];
    for (int i = 0; i < DEPTH; i++)
        frames[i] = tw_call_begin(t);
    for (int i = DEPTH - 1; i >= 0; i--)
        tw_call_end(t, frames[i], 9, (uint64_t)i, (uint64_t)(2 * DEPTH - i), 0);
    assert_int_equal(t->depth, 0);
    tw_recorder_collect(rec);
    tw_recorder_stats_t stats;
    tw_recorder_stats(rec, &stats);
    assert_int_equal(stats.records, TW_MAX_DEPTH);
    assert_int_equal(stats.dropped, 10);
    tw_recorder_destroy(rec);
}

#define THREADS 8
#define CALLS_PER_THREAD 100000

static void *record_calls(void *arg)
{
    tw_thread_t *t = tw_recorder_attach(arg);
    if (t == NULL)
        return NULL;
    for (uint64_t i = 0; i < CALLS_PER_THREAD; i++) {
        tw_frame_t *outer = tw_call_begin(t);
        if (i % 2 == 0) {
            tw_frame_t *inner = tw_call_begin(t);
            tw_call_end(t, inner, 2, 3 * i + 1, 3 * i + 2, 0);
            i++;
        }
        tw_call_end(t, outer, 1, 3 * i, 3 * i + 3, 0);
    }
    return t;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Threads exit before collection: their partial chunks are handed over on thread exit. */
static void eight_threads_record_every_call_exactly_once(void **state)
{
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, record_calls, rec), 0);
    for (int i = 0; i < THREADS; i++) {
        void *result;
        pthread_join(threads[i], &result);
        assert_non_null(result);
    }
    tw_recorder_collect(rec);
    tw_recorder_stats_t stats;
    tw_recorder_stats(rec, &stats);
    assert_int_equal(stats.records, THREADS * CALLS_PER_THREAD);
    assert_int_equal(stats.threads, THREADS);
    assert_int_equal(stats.dropped, 0);
    gathered_t g = gather(rec, THREADS * CALLS_PER_THREAD);
    assert_int_equal(g.count, THREADS * CALLS_PER_THREAD);
    assert_int_equal(g.tid_count, THREADS);
    uint64_t *ids = malloc(g.count * sizeof *ids);
    for (uint64_t i = 0; i < g.count; i++)
        ids[i] = g.records[i].call_id;
    qsort(ids, g.count, sizeof *ids, compare_u64);
    for (uint64_t i = 1; i < g.count; i++)
        assert_true(ids[i] > ids[i - 1]);
    assert_true(ids[0] >= 1);
    free(ids);
    free(g.records);
    tw_recorder_destroy(rec);
}

static void *attach_then_wait(void *arg)
{
    void **args = arg;
    tw_thread_t *t = tw_recorder_attach(args[0]);
    tw_frame_t *f = tw_call_begin(t);
    tw_call_end(t, f, 1, 0, 1, 0);
    pthread_barrier_wait(args[1]); /* attached */
    pthread_barrier_wait(args[1]); /* recorder destroyed */
    /* This thread now records for a new recorder; its old state was released. */
    tw_recorder_t *second;
    if (tw_recorder_create(&second) != 0)
        return NULL;
    tw_thread_t *t2 = tw_recorder_attach(second);
    void *ok = t2 != NULL && t2->recorder == second ? arg : NULL;
    tw_recorder_destroy(second);
    return ok;
}

static void a_thread_may_outlive_its_recorder(void **state)
{
    tw_recorder_t *rec;
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    assert_int_equal(tw_recorder_create(&rec), 0);
    void *args[2] = {rec, &barrier};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, attach_then_wait, args), 0);
    pthread_barrier_wait(&barrier);
    tw_recorder_destroy(rec);
    pthread_barrier_wait(&barrier);
    void *result;
    pthread_join(thread, &result);
    assert_ptr_equal(result, args);
    pthread_barrier_destroy(&barrier);
}

/* outer [0, 100) contains a [10, 60), during which the profiler worked 30 ticks (statistics of a's
 * inputs, say); after a, 5 more ticks of the profiler's work. Neither counts in a call's cost. */
static void excluded_ticks_leave_the_costs_of_calls_in_progress(void **state)
{
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_thread_t *t = tw_recorder_attach(rec);
    tw_frame_t *outer = tw_call_begin(t);
    tw_frame_t *a = tw_call_begin(t);
    tw_thread_exclude(t, 30);
    tw_call_end(t, a, 1, 10, 60, 0);
    tw_thread_exclude(t, 5);
    tw_call_end(t, outer, 0, 0, 100, 0);
    tw_thread_exclude(t, 1000); /* outside any call: no effect on later ones */
    tw_frame_t *b = tw_call_begin(t);
    tw_call_end(t, b, 2, 200, 210, 0);
    tw_recorder_collect(rec);
    gathered_t g = gather(rec, 8);
    const tw_record_t *ro = find(&g, 0), *ra = find(&g, 1), *rb = find(&g, 2);
    assert_int_equal(ra->cost, 50 - 30);
    assert_int_equal(ro->cost, 100 - 35);
    assert_int_equal(ro->self, 100 - 35 - 20);
    assert_int_equal(rb->cost, 10);
    assert_int_equal(ra->start, 10); /* start times stay those of the clock */
    free(g.records);
    tw_recorder_destroy(rec);
}

/* A module call's record carries the module id set on its frame; other calls carry none. */
static void module_ids_set_on_the_frame_reach_the_record(void **state)
{
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_thread_t *t = tw_recorder_attach(rec);
    tw_frame_t *outer = tw_call_begin(t);
    outer->module_id = TW_MODULE_ROOT;
    tw_frame_t *inner = tw_call_begin(t);
    tw_call_end_args(t, inner, 1, 1, 2, 0, "abc", 3);
    tw_call_end(t, outer, 0, 0, 3, 0);
    tw_recorder_collect(rec);
    gathered_t g = gather(rec, 8);
    assert_int_equal(find(&g, 0)->module_id, TW_MODULE_ROOT);
    assert_int_equal(find(&g, 1)->module_id, TW_MODULE_NONE);
    assert_int_equal(find(&g, 1)->args_len, 3);
    assert_string_equal(tw_module_path(TW_MODULE_ROOT), "");
    assert_null(tw_module_path(TW_MODULE_NONE));
    uint32_t id;
    assert_int_equal(tw_api_intern("features.0", &id), 0);
    assert_string_equal(tw_module_path(id + 1), "features.0");
    free(g.records);
    tw_recorder_destroy(rec);
}

static void attaching_twice_gives_the_same_state(void **state)
{
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_thread_t *a = tw_recorder_attach(rec);
    assert_ptr_equal(tw_recorder_attach(rec), a);
    tw_recorder_stats_t stats;
    tw_recorder_stats(rec, &stats);
    assert_int_equal(stats.threads, 1);
    tw_recorder_destroy(rec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nested_calls_give_depth_parent_and_self_time),
        cmocka_unit_test(records_span_many_chunks_with_unique_ids),
        cmocka_unit_test(nesting_deeper_than_the_stack_is_counted_not_recorded),
        cmocka_unit_test(eight_threads_record_every_call_exactly_once),
        cmocka_unit_test(a_thread_may_outlive_its_recorder),
        cmocka_unit_test(attaching_twice_gives_the_same_state),
        cmocka_unit_test(excluded_ticks_leave_the_costs_of_calls_in_progress),
        cmocka_unit_test(module_ids_set_on_the_frame_reach_the_record),
    };
    return cmocka_run_group_tests_name("recorder", tests, NULL, NULL);
}
