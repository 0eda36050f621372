/* SPDX-License-Identifier: MIT */
/* The chunk queue on its own: no recorder, no writer. */
#include "tw_test.h"
#include <stdlib.h>

static int note_count(const tw_chunk_t *chunk, void *arg)
{
    uint32_t **at = arg;
    *(*at)++ = chunk->count;
    return 0;
}

static void a_queue_nobody_drains_holds_every_chunk_in_order(void **state)
{
    tw_queue_t *q;
    assert_int_equal(tw_queue_create(&q), 0);
    for (uint32_t i = 1; i <= 300; i++) {
        tw_chunk_t *c = tw_queue_chunk(q, 7); /* unbounded: no consumer */
        assert_non_null(c);
        assert_null(c->charged);
        c->count = i;
        tw_queue_push(q, c);
    }
    uint64_t chunks, records;
    tw_queue_counts(q, &chunks, &records);
    assert_int_equal(chunks, 300);
    assert_int_equal(records, 300 * 301 / 2);
    uint32_t seen[300], *at = seen;
    assert_int_equal(tw_queue_foreach(q, note_count, &at), 0);
    assert_int_equal(at - seen, 300);
    for (uint32_t i = 0; i < 300; i++)
        assert_int_equal(seen[i], i + 1);
    tw_queue_destroy(q); /* frees what it holds */
}

static int rings;
static void count_ring(void *arg)
{
    (void)arg;
    rings++;
}

static void an_attached_consumer_bounds_the_bytes_waiting_and_is_rung_at_each_chunk(void **state)
{
    tw_queue_t *q;
    assert_int_equal(tw_queue_create(&q), 0);
    static const tw_queue_consumer_t consumer = {count_ring, NULL, NULL, NULL, NULL, NULL};
    /* Asked for less than two chunks: two chunks, with their text, is the least. */
    assert_int_equal(tw_queue_attach(q, 1, 0, &consumer, NULL, 1), 0);
    assert_int_equal(tw_queue_attach(q, 1, 0, &consumer, NULL, 1), TW_EBUSY);
    assert_true(tw_queue_attached(q));
    rings = 0;
    tw_chunk_t *a = tw_queue_chunk(q, 1), *b = tw_queue_chunk(q, 1);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(tw_queue_chunk(q, 1)); /* full, and not asked to wait */
    assert_int_equal(tw_queue_charge(q, 1), 0); /* a row does not fit either */
    uint64_t used, peak, limit;
    tw_queue_memory(q, &used, &peak, &limit);
    assert_int_equal(limit, TW_QUEUE_MIN_BUDGET);
    assert_int_equal(used, 2 * TW_CHUNK_BYTES);
    assert_int_equal(peak, used);
    a->count = 1, b->count = 2;
    tw_queue_push(q, a);
    tw_queue_push(q, b);
    assert_int_equal(rings, 2);
    tw_chunk_t *list = tw_queue_take(q);
    assert_non_null(list);
    assert_int_equal(list->count, 1);
    assert_non_null(list->next);
    assert_int_equal(list->next->count, 2);
    assert_null(list->next->next);
    assert_null(tw_queue_take(q));
    /* Taken is not written: the bytes stay charged until the chunks are released. */
    assert_null(tw_queue_chunk(q, 1));
    tw_chunk_release(list->next);
    tw_chunk_release(list);
    tw_queue_memory(q, &used, &peak, &limit);
    assert_int_equal(used, 0);
    assert_int_equal(peak, 2 * TW_CHUNK_BYTES);
    tw_chunk_t *c = tw_queue_chunk(q, 1);
    assert_non_null(c);
    /* Detached: unbounded again, and a chunk charged before owes the next consumer nothing. */
    tw_queue_detach(q);
    assert_false(tw_queue_attached(q));
    assert_int_equal(tw_queue_attach(q, 1, 0, &consumer, NULL, 1), 0);
    tw_chunk_release(c);
    tw_queue_memory(q, &used, &peak, &limit);
    assert_int_equal(used, 0);
    tw_queue_stop(q);
    tw_queue_detach(q);
    tw_queue_destroy(q);
}

/* A consumer that, made to (TW_QUEUE_HELP_MUST), writes (releases) one of the chunks it was handed. */
typedef struct {
    tw_chunk_t *held[4];
    int count;
    int asked[3]; /* by urgency: TW_QUEUE_HELP_IF_LATE, _HIGH, _MUST */
} helped_t;

