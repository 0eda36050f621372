/* SPDX-License-Identifier: MIT */
/* Fuzz harnesses: each defines LLVMFuzzerTestOneInput. Built with libFuzzer by `make fuzz` (clang),
 * and with replay.c by `make check`, which runs every input kept under tests/fuzz-corpus/NAME/. */
#ifndef TW_FUZZ_H
#define TW_FUZZ_H
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/torchwrapper.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A failed invariant: abort, so that libFuzzer saves the input and the replay test fails. */
#define FUZZ_CHECK(cond)                                                                               \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);              \
            abort();                                                                                   \
        }                                                                                              \
    } while (0)

/* data as a NUL-terminated string (the functions under test take C strings); free() it. */
static inline char *fuzz_cstring(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s != NULL) {
        memcpy(s, data, size);
        s[size] = '\0';
    }
    return s;
}
#endif
