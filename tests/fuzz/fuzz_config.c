/* SPDX-License-Identifier: MIT */
/* The config validator on any JSON text (first byte: from_strings): it accepts or names the problem,
 * and what it accepts is a complete config that it accepts again unchanged. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *text = fuzz_cstring(data + 1, size - 1);
    if (text == NULL)
        return 0;
    int from_strings = data[0] & 1;
    char *out = NULL, err[1024] = "";
    int rc = tw_config_normalize(text, from_strings, &out, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == TW_EINVAL || rc == TW_ENOMEM);
    if (rc == 0) {
        FUZZ_CHECK(out != NULL);
        char *again = NULL;
        FUZZ_CHECK(tw_config_normalize(out, 0, &again, err, sizeof err) == 0);
        FUZZ_CHECK(strcmp(out, again) == 0);
        free(again);
        free(out);
    } else if (rc == TW_EINVAL) {
        FUZZ_CHECK(err[0] != '\0');
    }
    free(text);
    return 0;
}
