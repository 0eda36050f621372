/* SPDX-License-Identifier: MIT */
/*
 * tw-report --ranks's tests of "beyond noise" (ranks_analysis.c): the signed-rank test's exact
 * distribution on short runs, against sign patterns counted by hand, and its normal approximation
 * beyond 25 pairs (scipy 1.17's stats.wilcoxon(d, method="exact"), and method="approx" past 25,
 * give the same p for each case); and the binomial tail of the sign test on how often a rank is a
 * step's slowest.
 */
#include "tw_test.h"

#include <math.h>

#include "ranks_analysis.h"

/* cmocka 1.1 has no assert_double_equal. */
#define assert_near(got, want, tolerance) near_at((got), (want), (tolerance), __LINE__)
static void near_at(double got, double want, double tolerance, int line)
{
    if (!(fabs(got - want) <= tolerance))
        fail_msg("line %d: %.17g is not %.17g within %g", line, got, want, tolerance);
}

static double p_of(const double *d, size_t n)
{
    double zero[64] = {0};
    int oom = 0;
    double p = report_signed_rank_p(d, zero, n, &oom);
    assert_false(oom);
    return p;
}

static void thirteen_steps_all_one_way_are_two_patterns_in_8192(void **state)
{
    /* Only "all positive" and "all negative" are as extreme: p = 2 / 2^13 = 0.000244, below 0.001
     * (the normal approximation said 0.0017) */
    double d[13];
    for (int k = 0; k < 13; k++)
        d[k] = 1000 + 37 * k;
    assert_true(p_of(d, 13) == 2.0 / 8192);
    /* 10 steps cannot reach 0.001 (2 / 1024), 11 can (2 / 2048) */
    assert_true(p_of(d, 10) == 2.0 / 1024);
    assert_true(p_of(d, 11) == 2.0 / 2048);
}

static void one_difference_the_other_way_counts_the_subsets_as_extreme(void **state)
{
    /* ranks 1..5, positive ones summing to 10 of 15: as extreme are the 10 subsets summing to 5 or
     * less ({}, {1}..{5}, {1,2}, {1,3}, {1,4}, {2,3}) and their mirror images: p = 20 / 32 */
    const double d[] = {1, 2, 3, 4, -5};
    assert_true(p_of(d, 5) == 20.0 / 32);
    /* the smallest difference the other way: W = 14 of 15, as extreme: sums 0 and 1, each side */
    const double e[] = {-1, 2, 3, 4, 5};
    assert_true(p_of(e, 5) == 4.0 / 32);
}

static void tied_differences_share_their_mean_rank_in_the_exact_distribution(void **state)
{
    /* |1|, |1| -> rank 1.5 each, 2 -> 3, 3 -> 4; doubled: 3, 3, 6, 8 (total 20). The positives'
     * doubled sum is 3 + 3 + 8 = 14; of the 16 subsets, 5 reach 14 ({6,8}, {3,3,8}, {3,6,8} twice,
     * all four): p = 2 * 5 / 16 */
    const double d[] = {1, 1, -2, 3};
    assert_true(p_of(d, 4) == 10.0 / 16);
}

static void zero_differences_are_dropped(void **state)
{
    double d[15] = {0};
    for (int k = 2; k < 15; k++)
        d[k] = k;
    assert_true(p_of(d, 15) == 2.0 / 8192); /* the 13 that differ */
    assert_true(p_of(d, 2) == 1);           /* none differs */
}

static void past_twenty_five_pairs_the_normal_approximation_takes_over(void **state)
{
    double d[26];
    for (int k = 0; k < 26; k++)
        d[k] = k + 1;
    assert_true(p_of(d, 25) == 2.0 / (1 << 25));
    /* W = 351, mean 175.5, variance 26 * 27 * 53 / 24 = 1550.25 */
    assert_near(p_of(d, 26), erfc((351 - 175.5 - 0.5) / sqrt(1550.25) / sqrt(2.0)), 1e-15);
}

static void binomial_tails_by_hand(void **state)
{
    assert_near(report_binomial_tail(4, 4, 0.25), 1.0 / 256, 1e-15);
    assert_near(report_binomial_tail(8, 8, 0.25), 1.0 / 65536, 1e-17);
    assert_near(report_binomial_tail(5, 10, 0.5), 638.0 / 1024, 1e-13);
    /* at least 3 of 4 with q = 1/4: 4 * (1/4)^3 * 3/4 + (1/4)^4 = 13 / 256 */
    assert_near(report_binomial_tail(3, 4, 0.25), 13.0 / 256, 1e-15);
    assert_true(report_binomial_tail(0, 7, 0.25) == 1);
    assert_true(report_binomial_tail(8, 7, 0.25) == 0);
    /* a million steps: a half, plus half of P(X = n/2) ~ sqrt(2 / (pi n)) / 2 */
    assert_near(report_binomial_tail(500000, 1000000, 0.5), 0.5 + sqrt(2 / (M_PI * 1e6)) / 2, 1e-6);
    /* below the mean: 1 less the lower tail, summed from k - 1 down (P(X <= 1) = (3/4)^4 + 4 (1/4)(3/4)^3) */
    assert_near(report_binomial_tail(2, 4, 0.25), 1 - (81.0 + 108.0) / 256, 1e-15);
    assert_near(report_binomial_tail(1, 4, 0.25), 1 - 81.0 / 256, 1e-15);
    /* millions of steps, far from the mean on either side: a few terms each */
    assert_true(report_binomial_tail(10, 4000000, 0.25) == 1);
    assert_true(report_binomial_tail(3000000, 4000000, 0.25) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(thirteen_steps_all_one_way_are_two_patterns_in_8192),
        cmocka_unit_test(one_difference_the_other_way_counts_the_subsets_as_extreme),
        cmocka_unit_test(tied_differences_share_their_mean_rank_in_the_exact_distribution),
        cmocka_unit_test(zero_differences_are_dropped),
        cmocka_unit_test(past_twenty_five_pairs_the_normal_approximation_takes_over),
        cmocka_unit_test(binomial_tails_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
