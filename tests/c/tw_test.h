/* SPDX-License-Identifier: MIT */
/* Common includes of the cmocka tests (cmocka needs these before <cmocka.h>). */
#ifndef TW_TEST_H
#define TW_TEST_H
#include "config.h" /* _GNU_SOURCE #define TW_TEST_H co: -std=c11 hides POSIX otherwise */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "torchwrapper/torchwrapper.h"
#endif
