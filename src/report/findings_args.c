/* SPDX-License-Identifier: MIT */
/*
 * The findings' readings of argument summaries (findings_args.h): "((f32[4,3,8,8]@cpu, f32[8,3,3,3]@cpu,
 * f32[8]@cpu, (1, 1), (0, 0), (1, 1), 1), {})" as the recorder writes them (args "summary", run's
 * default): positional arguments at the outer tuple's top level, tensors as dtype[sizes]@device.
 */
#include "config.h"
#include "findings_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The k-th positional argument's text (k from 0); 0 when there is none. */
static int positional(tw_str_t args, int k, tw_str_t *arg)
{
    if (args.len < 3 || args.ptr[0] != '(' || args.ptr[1] != '(')
        return 0;
    int depth = 0, index = 0;
    size_t begin = 2;
    int quoted = 0;
    for (size_t i = 2; i < args.len; i++) {
        char c = args.ptr[i];
        if (quoted) {
            quoted = c != '\'';
            continue;
        }
        if (c == '\'') {
            quoted = 1;
        } else if (c == '(' || c == '[' || c == '{') {
            depth++;
        } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
            depth--;
        } else if ((c == ',' || c == ')') && depth == 0) {
            if (index == k) {
                if (i == begin)
                    return 0; /* "(()," : no argument */
                arg->ptr = args.ptr + begin;
                arg->len = i - begin;
                return 1;
            }
            if (c == ')')
                return 0;
            index++;
            begin = i + 1;
            while (begin < args.len && args.ptr[begin] == ' ')
                begin++;
            i = begin - 1;
        }
    }
    return 0;
}

/* A tensor's summary "f32[4,3,8,8]@cpu": its sizes (at most 8) and where its bracket opens. */
static int tensor_sizes(tw_str_t t, long *sizes, int *ndim, size_t *bracket)
{
    const char *open = memchr(t.ptr, '[', t.len);
    if (open == NULL || open == t.ptr || !(t.ptr[0] >= 'a' && t.ptr[0] <= 'z'))
        return 0;
    *bracket = (size_t)(open - t.ptr);
    *ndim = 0;
    const char *p = open + 1, *end = t.ptr + t.len;
    if (p < end && *p == ']')
        return 1;
    while (p < end && *ndim < 8) {
        char *after;
        long v = strtol(p, &after, 10);
        if (after == p)
            return 0;
        sizes[(*ndim)++] = v;
        p = after;
        if (p < end && *p == ']')
            return 1;
        if (p >= end || *p != ',')
            return 0;
        p++;
    }
    return 0;
}

/* An int or an int tuple's k-th value ("(1, 1)", "[2, 2]", "1"); def when absent. */
static long int_at(tw_str_t arg, int k, long def)
{
    const char *p = arg.ptr, *end = arg.ptr + arg.len;
    if (p < end && (*p == '(' || *p == '['))
        p++;
    for (int i = 0; p < end; i++) {
        while (p < end && *p == ' ')
            p++;
        char *after;
        long v = strtol(p, &after, 10);
        if (after == p)
            return def;
        if (i == k || (i == 0 && arg.ptr[0] != '(' && arg.ptr[0] != '['))
            return v;
        p = after;
        if (p >= end || *p != ',')
            return v; /* a one-value tuple applies to every dimension */
        p++;
    }
    return def;
}

int findings_conv_output(tw_str_t args, char *out, size_t cap, size_t *len)
{
    tw_str_t input, weight, bias, arg;
    if (!positional(args, 0, &input) || !positional(args, 1, &weight) || !positional(args, 2, &bias) ||
        bias.len < 4 || memcmp(bias.ptr, "None", 4) == 0)
        return 0;
    long in[8], w[8];
    int nin, nw;
    size_t in_bracket, w_bracket;
    if (!tensor_sizes(input, in, &nin, &in_bracket) || !tensor_sizes(weight, w, &nw, &w_bracket) || nw < 3)
        return 0;
    int spatial = nw - 2, batched = nin == nw;
    if (nin != nw && nin != nw - 1)
        return 0;
    long o[8];
    int n = 0;
    if (batched)
        o[n++] = in[0];
    o[n++] = w[0];
    tw_str_t stride = {"1", 1}, padding = {"0", 1}, dilation = {"1", 1};
    if (positional(args, 3, &arg))
        stride = arg;
    if (positional(args, 4, &arg))
        padding = arg;
    if (positional(args, 5, &arg))
        dilation = arg;
    int same = padding.len >= 6 && memcmp(padding.ptr, "'same'", 6) == 0;
    int valid = padding.len >= 7 && memcmp(padding.ptr, "'valid'", 7) == 0;
    for (int k = 0; k < spatial; k++) {
        long size = in[(batched ? 2 : 1) + k], kernel = w[2 + k];
        long s = int_at(stride, k, 1), p = valid ? 0 : int_at(padding, k, 0), dl = int_at(dilation, k, 1);
        if (s <= 0)
            return 0;
        o[n++] = same ? size : (size + 2 * p - dl * (kernel - 1) - 1) / s + 1;
    }
    /* the input's dtype and device around the new sizes */
    int m = snprintf(out, cap, "%.*s[", (int)in_bracket, input.ptr);
    for (int k = 0; k < n && m > 0 && (size_t)m < cap; k++)
        m += snprintf(out + m, cap - (size_t)m, k ? ",%ld" : "%ld", o[k]);
    const char *close = memchr(input.ptr, ']', input.len);
    if (close == NULL || m <= 0 || (size_t)m >= cap)
        return 0;
    m += snprintf(out + m, cap - (size_t)m, "%.*s", (int)(input.len - (size_t)(close - input.ptr)), close);
    if ((size_t)m >= cap)
        return 0;
    *len = (size_t)m;
    return 1;
}

int findings_first_arg(tw_str_t args, tw_str_t *arg)
{
    return positional(args, 0, arg);
}

int findings_arg(tw_str_t args, int k, tw_str_t *arg)
{
    return positional(args, k, arg);
}

int findings_arg_bool(tw_str_t arg)
{
    if (arg.len == 4 && memcmp(arg.ptr, "True", 4) == 0)
        return 1;
    if (arg.len == 5 && memcmp(arg.ptr, "False", 5) == 0)
        return 0;
    return -1;
}
