/* SPDX-License-Identifier: MIT */
/* Formatting of record fields: numbers at every digit count and both ends of the range against
 * snprintf, CSV text fields against libcsv's own quoting. */
#include "tw_test.h"

#include <csv.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void check_u64(uint64_t v)
{
    char got[32], want[32];
    char *end = tw_format_u64(got, v);
    *end = '\0';
    snprintf(want, sizeof want, "%" PRIu64, v);
    assert_string_equal(got, want);
    assert_int_equal(tw_decimal_digits(v), (int)strlen(want));
}

static void check_i64(int64_t v)
{
    char got[32], want[32];
    char *end = tw_format_i64(got, v);
    *end = '\0';
    snprintf(want, sizeof want, "%" PRId64, v);
    assert_string_equal(got, want);
}

static void unsigned_numbers_match_printf_at_every_digit_count(void **state)
{
    check_u64(0);
    check_u64(UINT64_MAX);
    uint64_t power = 1;
    for (int digits = 1; digits <= 19; digits++) {
        check_u64(power);          /* 1, 10, 100, ...: one more digit */
        check_u64(power - 1);      /* 0, 9, 99, ...: the largest of one fewer */
        check_u64(power + 1);
        check_u64(power * 5 + 7);
        power *= 10;
    }
    check_u64(power); /* 10^19 */
    check_u64(power - 1);
    /* a spread of values in between, deterministic */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        check_u64(x);
        check_u64(x >> (i % 64));
    }
}

static void signed_numbers_match_printf_at_both_ends(void **state)
{
    check_i64(0);
    check_i64(-1);
    check_i64(INT64_MIN);
    check_i64(INT64_MAX);
    check_i64(1700000000123456789LL); /* a start_ns */
    check_i64(-1700000000123456789LL);
    for (int64_t v = -1000; v <= 1000; v++)
        check_i64(v);
}

static void check_csv(const char *s, size_t len)
{
    char got[256], want[256];
    size_t n = (size_t)(tw_csv_field(got, s, len) - got);
    int plain = len > 0 && s[0] != ' ' && s[len - 1] != ' ' && memchr(s, ',', len) == NULL &&
                memchr(s, '"', len) == NULL && memchr(s, '\r', len) == NULL && memchr(s, '\n', len) == NULL;
    if (plain || len == 0) { /* as is */
        assert_int_equal(n, len);
        assert_memory_equal(got, s, len);
        return;
    }
    size_t m = csv_write(want, sizeof want, s, len); /* libcsv's quoting, byte for byte */
    assert_int_equal(n, m);
    assert_memory_equal(got, want, n);
}

static void csv_fields_are_quoted_as_libcsv_quotes_them(void **state)
{
    const char *cases[] = {"", "torch.add", "f32[2,3]@cpu", "a\"b", "\"", "\"\"", " lead", "trail ", "x\ny", "x\ry",
                           "(f32[4], \"s\", 1)", ",", "\",\""};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_csv(cases[i], strlen(cases[i]));
    /* random strings over an alphabet rich in the special bytes */
    static const char alphabet[] = "ab ,\"\r\n\x01\xc3\xa9";
    uint64_t x = 12345;
    char s[100];
    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t)(i % 100);
        for (size_t j = 0; j < len; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            s[j] = alphabet[x % (sizeof alphabet - 1)];
        }
        check_csv(s, len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unsigned_numbers_match_printf_at_every_digit_count),
        cmocka_unit_test(signed_numbers_match_printf_at_both_ends),
        cmocka_unit_test(csv_fields_are_quoted_as_libcsv_quotes_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
