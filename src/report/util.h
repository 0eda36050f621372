/* SPDX-License-Identifier: MIT */
/* Small helpers of tw-report's outputs (util.c): suffixes, CSV and JSON text, closing a written file. */
#ifndef TW_REPORT_UTIL_H
#define TW_REPORT_UTIL_H

#include <stdio.h>

/* 1 when s ends with suffix, else 0. */
int report_has_suffix(const char *s, const char *suffix);

/* s as one CSV field (quoted when it must be), and as a JSON string (quotes included). */
void report_csv_text(FILE *out, const char *s);
void report_json_text(FILE *out, const char *s);

/* "key":v with v in printf format fmt, or "key":null for NaN and infinities (not JSON numbers). */
void report_json_double(FILE *out, const char *key, double v, const char *fmt);

/*
 * Closes an output file the report wrote to path; rc is the writing's own result (0 or a negative
 * errno). Returns 0, or after saying what failed on err: TW_EIO (a write error: a full disk?) or rc.
 */
int report_close_output(FILE *out, const char *path, int rc, FILE *err);

#endif
