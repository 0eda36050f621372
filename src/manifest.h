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

/* One extra record stream's part of the manifest; its counters read under env->lock. */
typedef struct {
    const char *kind;
    const tw_fileset_t *files;
    uint64_t dropped_full;      /* refused before the writer took them */
    uint64_t lost_upstream;     /* lost before they reached the stream */
} tw_manifest_stream_t;

/* What the manifest says, besides what env and the file sets hold. */
typedef struct {
    const char *extra_json;     /* the caller's JSON object, its keys put first; NULL: none */
    tw_clock_source_t clock;
    int64_t start_ns;
    int64_t end_ns;             /* 0: still writing (null) */
    uint64_t dropped_upstream;  /* call records lost before the writer had them */
    uint64_t truncated;         /* call records whose argument text was cut to fit a file */
    const tw_fileset_t *calls;
    const tw_manifest_stream_t *streams;
    size_t stream_count;
    const char *captures_json;  /* "captures": a JSON array of the on-demand captures; NULL: none */
    const char *sites_file;     /* the call sites file's name (in out_dir); NULL: none */
    const tw_sites_stats_t *sites;
} tw_manifest_t;

/* An exact JSON number for v (cJSON keeps numbers as doubles, exact only below 2^53). */
cJSON *tw_json_uint(uint64_t v);

/* Writes text and a newline to path through a temporary file (path.tmp-PID) and a rename, so that a
 * reader sees the old file or the new one. 0 or an errno value. */
int tw_write_file_atomically(const char *path, const char *text, mode_t mode);

/* Writes the manifest to path, reading the file lists and counters under env->lock. A failure is
 * recorded and said once through tw_fileset_warn. */
void tw_manifest_write(tw_fileset_env_t *env, const char *path, const tw_manifest_t *m);

/* Writes the per-API totals of stats to path, the largest total first. */
void tw_summary_write(tw_fileset_env_t *env, const char *path, const tw_stats_t *stats);

#endif
