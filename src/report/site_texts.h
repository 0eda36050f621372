/* SPDX-License-Identifier: MIT */
/*
 * The call sites of the run (site_texts.c): (pid, site id) -> "file:line function", from the sites
 * files beside the record files (sites.json, sites-PID.json). --by site, --tree and the flame graph
 * name the calls' sites with it.
 */
#ifndef TW_REPORT_SITE_TEXTS_H
#define TW_REPORT_SITE_TEXTS_H

#include <stddef.h>
#include <stdint.h>

#include "inputs.h"

typedef struct report_site {
    int64_t pid;
    uint64_t id;
    char *text; /* NULL: an empty slot */
    int library; /* in an installed package's file (site-packages) or the interpreter's, not the program's */
} report_site_t;

typedef struct report_sites {
    report_site_t *slots;
    size_t capacity, count;
} report_sites_t;

/* Reads the sites files of the inputs' directories. Returns 0: a file that cannot be read or parsed,
 * or sites past memory, are not used (their calls show site ids). */
int report_load_sites(report_sites_t *s, const inputs_t *in);

/* The text of site id of process pid, or NULL (no site, or not in a sites file). */
const char *report_site_text(const report_sites_t *s, int64_t pid, uint64_t id);

/* Whether site id of process pid is in an installed package's or the interpreter's file (transformers,
 * Lightning, the standard library): code the program runs but did not write. */
int report_site_is_library(const report_sites_t *s, int64_t pid, uint64_t id);
int report_site_file_is_library(const char *file);

void report_sites_free(report_sites_t *s);

#endif
