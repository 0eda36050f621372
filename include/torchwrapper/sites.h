/* SPDX-License-Identifier: MIT */
/*
 * Call sites: where in the program a call was made (file, line, function), interned once per
 * session into a small integer, the `site` column of call records. The table is bounded: past its
 * cap every new site gets the one overflow id, and the calls attributed to it are counted.
 *
 * Ids: TW_SITE_NONE (0) means no site; interned sites are 1 .. cap; the overflow id is cap + 1.
 *
 * Threading: tw_sites_intern() and the readers take the table's lock, so the writer thread may
 * write the sites file (tw_sites_write_json, writer.h) while the program interns (a new site is
 * rare: its caller caches the id). The file is read back with tw_sites_read_json (reader.h).
 * The strings are copied: the table never refers to the caller's memory (nor to Python objects).
 */
#ifndef TORCHWRAPPER_SITES_H
#define TORCHWRAPPER_SITES_H

#include <stdint.h>

#include "torchwrapper/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TW_SITE_NONE 0u
#define TW_SITES_CAP_DEFAULT 65535u /* sites a session interns; the overflow id is then 65536 */
#define TW_SITE_TEXT_MAX 1024u       /* bytes kept of a file name or a function name */

typedef struct tw_sites tw_sites_t;

typedef struct tw_sites_stats {
    uint32_t count;    /* sites interned (ids 1 .. count) */
    uint32_t cap;      /* the most it interns */
    uint64_t overflow; /* calls attributed to the overflow id (tw_sites_note_overflow) */
} tw_sites_stats_t;

/* An empty table of at most cap sites (0: TW_SITES_CAP_DEFAULT) in *out. 0, TW_EINVAL (cap too
 * large: at most UINT32_MAX - 1) or TW_ENOMEM. */
TW_API int tw_sites_create(uint32_t cap, tw_sites_t **out);

TW_API void tw_sites_destroy(tw_sites_t *sites);

/* The id that stands for every site past the cap (cap + 1). */
TW_API uint32_t tw_sites_overflow_id(const tw_sites_t *sites);

/*
 * The id of the site (file, line, function), interned on first sight (the texts copied, cut to
 * TW_SITE_TEXT_MAX bytes at a UTF-8 character boundary). text is its short form for reports
 * ("train.py:42 train_step"); NULL makes it "file:line function". Returns the overflow id when the
 * table is full, and TW_SITE_NONE when out of memory or given a NULL file or function.
 */
TW_API uint32_t tw_sites_intern(tw_sites_t *sites, const char *file, uint32_t line, const char *function,
                                const char *text);

/* Counts calls attributed to the overflow id (thread-safe, lock-free). */
TW_API void tw_sites_note_overflow(tw_sites_t *sites, uint64_t calls);

TW_API void tw_sites_stats(tw_sites_t *sites, tw_sites_stats_t *stats);

/*
 * Site id's parts, copied into the caller's buffers (each TW_SITE_TEXT_MAX + 1 bytes, or NULL to
 * skip): 1 when id is an interned site, 0 otherwise (none, overflow, unknown).
 */
TW_API int tw_sites_get(tw_sites_t *sites, uint32_t id, char *file, uint32_t *line, char *function, char *text);

#ifdef __cplusplus
}
#endif
#endif
