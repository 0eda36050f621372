/* SPDX-License-Identifier: MIT */
/* file_name_spec templates: whatever the template and the host name, an accepted template expands
 * to one file name inside out_dir: no '/', not "." or "..", no NUL. Input: SPEC \0 HOST. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstring(data, size);
    if (text == NULL)
        return 0;
    size_t spec_len = strlen(text);
    const char *host = spec_len < size ? text + spec_len + 1 : "node-1";
    char err[512];
    int rc = tw_name_spec_check(text, err, sizeof err);
    FUZZ_CHECK(rc == 0 || rc == TW_EINVAL);
    if (rc == TW_EINVAL)
        FUZZ_CHECK(err[0] != '\0');
    tw_name_fields_t fields = {1795363668205914587LL, 4242, 4243, (int64_t)(size % 3) - 1, size, host};
    char name[256];
    int n = tw_name_expand(text, &fields, ".csv", name, sizeof name);
    if (rc != 0) {
        FUZZ_CHECK(n == TW_EINVAL);
    } else if (n >= 0) {
        FUZZ_CHECK((size_t)n == strlen(name));
        FUZZ_CHECK(strchr(name, '/') == NULL);
        FUZZ_CHECK(strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
        FUZZ_CHECK(n >= 4 && strcmp(name + n - 4, ".csv") == 0);
    } else {
        FUZZ_CHECK(n == TW_ERANGE);
    }
    free(text);
    return 0;
}
