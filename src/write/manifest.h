/* SPDX-License-Identifier: MIT */
/*
 * The manifest and the summary (not public API): manifest.json lists the config, every file of
 * every kind and the counts; summary.json the per-API totals. Both replaced atomically (a temporary
 * file, then rename), so a reader sees the old one or the new one, never half of one.
 */
#ifndef TW_MANIFEST_H
#define TW_MANIFEST_H

#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "fileset.h"
#include "torchwrapper/clock.h"
#include "torchwrapper/sites.h"
#include "torchwrapper/stats.h"

/* Why records of one kind were lost: one scheme for every kind (calls, gpu, stats, ...). */
typedef struct {
    uint64_t full;      /* no room in the memory budget (buffer_size), or no memory */
    uint64_t invalid;   /* too long for a file, or not one line */
    uint64_t closed;    /* came once the writer was closing */
    uint64_t write;     /* write errors */
    uint64_t upstream;  /* lost before they reached the writer (CUPTI's dropped records) */
} tw_manifest_drops_t;

/* The sum of every cause. */
static inline uint64_t tw_manifest_drops_total(const tw_manifest_drops_t *d)
{
    return d->full + d->invalid + d->closed + d->write + d->upstream;
}

/* One kind of record's part of the manifest; its file list read under env->lock. */
typedef struct {
    const char *kind;
    const tw_fileset_t *files;
    tw_manifest_drops_t drops;
    uint64_t truncated;         /* written with their argument text cut to fit a file (calls) */
} tw_manifest_kind_t;

/* What the manifest says, besides what env and the file sets hold. */
typedef struct {
    const char *extra_json;     /* the caller's JSON object, its keys put first; NULL: none */
    tw_clock_source_t clock;
    int64_t start_ns;
    int64_t end_ns;             /* 0: still writing (null) */
    const tw_manifest_kind_t *kinds; /* the calls first, then each stream's kind */
    size_t kind_count;
    uint64_t memory_budget;     /* buffer_size as applied (bytes); 0: not said (a capture's manifest) */
    uint64_t memory_peak;       /* the most bytes waiting for the writer at once, measured */
    const char *captures_json;  /* "captures": a JSON array of the on-demand captures; NULL: none */
    const char *sites_file;     /* the call sites file's name (in out_dir); NULL: none */
    const tw_sites_stats_t *sites;
    /* "writer": what writing cost the program (tw_writer_stats_t's help_ns, thread_cpu_ns, close_ns,
     * helped); NULL: not said (a capture's manifest: those are the process's) */
    const uint64_t *writer_cost;
} tw_manifest_t;

/* writer_cost's entries */
enum { TW_MANIFEST_HELPED, TW_MANIFEST_HELP_NS, TW_MANIFEST_THREAD_CPU_NS, TW_MANIFEST_CLOSE_NS, TW_MANIFEST_WRITER_COSTS };

/* An exact JSON number for v (cJSON keeps numbers as doubles, exact only below 2^53). */
cJSON *tw_json_uint(uint64_t v);

/* Writes text and a newline to path through a temporary file (path.tmp-PID) and a rename, so that a
 * reader sees the old file or the new one. 0 or a negative errno value. */
int tw_write_file_atomically(const char *path, const char *text, mode_t mode);

/* Writes the manifest to path, reading the file lists and counters under env->lock. A failure is
 * recorded and said once through tw_fileset_warn. */
void tw_manifest_write(tw_fileset_env_t *env, const char *path, const tw_manifest_t *m);

/* Writes the per-API totals of stats to path, the largest total first. */
void tw_summary_write(tw_fileset_env_t *env, const char *path, const tw_stats_t *stats);

#endif
