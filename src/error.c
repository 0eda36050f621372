/* SPDX-License-Identifier: MIT */
/* Error texts (tw_strerror) and the library's version: the one place an error code becomes words. */
#include "config.h"
#include "torchwrapper/common.h"
#include <string.h>

const char *tw_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define TW_STRERROR_CASE(name, value, text) \
    case TW_E##name:                        \
        return text;
        TW_ERRNO_MAP(TW_STRERROR_CASE)
#undef TW_STRERROR_CASE
    default:
        break;
    }
#ifdef HAVE_STRERRORDESC_NP
    /* Any other -errno passed through from the system: its own static text (strerror's is not
     * thread-safe for unknown values). */
    if (err < 0 && err > -4096) {
        const char *text = strerrordesc_np(-err);
        if (text != NULL)
            return text;
    }
#endif
    return "unknown error";
}

const char *tw_version(void)
{
    return TW_VERSION;
}
