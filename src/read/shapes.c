/* SPDX-License-Identifier: MIT */
/*
 * Input shapes from an argument summary (reader.h tw_args_shapes): the text the wrapper wrote,
 * ((f32[4,8]@cpu, 2), {'dim': f32[8]@cpu}), read back as torch.profiler's input shapes,
 * [[4, 8], [], [8]]. One pass, no allocation: tw-report's --by shape runs it on every row and
 * load() on every call record.
 *
 * The summary's grammar (python/core/call/args.c): positional arguments in a tuple, then keyword values
 * in a dict; a value is a tensor (dtype[d0,d1,...]@device), a number, None, True, False, a quoted
 * string (its first 32 bytes, then ...'; never escaped), a dtype name, a type name, or a tuple or
 * list of up to 8 of them (", ..." for more) two levels deep. A text longer than TW_ARGS_MAX ends in
 * "..." where it was cut: the arguments before the cut keep their shapes.
 */
#include "config.h"

#include <string.h>

#include "torchwrapper/reader.h"

typedef struct {
    const char *p, *end;
    char *out, *out_end;
    int overflow;
} parse_t;

static void emit(parse_t *s, const char *text, size_t n)
{
    if ((size_t)(s->out_end - s->out) < n) {
        s->overflow = 1;
        return;
    }
    memcpy(s->out, text, n);
    s->out += n;
}

static int at(const parse_t *s, char c)
{
    return s->p < s->end && *s->p == c;
}

static int is_delimiter(char c)
{
    return c == ',' || c == ')' || c == ']' || c == '}';
}

/* A quoted string from its opening quote: it ends at the first quote followed by a delimiter (or
 * the end) after at most 32 bytes (35 with the "..." of a longer one). 0 when the text ends first. */
static int skip_string(parse_t *s)
{
    const char *start = ++s->p;
    for (const char *q = start; q < s->end && q - start <= 35; q++) {
        if (*q == '\'' && (q + 1 == s->end || is_delimiter(q[1]))) {
            s->p = q + 1;
            return 1;
        }
    }
    s->p = s->end; /* cut inside it (or no string of ours: the rest is skipped) */
    return 0;
}

/*
 * A tensor's sizes, from just after its '[' (dtype[...]): "[4, 8]" written. 1 when the sizes were
 * read whole (the device after them may be cut), 0 when the text ends first.
 */
static int tensor_sizes(parse_t *s)
{
    emit(s, "[", 1);
    if (s->p < s->end && *s->p == ']') { /* no dimension: a 0-d tensor */
        s->p++;
        emit(s, "]", 1);
        while (s->p < s->end && !is_delimiter(*s->p))
            s->p++;
        return 1;
    }
    for (;;) {
        const char *start = s->p;
        if (s->p < s->end && *s->p == '-')
            s->p++;
        const char *digits = s->p;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
        if (s->p == s->end || s->p == digits || (*digits == '0' && s->p - digits > 1))
            return 0; /* cut, or not a number as the summary writes one */
        emit(s, start, (size_t)(s->p - start));
        if (*s->p == ',') {
            emit(s, ", ", 2);
            s->p++;
        } else if (*s->p == ']') {
            s->p++;
            emit(s, "]", 1);
            while (s->p < s->end && !is_delimiter(*s->p)) /* @device */
                s->p++;
            return 1;
        } else {
            return 0; /* not a summary's sizes */
        }
    }
}

static int value(parse_t *s);

/*
 * The items of a tuple or list up to its closing bracket, each one's shape written after a ", ".
 * Returns whether any item holds a tensor; *whole: the closing bracket was reached.
 */
