/* SPDX-License-Identifier: MIT */
/* Small helpers of tw-report's outputs: see util.h. */
#include "config.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"
#include "torchwrapper/escape.h"

int report_has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

void report_csv_text(FILE *out, const char *s)
{
    if (strpbrk(s, ",\"\n\r") == NULL) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

void report_json_text(FILE *out, const char *s)
{
    size_t len = strlen(s); /* a group key: at most ~1200 bytes */
    char *text = malloc(6 * len + 2);
    if (text == NULL) {
        fputs("\"\"", out); /* still valid JSON */
        return;
    }
    fwrite(text, 1, (size_t)(tw_json_escape(text, s, len) - text), out);
    free(text);
}

void report_json_double(FILE *out, const char *key, double v, const char *fmt)
{
    fprintf(out, "\"%s\":", key);
    if (isnan(v) || isinf(v))
        fputs("null", out);
    else
        fprintf(out, fmt, v);
}

int report_close_output(FILE *out, const char *path, int rc, FILE *err)
{
    int failed = ferror(out);
    if (fclose(out) != 0 || failed) { /* a file cut short (a full disk) is an error, not a result */
        fprintf(err, "tw-report: writing %s failed (disk full?)\n", path);
        return TW_EIO;
    }
    if (rc != 0) {
        fprintf(err, "tw-report: %s\n", tw_strerror(rc));
        return rc;
    }
    return 0;
}
