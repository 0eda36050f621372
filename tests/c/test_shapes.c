/* SPDX-License-Identifier: MIT */
/* tw_args_shapes: argument summaries (python/core/call/args.c's text) read back as input shapes. */
#include "tw_test.h"

#include <stdio.h>
#include <string.h>

/* The shapes of summary, as a NUL-terminated string in a static buffer ("ERANGE" when too small). */
static const char *shapes_of(const char *summary)
{
    static char out[2 * 600 + 2 + 1];
    size_t len = strlen(summary);
    int n = tw_args_shapes(summary, len, out, 2 * len + 2);
    if (n < 0)
        return "ERANGE";
    out[n] = '\0';
    return out;
}

static void tensors_give_their_sizes_and_other_values_empty_lists(void **state)
{
    assert_string_equal(shapes_of("((f32[4,8]@cpu, f32[8,16]@cpu), {})"), "[[4, 8], [8, 16]]");
    assert_string_equal(shapes_of("((f32[2,3]@cpu, f32[2,3]@cpu), {'alpha': 2})"), "[[2, 3], [2, 3], []]");
    assert_string_equal(shapes_of("((f32[]@cpu,), {})"), "[[]]");
    assert_string_equal(shapes_of("((), {})"), "[]");
    assert_string_equal(shapes_of("((bf16[123456,0,7]@cuda:0, None, True, -1, 1e-05, f64, torch.device), {})"),
                        "[[123456, 0, 7], [], [], [], [], [], []]");
    assert_string_equal(shapes_of("((uint16[2]@meta, tensor[3]@?), {'dim': 1, 'out': i64[5]@cpu})"),
                        "[[2], [3], [], [5]]");
}

static void tensor_lists_nest_and_lists_without_tensors_are_empty(void **state)
{
    assert_string_equal(shapes_of("(([f32[2,3]@cpu, f32[2,3]@cpu], 0), {})"), "[[[2, 3], [2, 3]], []]");
    assert_string_equal(shapes_of("((f32[6]@cpu, (2, 3)), {})"), "[[6], []]");
    assert_string_equal(shapes_of("(((f32[1]@cpu,), [f32[2]@cpu, [f32[3]@cpu, tuple]]), {})"),
                        "[[[1]], [[2], [[3], []]]]");
    assert_string_equal(shapes_of("(([f32[1]@cpu, 2, None],), {})"), "[[[1], [], []]]");
    /* more than 8 items: the summary holds the first 8 */
    assert_string_equal(shapes_of("(([i8[1]@cpu, i8[1]@cpu, i8[1]@cpu, i8[1]@cpu, i8[1]@cpu, i8[1]@cpu, i8[1]@cpu, "
                                  "i8[1]@cpu, ...],), {})"),
                        "[[[1], [1], [1], [1], [1], [1], [1], [1]]]");
    assert_string_equal(shapes_of("(([0, 1, 2, 3, 4, 5, 6, 7, ...], f32[1]@cpu), {})"), "[[], [1]]");
}

static void strings_with_delimiters_inside_are_one_value(void **state)
{
    assert_string_equal(shapes_of("(('a,b', f32[1]@cpu), {})"), "[[], [1]]");
    assert_string_equal(shapes_of("(('[x] (y) {z}', f32[1]@cpu), {'reduction': 'mean'})"), "[[], [1], []]");
    assert_string_equal(shapes_of("(('01234567890123456789012345678901...', f32[2]@cpu), {})"),
                        "[[], [2]]");
}

static void a_cut_summary_keeps_the_arguments_before_the_cut(void **state)
{
    assert_string_equal(shapes_of("((f32[1,2]@cpu, f32[3,4]@cpu, f32[5,6..."), "[[1, 2], [3, 4]]");
    assert_string_equal(shapes_of("((f32[1,2]@cpu, f32[3,4]@c..."), "[[1, 2], [3, 4]]");
    assert_string_equal(shapes_of("(([f32[1]@cpu, f32[2]@cpu, f32[3..."), "[[[1], [2]]]");
    assert_string_equal(shapes_of("((f32[1]@cpu, 12..."), "[[1]]");
    assert_string_equal(shapes_of("((f32[1]@cpu,), {'dim': 1, 'out': f32[2]@cpu, 'x': 'ab..."), "[[1], [], [2]]");
}

static void no_summary_gives_no_shapes(void **state)
{
    char out[8];
    assert_int_equal(tw_args_shapes("", 0, out, sizeof out), 0);
    assert_int_equal(tw_args_shapes("(tensor([1., 2.]),)", 19, out, sizeof out), 0);
    assert_int_equal(tw_args_shapes("((f32[4,8]@cpu,), {})", 21, out, 4), TW_ERANGE);
}

static void any_text_is_read_safely(void **state)
{
    /* every prefix of a summary, and texts that are not one: a result within the bound, never more */
    const char *texts[] = {"((f32[4,8]@cpu, [f32[1]@cpu, (2, 'a,b')], {'k': f32[2]@cpu})",
                           "(([[[[", "((]]]]", "(('", "((f32[", "((f32[1,", "((x[-1,a]@cpu), {'", "(()), {'a': }"};
    char out[2 * 128 + 2];
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        for (size_t len = 0; len <= strlen(texts[t]); len++) {
            int n = tw_args_shapes(texts[t], len, out, 2 * len + 2);
            assert_true(n >= 0 && (size_t)n <= 2 * len + 2);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tensors_give_their_sizes_and_other_values_empty_lists),
        cmocka_unit_test(tensor_lists_nest_and_lists_without_tensors_are_empty),
        cmocka_unit_test(strings_with_delimiters_inside_are_one_value),
        cmocka_unit_test(a_cut_summary_keeps_the_arguments_before_the_cut),
        cmocka_unit_test(no_summary_gives_no_shapes),
        cmocka_unit_test(any_text_is_read_safely),
    };
    return cmocka_run_group_tests_name("shapes", tests, NULL, NULL);
}
