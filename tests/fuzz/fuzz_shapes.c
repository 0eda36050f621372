/* SPDX-License-Identifier: MIT */
/* tw_args_shapes (input shapes from an argument summary, as read from any file): never crashes nor
 * writes past its bound, and gives balanced lists of integers. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t room = 2 * size + 2; /* what reader.h says always suffices */
    char *out = malloc(room + 1);
    if (out == NULL)
        return 0;
    int n = tw_args_shapes((const char *)data, size, out, room);
    FUZZ_CHECK(n >= 0 && (size_t)n <= room);
    /* a JSON list of lists of integers: each character allowed after the one before it */
    int depth = 0;
    for (int i = 0; i < n; i++) {
        char c = out[i], before = i ? out[i - 1] : 0;
        int digit = c >= '0' && c <= '9', digit_before = before >= '0' && before <= '9';
        if (i == 0)
            FUZZ_CHECK(c == '[');
        else if (before == '[')
            FUZZ_CHECK(c == '[' || c == ']' || c == '-' || digit);
        else if (before == ']' || digit_before) /* a digit after a digit: not after a leading zero */
            FUZZ_CHECK(c == ',' || c == ']' ||
                       (digit && digit_before && !(before == '0' && (out[i - 2] < '0' || out[i - 2] > '9'))));
        else if (before == ',')
            FUZZ_CHECK(c == ' ');
        else if (before == ' ')
            FUZZ_CHECK(c == '[' || c == '-' || digit);
        else
            FUZZ_CHECK(before == '-' && digit);
        depth += c == '[' ? 1 : c == ']' ? -1 : 0;
        FUZZ_CHECK(depth > 0 || (depth == 0 && i == n - 1));
    }
    char *again = malloc(room + 1);
    if (again != NULL) { /* deterministic */
        FUZZ_CHECK(tw_args_shapes((const char *)data, size, again, room) == n && memcmp(again, out, (size_t)n) == 0);
        free(again);
    }
    free(out);
    return 0;
}