static void help_by_releasing(void *arg, int urgency)
{
    helped_t *h = arg;
    h->asked[urgency]++;
    if (urgency == TW_QUEUE_HELP_MUST && h->count > 0)
        tw_chunk_release(h->held[--h->count]);
}

static void producers_help_the_consumer_past_half_of_the_budget_and_when_it_is_full(void **state)
{
    tw_queue_t *q;
    assert_int_equal(tw_queue_create(&q), 0);
    static const tw_queue_consumer_t consumer = {NULL, NULL, NULL, NULL, NULL, help_by_releasing};
    helped_t h = {0};
    assert_int_equal(tw_queue_attach(q, 4 * TW_CHUNK_BYTES, 0, &consumer, &h, 1), 0);
    /* half: not past it; each chunk asks only whether the consumer is late */
    tw_chunk_t *a = tw_queue_chunk(q, 1), *b = tw_queue_chunk(q, 1);
    assert_int_equal(h.asked[TW_QUEUE_HELP_IF_LATE], 2);
    assert_int_equal(h.asked[TW_QUEUE_HELP_HIGH] + h.asked[TW_QUEUE_HELP_MUST], 0);
    h.held[h.count++] = tw_queue_chunk(q, 1); /* past half: asked, if it is free now */
    assert_int_equal(h.asked[TW_QUEUE_HELP_HIGH], 1);
    h.held[h.count++] = tw_queue_chunk(q, 1); /* full */
    assert_int_equal(h.asked[TW_QUEUE_HELP_HIGH], 2);
    assert_int_equal(h.asked[TW_QUEUE_HELP_MUST], 0);
    /* no room: the consumer is made to write, and then there is */
    tw_chunk_t *c = tw_queue_chunk(q, 1);
    assert_non_null(c);
    assert_int_equal(h.asked[TW_QUEUE_HELP_MUST], 1);
    assert_int_equal(h.count, 1);
    /* a consumer stopping is not asked: past half, or full (the chunk is refused, as on_full "drop") */
    tw_queue_stop(q);
    tw_chunk_release(c);
    c = tw_queue_chunk(q, 1);
    assert_non_null(c);
    assert_null(tw_queue_chunk(q, 1));
    assert_int_equal(h.asked[TW_QUEUE_HELP_HIGH], 2);
    assert_int_equal(h.asked[TW_QUEUE_HELP_MUST], 1);
    assert_int_equal(h.asked[TW_QUEUE_HELP_IF_LATE], 2);
    tw_chunk_release(c);
    tw_chunk_release(a);
    tw_chunk_release(b);
    tw_chunk_release(h.held[0]);
    tw_queue_detach(q);
    tw_queue_destroy(q);
}

static void drops_are_counted_and_the_flush_epoch_moves(void **state)
{
    tw_queue_t *q;
    assert_int_equal(tw_queue_create(&q), 0);
    tw_queue_add_dropped(q, 3);
    tw_queue_add_dropped(q, 4);
    assert_int_equal(tw_queue_dropped(q), 7);
    const uint32_t *epoch = tw_queue_flush_epoch(q);
    uint32_t before = *epoch;
    tw_queue_request_flush(q);
    assert_int_equal(*epoch, before + 1);
    tw_queue_destroy(q);
}

static void a_recorder_pushes_to_its_queue_only(void **state)
{
    tw_recorder_t *rec;
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_thread_t *t = tw_recorder_attach(rec);
    assert_non_null(t);
    for (int i = 0; i < 2 * TW_CHUNK_RECORDS + 5; i++)
        tw_call_end(t, tw_call_begin(t), 1, (uint64_t)i, (uint64_t)i + 1, 0);
    tw_recorder_collect(rec);
    uint64_t chunks, records;
    tw_queue_counts(tw_recorder_queue(rec), &chunks, &records);
    assert_int_equal(chunks, 3);
    assert_int_equal(records, 2 * TW_CHUNK_RECORDS + 5);
    tw_recorder_destroy(rec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_queue_nobody_drains_holds_every_chunk_in_order),
        cmocka_unit_test(an_attached_consumer_bounds_the_bytes_waiting_and_is_rung_at_each_chunk),
        cmocka_unit_test(producers_help_the_consumer_past_half_of_the_budget_and_when_it_is_full),
        cmocka_unit_test(drops_are_counted_and_the_flush_epoch_moves),
        cmocka_unit_test(a_recorder_pushes_to_its_queue_only),
    };
    return cmocka_run_group_tests_name("queue", tests, NULL, NULL);
}
