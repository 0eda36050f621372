/* SPDX-License-Identifier: MIT */
/*
 * Text as a CSV field or a JSON string: how records, GPU rows and tw-report's outputs escape what
 * they write.
 */
#ifndef TORCHWRAPPER_ESCAPE_H
#define TORCHWRAPPER_ESCAPE_H

#include "torchwrapper/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes s (len bytes) as a CSV field at out (room for 2 * len + 2 bytes): as is, or quoted with
 * inner quotes doubled when it holds a comma, quote, line break or edge space (RFC 4180); returns
 * the end. */
TW_API char *tw_csv_field(char *out, const char *s, size_t len);

/* Writes s (len bytes of UTF-8) as a JSON string, quotes included, escaped per RFC 8259, at out
 * (room for 6 * len + 2 bytes); returns the end. */
TW_API char *tw_json_escape(char *out, const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif
