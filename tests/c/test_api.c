/* SPDX-License-Identifier: MIT */
#include "tw_test.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void interning_twice_gives_the_same_id(void **state)
{
    uint32_t a, b, c;
    assert_int_equal(tw_api_intern("torch.add", &a), 0);
    assert_int_equal(tw_api_intern("torch.Tensor.__add__", &b), 0);
    assert_int_equal(tw_api_intern("torch.add", &c), 0);
    assert_int_equal(a, c);
    assert_int_not_equal(a, b);
    assert_string_equal(tw_api_name(a), "torch.add");
    assert_string_equal(tw_api_name(b), "torch.Tensor.__add__");
}

static void bad_names_are_refused(void **state)
{
    uint32_t id = 7;
    char long_name[TW_API_NAME_MAX + 2];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    assert_int_equal(tw_api_intern(NULL, &id), TW_EINVAL);
    assert_int_equal(tw_api_intern("", &id), TW_EINVAL);
    assert_int_equal(tw_api_intern(long_name, &id), TW_EINVAL);
    assert_int_equal(id, 7);
    long_name[TW_API_NAME_MAX] = '\0';
    assert_int_equal(tw_api_intern(long_name, &id), 0);
}

static void unknown_ids_have_no_name(void **state)
{
    assert_null(tw_api_name(tw_api_count()));
    assert_null(tw_api_name(TW_API_ID_NONE));
}

static void many_names_survive_table_growth(void **state)
{
    enum { N = 20000 };
    static uint32_t ids[N];
    char name[64];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "torch.many.f%d", i);
        assert_int_equal(tw_api_intern(name, &ids[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "torch.many.f%d", i);
        assert_string_equal(tw_api_name(ids[i]), name);
        uint32_t again;
        assert_int_equal(tw_api_intern(name, &again), 0);
        assert_int_equal(again, ids[i]);
    }
}

#define THREADS 4
#define PER_THREAD 5000
static uint32_t thread_ids[THREADS][PER_THREAD];

static void *intern_shared_names(void *arg)
{
    uint32_t *out = arg;
    char name[64];
    for (int i = 0; i < PER_THREAD; i++) {
        snprintf(name, sizeof name, "torch.shared.g%d", i);
        if (tw_api_intern(name, &out[i]) != 0)
            out[i] = TW_API_ID_NONE;
    }
    return NULL;
}

static void concurrent_interning_agrees_on_ids(void **state)
{
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&threads[t], NULL, intern_shared_names, thread_ids[t]), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    for (int i = 0; i < PER_THREAD; i++) {
        assert_int_not_equal(thread_ids[0][i], TW_API_ID_NONE);
        for (int t = 1; t < THREADS; t++)
            assert_int_equal(thread_ids[t][i], thread_ids[0][i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(interning_twice_gives_the_same_id),
        cmocka_unit_test(bad_names_are_refused),
        cmocka_unit_test(unknown_ids_have_no_name),
        cmocka_unit_test(many_names_survive_table_growth),
        cmocka_unit_test(concurrent_interning_agrees_on_ids),
    };
    return cmocka_run_group_tests_name("api", tests, NULL, NULL);
}
