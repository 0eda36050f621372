/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "torchwrapper/common.h"

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
        return "unknown error";
    }
}

const char *tw_version(void)
{
    return TW_VERSION;
}
