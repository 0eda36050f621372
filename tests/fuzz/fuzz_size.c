/* SPDX-License-Identifier: MIT */
/* The size parser ("10MB", "1.5GiB"): never crashes, accepts only what it documents. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstring(data, size);
    if (text == NULL)
        return 0;
    uint64_t bytes = 12345;
    int rc = tw_parse_size(text, &bytes);
    FUZZ_CHECK(rc == 0 || rc == TW_EINVAL || rc == TW_ERANGE);
    if (rc == 0) {
        FUZZ_CHECK(bytes >= 1);
        const char *p = text + strspn(text, " \t\n\v\f\r"); /* leading white space is allowed */
        FUZZ_CHECK((*p >= '0' && *p <= '9') || *p == '.');      /* then a number */
        uint64_t again = 0;
        FUZZ_CHECK(tw_parse_size(text, &again) == 0 && again == bytes);   /* deterministic */
    } else {
        FUZZ_CHECK(bytes == 12345); /* untouched on error */
    }
    free(text);
    return 0;
}
