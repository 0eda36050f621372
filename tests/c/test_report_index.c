/* SPDX-License-Identifier: MIT */
/*
 * The report pass's index of calls (src/report/index.c), the one join every sink uses: exactly the
 * last REPORT_INDEX_RECENT calls are found whatever their ids (ids that share a slot of a
 * direct-mapped table too), a call read twice keeps its place, a sink's value is its own; waiting
 * entries of one key come back oldest first through growth and removals, every tag apart, and
 * past REPORT_INDEX_WAITING a new one is refused while those there stay.
 */
#include "tw_test.h"

#include <string.h>

#include "groups.h"
#include "index.h"

static void note(report_index_t *x, int64_t pid, uint64_t call_id, uint64_t parent_id)
{
    tw_row_t row;
    memset(&row, 0, sizeof row);
    row.kind = TW_FILE_CALLS;
    row.pid = pid;
    row.call_id = call_id;
    row.parent_id = parent_id;
    row.tid = call_id % 3;
    row.site = (uint32_t)(call_id % 7);
    report_index_note(x, &row);
}

static void exactly_the_last_calls_are_found(void **state)
{
    (void)state;
    report_index_t x = {0};
    const uint64_t n = REPORT_INDEX_RECENT + 1000;
    for (uint64_t id = 1; id <= n; id++)
        note(&x, 7, id, id / 2);
    for (uint64_t id = 1; id <= n; id++) {
        report_call_t *c = report_index_call(&x, 7, id);
        if (id <= n - REPORT_INDEX_RECENT) {
            assert_null(c);
            continue;
        }
        assert_non_null(c);
        assert_int_equal(c->parent_id, id / 2);
        assert_int_equal(c->tid, id % 3);
        assert_int_equal(c->site, id % 7);
    }
    assert_null(report_index_call(&x, 8, n)); /* another process's call of that id */
    assert_null(report_index_call(&x, 7, 0));
    report_index_free(&x);
}

/* The ids a direct-mapped table of REPORT_INDEX_RECENT slots would put in one slot: each forgets the
 * one before. The index keeps them all. */
static void ids_that_share_a_slot_are_all_kept(void **state)
{
    (void)state;
    report_index_t x = {0};
    uint64_t same[64];
    size_t found = 0;
    uint64_t home = report_pid_id_hash(1, 1) & (REPORT_INDEX_RECENT - 1);
    for (uint64_t id = 1; found < 64; id++)
        if ((report_pid_id_hash(1, id) & (REPORT_INDEX_RECENT - 1)) == home)
            same[found++] = id;
    for (size_t i = 0; i < found; i++)
        note(&x, 1, same[i], 0);
    for (size_t i = 0; i < found; i++)
        assert_non_null(report_index_call(&x, 1, same[i]));
    report_index_free(&x);
}

static void a_call_read_twice_keeps_its_place(void **state)
{
    (void)state;
    report_index_t x = {0};
    note(&x, 1, 1, 0);
    report_index_set(report_index_call(&x, 1, 1), REPORT_USE_TRACE, 42);
    for (uint64_t id = 2; id <= REPORT_INDEX_RECENT / 2; id++)
        note(&x, 1, id, 0);
    note(&x, 1, 1, 5); /* again: its fields anew, the sinks' values gone, its place the old one */
    report_call_t *c = report_index_call(&x, 1, 1);
    assert_non_null(c);
    assert_int_equal(c->parent_id, 5);
    assert_null(report_index_call_of(&x, 1, 1, REPORT_USE_TRACE));
    for (uint64_t id = REPORT_INDEX_RECENT / 2 + 1; id <= REPORT_INDEX_RECENT; id++)
        note(&x, 1, id, 0);
    assert_non_null(report_index_call(&x, 1, 2));
    note(&x, 1, REPORT_INDEX_RECENT + 1, 0); /* the oldest leaves: call 1, read first */
    assert_null(report_index_call(&x, 1, 1));
    assert_non_null(report_index_call(&x, 1, 2));
    report_index_free(&x);
}

