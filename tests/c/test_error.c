/* SPDX-License-Identifier: MIT */
#include "tw_test.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

static void every_error_code_has_its_own_text(void **state)
{
    const int codes[] = {TW_ENOMEM, TW_EINVAL, TW_EBUSY, TW_ENOTACTIVE, TW_EFULL, TW_EIO, TW_ERANGE, TW_EUNAVAIL};
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        assert_true(codes[i] < 0);
        assert_string_not_equal(tw_strerror(codes[i]), "unknown error");
        for (size_t j = i + 1; j < n; j++)
            assert_string_not_equal(tw_strerror(codes[i]), tw_strerror(codes[j]));
    }
}

static void error_codes_are_negative_errno_values(void **state)
{
    assert_int_equal(TW_ENOMEM, -ENOMEM);
    assert_int_equal(TW_EINVAL, -EINVAL);
    assert_int_equal(TW_EBUSY, -EBUSY);
    assert_int_equal(TW_EIO, -EIO);
    assert_int_equal(TW_ERANGE, -ERANGE);
    /* the ones with a text of their own still are errno values */
    assert_int_equal(TW_ENOTACTIVE, -ESRCH);
    assert_int_equal(TW_EFULL, -ENOBUFS);
    assert_int_equal(TW_EUNAVAIL, -ENOTSUP);
}

static void strerror_names_a_system_error_passed_through(void **state)
{
#ifdef HAVE_STRERRORDESC_NP
    assert_string_equal(tw_strerror(-EACCES), strerror(EACCES));
    assert_string_equal(tw_strerror(-ENOENT), strerror(ENOENT));
#else
    skip();
#endif
}

static void strerror_accepts_any_int(void **state)
{
    assert_string_equal(tw_strerror(0), "success");
    assert_string_equal(tw_strerror(INT_MIN), "unknown error");
    assert_string_equal(tw_strerror(INT_MAX), "unknown error");
    assert_string_equal(tw_strerror(-1000), "unknown error");
}

static void version_is_major_minor_patch(void **state)
{
    int major, minor, patch;
    assert_int_equal(sscanf(tw_version(), "%d.%d.%d", &major, &minor, &patch), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_error_code_has_its_own_text),
        cmocka_unit_test(error_codes_are_negative_errno_values),
        cmocka_unit_test(strerror_names_a_system_error_passed_through),
        cmocka_unit_test(strerror_accepts_any_int),
        cmocka_unit_test(version_is_major_minor_patch),
    };
    return cmocka_run_group_tests_name("error", tests, NULL, NULL);
}
