/* SPDX-License-Identifier: MIT */
/* The flame graph's stacks written out (flame_output.c): --folded, --flamegraph, and the SVG --html
 * embeds. */
#ifndef TW_REPORT_FLAME_OUTPUT_H
#define TW_REPORT_FLAME_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

#include "flame_stacks.h"

/* --folded FILE, --flamegraph FILE: 0, or after a message on err the -errno of the failed open,
 * TW_EIO (a write failed) or TW_ENOMEM. */
int report_flame_write_folded(const flame_t *f, const char *path, FILE *err);
int report_flame_write_svg_file(const flame_t *f, const char *path, FILE *err);

/* The <svg> element (id: unique in its page; fluid: as wide as its container), at most max_frames
 * frames; 0 or TW_ENOMEM. */
int report_flame_write_svg(const flame_t *f, FILE *out, const char *id, const char *title, size_t max_frames,
                           int fluid);

#endif
