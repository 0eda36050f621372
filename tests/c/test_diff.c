/* SPDX-License-Identifier: MIT */
/*
 * tw-report --diff's test of "beyond noise": the Mann-Whitney U test against values worked out by
 * hand (U by counting pairs, p from the normal approximation's formula; scipy.stats.mannwhitneyu(x,
 * y, method="asymptotic") gives the same p to 1e-15 for each case). p is compared within 1e-9: the
 * inputs are small integers, so no summation order moves it by more than a few ulps.
 */
#include "tw_test.h"

#include <math.h>

#include "diff.h"

/* cmocka 1.1 has no assert_double_equal. */
#define assert_near(got, want, tolerance) near_at((got), (want), (tolerance), __LINE__)
static void near_at(double got, double want, double tolerance, int line)
{
    if (!(fabs(got - want) <= tolerance))
        fail_msg("line %d: %.17g is not %.17g within %g", line, got, want, tolerance);
}

static void separated_samples_give_u_zero_and_the_normal_p(void **state)
{
    const double x[] = {1, 2, 3}, y[] = {4, 5, 6};
    mann_whitney_t t;
    assert_int_equal(report_mann_whitney(x, 3, y, 3, &t), 0);
    /* No x above any y: U = 0. Mean 4.5, variance 3*3*7/12 = 5.25, z = -(4.5 - 0.5)/sqrt(5.25). */
    assert_true(t.u == 0);
    assert_near(t.z, -4 / sqrt(5.25), 1e-12);
    assert_near(t.p, 0.0808555983700523, 1e-9);
    /* The other way round: U = 9 (= 3*3 - 0), the same p, z of the other sign. */
    mann_whitney_t back;
    assert_int_equal(report_mann_whitney(y, 3, x, 3, &back), 0);
    assert_true(back.u == 9);
    assert_near(back.p, t.p, 1e-15);
    assert_near(back.z, -t.z, 1e-15);
}

static void ties_share_their_mean_rank_and_shrink_the_variance(void **state)
{
    /* Ranks: 1 | 2 2 2 -> 3 each | 3 3 -> 5.5 each | 4 -> 7 | 5 -> 8. x's rank sum 1+3+3+5.5 = 12.5,
     * U = 12.5 - 4*5/2 = 2.5 (by pairs: 2,2 tie one y each, 3 beats a 2 and ties a 3). Ties of 3 and 2:
     * sum(t^3 - t) = 24 + 6 = 30; variance 4*4/12 * (9 - 30/(8*7)) = 11.2857...; z = -(5.5 - 0.5)/sd. */
    const double x[] = {1, 2, 2, 3}, y[] = {2, 3, 4, 5};
    mann_whitney_t t;
    assert_int_equal(report_mann_whitney(x, 4, y, 4, &t), 0);
    assert_true(t.u == 2.5);
    assert_near(t.z, -5 / sqrt(16.0 / 12 * (9 - 30.0 / 56)), 1e-12);
    assert_near(t.p, 0.13665824773814753, 1e-9);
}

static void unequal_sizes_count_pairs(void **state)
{
    /* x above y in 0+1+2+3+3 = 9 of the 15 pairs; mean 7.5, variance 5*3*9/12 = 11.25. */
    const double x[] = {50, 10, 40, 20, 30}, y[] = {35, 15, 25};
    mann_whitney_t t;
    assert_int_equal(report_mann_whitney(x, 5, y, 3, &t), 0);
    assert_true(t.u == 9);
    assert_near(t.p, 0.765594483995764, 1e-9);
}

static void a_one_rank_shift_inside_the_continuity_correction_is_p_one(void **state)
{
    /* U = 2.5 against a mean of 2: |U - mean| = 0.5 is all continuity correction, z = 0. */
    const double x[] = {1, 3}, y[] = {2, 4};
    mann_whitney_t t;
    assert_int_equal(report_mann_whitney(y, 2, x, 2, &t), 0);
    assert_true(t.u == 3);
    assert_near(t.p, erfc((1 - 0.5) / sqrt(4 * 5 / 12.0) / sqrt(2.0)), 1e-12);
    const double a[] = {1, 2}, b[] = {1, 2};
    assert_int_equal(report_mann_whitney(a, 2, b, 2, &t), 0);
    assert_true(t.u == 2);
    assert_true(t.p == 1);
}

static void identical_values_and_empty_samples_tell_nothing(void **state)
{
    const double x[] = {5, 5}, y[] = {5, 5, 5};
    mann_whitney_t t;
    assert_int_equal(report_mann_whitney(x, 2, y, 3, &t), 0);
    assert_true(t.u == 3); /* every pair a tie: one half each */
    assert_true(t.p == 1);
    assert_int_equal(report_mann_whitney(x, 2, y, 0, &t), 0);
    assert_true(isnan(t.p));
}

static void a_clear_shift_over_sixty_steps_is_far_beyond_any_level(void **state)
{
    /* 60 steps each, NEW 20% slower with steps interleaving by ~10%: every NEW step above every
     * BASE step but a few. U counts the pairs exactly. */
    double base[60], slow[60];
    for (int i = 0; i < 60; i++) {
        base[i] = 1000 + (i * 37) % 100;     /* 1000..1099 */
        slow[i] = 1090 + (i * 53) % 100;     /* 1090..1189 */
    }
    double pairs = 0;
    for (int i = 0; i < 60; i++)
        for (int j = 0; j < 60; j++)
            pairs += slow[i] > base[j] ? 1 : slow[i] == base[j] ? 0.5 : 0;
    mann_whitney_t t;
    assert_int_equal(report_mann_whitney(slow, 60, base, 60, &t), 0);
    assert_true(t.u == pairs);
    assert_true(t.z > 0);
    assert_true(t.p < 1e-15);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(separated_samples_give_u_zero_and_the_normal_p),
        cmocka_unit_test(ties_share_their_mean_rank_and_shrink_the_variance),
        cmocka_unit_test(unequal_sizes_count_pairs),
        cmocka_unit_test(a_one_rank_shift_inside_the_continuity_correction_is_p_one),
        cmocka_unit_test(identical_values_and_empty_samples_tell_nothing),
        cmocka_unit_test(a_clear_shift_over_sixty_steps_is_far_beyond_any_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
