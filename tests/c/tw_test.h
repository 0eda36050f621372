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

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether this test runs under a sanitizer runtime that cannot fork a process with threads: the
 * tests that do skip themselves there (check-tsan.sh and check-asan.sh set these variables).
 * ThreadSanitizer stops such a child ("dup thread"). GCC 12's AddressSanitizer has no fork handler for
 * its allocator: a child forked while another thread is inside malloc or free waits forever for that
 * thread's size-class lock, which no thread of the child will release (a CI run of check-asan hung
 * there 50 minutes, in test_writer's fork test, as the child started its writer thread). glibc's
 * malloc takes its locks around fork, so the regular build and check-valgrind run these tests. */
static inline int tw_test_sanitizer_cannot_fork_threads(void)
{
    return getenv("TW_UNDER_TSAN") != NULL || getenv("TW_UNDER_ASAN") != NULL;
}

/* Removes a test's output directory and the files in it (one level: that is all tests make). */
static inline void rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}
#endif