static void each_sink_sees_only_its_own_value(void **state)
{
    (void)state;
    report_index_t x = {0};
    note(&x, 3, 10, 0);
    report_call_t *c = report_index_call(&x, 3, 10);
    assert_null(report_index_call_of(&x, 3, 10, REPORT_USE_FLAME));
    report_index_set(c, REPORT_USE_FLAME, 99);
    assert_null(report_index_call_of(&x, 3, 10, REPORT_USE_TRACE));
    assert_int_equal(report_index_call_of(&x, 3, 10, REPORT_USE_FLAME)->value[REPORT_USE_FLAME], 99);
    report_index_free(&x);
}

static void waiting_entries_come_back_oldest_first(void **state)
{
    (void)state;
    report_index_t x = {0};
    /* three keys with several entries each, interleaved, through the table's growth */
    for (uint64_t k = 0; k < 3000; k++) {
        report_wait_t *w = report_index_wait(&x, 1, 100 + k % 3, REPORT_WAIT_TRACE_FORWARD);
        assert_non_null(w);
        w->a = k;
    }
    assert_non_null(report_index_wait(&x, 1, 100, REPORT_WAIT_FLAME_FORWARD)); /* another tag */
    for (uint64_t k = 0; k < 3000; k += 3) {
        for (uint64_t key = 0; key < 3; key++) {
            report_wait_t *w = report_index_waiting(&x, 1, 100 + key, REPORT_WAIT_TRACE_FORWARD);
            assert_non_null(w);
            assert_int_equal(w->a, k + key);
            report_index_remove(&x, w);
        }
    }
    assert_null(report_index_waiting(&x, 1, 100, REPORT_WAIT_TRACE_FORWARD));
    assert_non_null(report_index_waiting(&x, 1, 100, REPORT_WAIT_FLAME_FORWARD));
    assert_int_equal(x.nwaiting, 1);
    report_index_free(&x);
}

static void the_bound_refuses_new_entries_and_keeps_the_old(void **state)
{
    (void)state;
    report_index_t x = {0};
    for (uint64_t id = 1; id <= REPORT_INDEX_WAITING; id++) {
        report_wait_t *w = report_index_wait(&x, 2, id, REPORT_WAIT_FLAME_CHILDREN);
        assert_non_null(w);
        w->a = id;
    }
    assert_null(report_index_wait(&x, 2, REPORT_INDEX_WAITING + 1, REPORT_WAIT_FLAME_CHILDREN));
    assert_int_equal(x.nwaiting, REPORT_INDEX_WAITING);
    assert_int_equal(report_index_waiting(&x, 2, 1, REPORT_WAIT_FLAME_CHILDREN)->a, 1);
    report_index_remove(&x, report_index_waiting(&x, 2, 1, REPORT_WAIT_FLAME_CHILDREN));
    assert_non_null(report_index_wait(&x, 2, REPORT_INDEX_WAITING + 1, REPORT_WAIT_FLAME_CHILDREN));
    /* what is left, each once, removed as it is met */
    size_t at = 0, left = 0;
    uint64_t sum = 0;
    for (report_wait_t *w; (w = report_index_next(&x, REPORT_WAIT_FLAME_CHILDREN, &at)) != NULL; left++) {
        sum += w->id;
        report_index_remove(&x, w);
    }
    assert_int_equal(left, REPORT_INDEX_WAITING);
    uint64_t n = REPORT_INDEX_WAITING + 1;
    assert_int_equal(sum, n * (n + 1) / 2 - 1);
    assert_int_equal(x.nwaiting, 0);
    report_index_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exactly_the_last_calls_are_found),
        cmocka_unit_test(ids_that_share_a_slot_are_all_kept),
        cmocka_unit_test(a_call_read_twice_keeps_its_place),
        cmocka_unit_test(each_sink_sees_only_its_own_value),
        cmocka_unit_test(waiting_entries_come_back_oldest_first),
        cmocka_unit_test(the_bound_refuses_new_entries_and_keeps_the_old),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
