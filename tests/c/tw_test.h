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
#include <string.h>
#include <unistd.h>

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
