/* SPDX-License-Identifier: MIT */
/*
 * The writer: a thread that takes finished record chunks from a recorder and writes them to a
 * rotating set of CSV or JSON-lines files, each at most file_max_size bytes and readable on its
 * own, keeps per-API totals, and writes a manifest and a summary. It never touches Python.
 *
 * Files (in out_dir): records named by file_name_spec (config.h) with ".csv" or ".jsonl";
 * manifest.json (manifest-PID.json in a forked child) listing the config, the files and the counts,
 * rewritten atomically at every rotation and at close; summary.json (summary-PID.json) with per-API
 * totals and percentiles, written at close.
 *
 * Columns: call_id, api, start_ns (since the epoch), cost_ns, self_ns, gpu_ns, pid, tid, depth,
 * parent_id, error (0/1 in CSV, false/true in JSON), args.
 */
#ifndef TORCHWRAPPER_WRITER_H
#define TORCHWRAPPER_WRITER_H

#include "torchwrapper/clock.h"
#include "torchwrapper/recorder.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TW_FORMAT_CSV = 0, TW_FORMAT_JSON = 1 } tw_format_t;

typedef struct tw_writer_config {
    const char *out_dir;          /* created if missing (one level) */
    tw_format_t format;
    uint64_t file_max_size;       /* bytes; a file never exceeds it */
    const char *file_name_spec;   /* see tw_name_spec_check() */
    unsigned max_files;           /* keep only the newest N record files; 0 keeps all */
    uint64_t flush_interval_ns;   /* records reach the disk at least this often; 0 means 1 s */
    uint64_t buffer_bytes;        /* bound on records queued for the writer; 0 means 32 MiB */
    int block_when_full;          /* 1: a recording thread waits for the writer; 0: records are dropped */
    int64_t rank;                 /* < 0 when not set */
    const char *manifest_json;    /* optional JSON object text merged into the manifest (config, versions) */
} tw_writer_config_t;

typedef struct tw_writer tw_writer_t;

typedef struct tw_writer_stats {
    uint64_t records_written;
    uint64_t records_dropped;    /* by the writer: write errors, queue full */
    uint64_t records_truncated;  /* written with their args cut to fit file_max_size */
    uint64_t bytes_written;
    int write_errno;             /* the first write error, 0 if none */
    uint64_t wakeups;            /* times the idle writer thread woke up (about one per flush interval) */
} tw_writer_stats_t;

/*
 * Creates out_dir if needed, checks it is writable, and starts the writer thread for rec: from then
 * on rec's finished chunks go to the writer. clock converts ticks. On error returns TW_EINVAL or
 * TW_EIO with a message naming the value or path and the reason in err.
 */
TW_API int tw_writer_create(const tw_writer_config_t *config, tw_recorder_t *rec, const tw_clock_t *clock,
                            tw_writer_t **out, char *err, size_t err_size);

/*
 * Writes everything queued, closes the last file, writes the summary and the final manifest, stops
 * the thread and detaches from the recorder. Call after tw_recorder_collect(). Returns 0, or
 * TW_EIO when a write failed (the records concerned are counted as dropped).
 */
TW_API int tw_writer_close(tw_writer_t *writer);

/* Frees a closed writer. */
TW_API void tw_writer_destroy(tw_writer_t *writer);

TW_API void tw_writer_stats(tw_writer_t *writer, tw_writer_stats_t *stats);

/* The path of the manifest this writer writes. */
TW_API const char *tw_writer_manifest_path(tw_writer_t *writer);

/* Writes s (len bytes of UTF-8) as a JSON string, quotes included, escaped per RFC 8259, at out
 * (room for 6 * len + 2 bytes); returns the end. */
TW_API char *tw_json_escape(char *out, const char *s, size_t len);

/* Internal, for the recorder: hands over a finished chunk (the writer owns it afterwards); says
 * whether there is room for another (1) or not (0), waiting for room when asked to. */
TW_API void tw_writer_enqueue(tw_writer_t *writer, tw_chunk_t *chunk);
TW_API int tw_writer_admit(tw_writer_t *writer);

#ifdef __cplusplus
}
#endif
#endif