static int items(parse_t *s, char close, int *whole)
{
    int tensors = 0, first = 1;
    *whole = 0;
    while (s->p < s->end) {
        if (*s->p == close) {
            s->p++;
            *whole = 1;
            return tensors;
        }
        if (*s->p == ',' || *s->p == ' ') { /* separators, and the "," of a one-item tuple */
            s->p++;
            continue;
        }
        if (is_delimiter(*s->p))
            return tensors; /* another bracket closes here: not a summary's text, read no further */
        if (s->end - s->p >= 3 && memcmp(s->p, "...", 3) == 0 && s->end - s->p >= 4 && s->p[3] == close) {
            s->p += 3; /* ", ..." : items past the 8th are not in the text */
            continue;
        }
        char *mark = s->out;
        if (!first)
            emit(s, ", ", 2);
        int kind = value(s);
        if (kind < 0) { /* cut inside this item: it is left out */
            s->out = mark;
            return tensors;
        }
        tensors |= kind;
        first = 0;
    }
    return tensors;
}

/* One value's shape written; 1 when it is or holds a tensor, 0 when not, -1 when the text ends
 * inside it. */
static int value(parse_t *s)
{
    if (s->p >= s->end)
        return -1;
    char c = *s->p;
    if (c == '(' || c == '[') {
        s->p++;
        char *mark = s->out;
        emit(s, "[", 1);
        int whole;
        int tensors = items(s, c == '(' ? ')' : ']', &whole);
        if (!tensors) {
            s->out = mark; /* no tensor inside: [] as torch writes any non-tensor */
            emit(s, "[]", 2);
        } else {
            emit(s, "]", 1);
        }
        return whole || tensors ? tensors : -1;
    }
    if (c == '\'') {
        if (!skip_string(s))
            return -1;
        emit(s, "[]", 2);
        return 0;
    }
    const char *start = s->p;
    while (s->p < s->end && !is_delimiter(*s->p) && *s->p != '[')
        s->p++;
    if (s->p < s->end && *s->p == '[' && s->p > start) { /* dtype[sizes]@device */
        s->p++;
        char *mark = s->out;
        if (tensor_sizes(s))
            return 1;
        s->out = mark;
        return -1;
    }
    if (s->p == s->end || s->p == start)
        return -1; /* a number or a name may be cut; nothing read: not a summary's text */
    emit(s, "[]", 2);
    return 0;
}

int tw_args_shapes(const char *args, size_t len, char *out, size_t size)
{
    parse_t s = {args, args + len, out, out + size, 0};
    if (len < 2 || args[0] != '(' || args[1] != '(')
        return 0; /* no summary: args "none", or not a summary's text */
    if (!(len >= 2 && args[len - 2] == '}' && args[len - 1] == ')') && len >= 3 &&
        memcmp(args + len - 3, "...", 3) == 0)
        s.end -= 3; /* cut at TW_ARGS_MAX: the marker is no part of the last item */
    s.p += 2;
    emit(&s, "[", 1);
    int whole;
    (void)items(&s, ')', &whole);
    if (whole && s.p < s.end && *s.p == ',') /* ", {" keyword values */
        s.p++;
    while (whole && s.p < s.end && *s.p == ' ')
        s.p++;
    if (whole && at(&s, '{')) {
        s.p++;
        int first = s.out[-1] == '[';
        while (s.p < s.end && *s.p != '}') {
            if (*s.p == ',' || *s.p == ' ') {
                s.p++;
                continue;
            }
            /* 'key': value (keys are argument names: no quote followed by a colon inside) */
            const char *colon = NULL;
            for (const char *q = s.p; q + 2 < s.end; q++)
                if (q[0] == '\'' && q[1] == ':' && q[2] == ' ' && q > s.p) {
                    colon = q;
                    break;
                }
            if (colon == NULL)
                break;
            s.p = colon + 3;
            char *mark = s.out;
            if (!first)
                emit(&s, ", ", 2);
            if (value(&s) < 0) {
                s.out = mark;
                break;
            }
            first = 0;
        }
    }
    emit(&s, "]", 1);
    return s.overflow ? TW_ERANGE : (int)(s.out - out);
}
