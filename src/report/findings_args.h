/* SPDX-License-Identifier: MIT */
/* The findings' readings of argument summaries (findings_args.c). */
#ifndef TW_REPORT_FINDINGS_ARGS_H
#define TW_REPORT_FINDINGS_ARGS_H

#include <stddef.h>
#include <string.h>

#include "torchwrapper/reader.h"

/* A convolution's (torch.conv1d/2d/3d) output as a summary writes tensors ("f32[4,8,6,6]@cpu") into
 * out (cap bytes), *len its length: 1 when it passes a bias and its sizes could be worked out. */
int findings_conv_output(tw_str_t args, char *out, size_t cap, size_t *len);

/* The first (findings_first_arg) or k-th (from 0) positional argument's text; 0 when absent. */
int findings_first_arg(tw_str_t args, tw_str_t *arg);
int findings_arg(tw_str_t args, int k, tw_str_t *arg);

/* 1 for "True", 0 for "False", -1 otherwise. */
int findings_arg_bool(tw_str_t arg);

/* Whether an API name (or any text) is name, begins with prefix, ends with suffix. */
static inline int findings_is(tw_str_t s, const char *name)
{
    return s.len == strlen(name) && memcmp(s.ptr, name, s.len) == 0;
}

static inline int findings_has_prefix(tw_str_t s, const char *prefix)
{
    size_t n = strlen(prefix);
    return s.len >= n && memcmp(s.ptr, prefix, n) == 0;
}

static inline int findings_has_suffix(tw_str_t s, const char *suffix)
{
    size_t n = strlen(suffix);
    return s.len >= n && memcmp(s.ptr + s.len - n, suffix, n) == 0;
}

#endif
