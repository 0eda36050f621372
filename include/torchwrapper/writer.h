/* SPDX-License-Identifier: MIT */
/*
 * The writer: a thread that takes finished record chunks from a chunk queue and writes them to a
 * rotating set of CSV or JSON-lines files, each at most file_max_size bytes and readable on its
 * own, keeps per-API totals, and writes a manifest and a summary. It never touches Python.
 *
 * Files (in out_dir): records named by file_name_spec (config_keys.h) with ".csv" or ".jsonl" (".csv.gz",
 * ".jsonl.gz" with compress: each file one gzip member, file_max_size counting compressed bytes);
 * manifest.json (manifest-PID.json in a forked child, or with per_process_names) listing the config,
 * the files and the counts, rewritten atomically at every rotation and at close; summary.json
 * (summary-PID.json) with per-API totals and percentiles, rewritten atomically at each flush interval
 * in which they changed (a long job can be watched) and at close.
 *
 * Columns: call_id, api, start_ns (since the epoch), cost_ns, self_ns, gpu_ns, pid, tid, depth,
 * parent_id, error (0/1 in CSV, false/true in JSON), args, module, step, site (gpu_ns is written 0:
 * readers join GPU time from the GPU records).
 *
 * Only the records of active steps (schedule.h) are written; summary.json counts every call, or
 * those of active steps with the schedule's summary_active. With summary_only, no record file is
 * written at all: the summary and the manifest are.
 *
 * Extra record streams (tw_writer_add_stream) go to files of their own beside the call records,
 * named like them with ".KIND" before the extension (tw-...-0001.gpu.csv), under the same
 * file_max_size and max_files (which applies to each kind on its own), listed in the manifest with
 * their "kind" (call-record files have "kind": "calls"). Their rows carry a step as call records do,
 * and follow the same rules: the schedule's steps in out_dir, a capture's steps in its directory.
 *
 * Memory: everything waiting for the writer thread, call records with their argument text and rows
 * of every stream, is bounded by one budget, buffer_bytes (queue.h), of which the streams together
 * take at most half (a burst of GPU rows never starves the call records); what does not fit is
 * dropped and counted (or waited for, block_when_full, for call records). The manifest says, for every kind in
 * "records", what was written and what was dropped and why, and in "memory" the budget and the peak
 * of bytes waiting at once.
 */
#ifndef TORCHWRAPPER_WRITER_H
#define TORCHWRAPPER_WRITER_H

#include "torchwrapper/clock.h"
#include "torchwrapper/config_keys.h"
#include "torchwrapper/escape.h"
#include "torchwrapper/gpu.h"
#include "torchwrapper/recorder.h"
#include "torchwrapper/schedule.h"
#include "torchwrapper/sites.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tw_writer_config {
    const char *out_dir;          /* created if missing (one level) */
    tw_format_t format;
    uint64_t file_max_size;       /* bytes; a file never exceeds it */
    const char *file_name_spec;   /* see tw_name_spec_check(); NULL: the config's default */
    unsigned max_files;           /* keep only the newest N record files; 0 keeps all */
    uint64_t flush_interval_ns;   /* records reach the disk at least this often; 0: the config's default */
    uint64_t buffer_bytes;        /* bound on the bytes waiting for the writer, call records (their text
                                     included) and stream rows alike; 0: the config's default */
    int block_when_full;          /* 1: a recording thread waits for the writer; 0: records are dropped */
    int64_t rank;                 /* < 0 when not set */
    const char *manifest_json;    /* optional JSON object text merged into the manifest (config, versions) */
    int per_process_names;        /* 1: manifest-PID.json and summary-PID.json, for processes that share
                                     out_dir with others (children, ranks); 0: manifest.json, summary.json */
    tw_schedule_t schedule;       /* the steps whose records are written (zeroed: every step) */
    int summary_only;             /* 1: no record files, only summary.json and the manifest */
    tw_sites_t *sites;            /* the call sites the records' site column refers to, written to
                                     sites.json (sites-PID.json like the manifest) at every new file and
                                     at close, and listed in the manifest; NULL: none. The caller's, and
                                     must outlive the writer */
    tw_compress_t compress;       /* TW_COMPRESS_GZIP: each record file is one gzip member, whose
                                     compressed size file_max_size bounds; every flush ends in a sync
                                     point, so that a killed process's files read up to its last flush */
    uint64_t max_total_size;      /* each kind's files kept within these bytes, the oldest removed (a flight
                                     recorder); each file then at most half of it; 0: all kept */
} tw_writer_config_t;

/* The writer's part of config into out (its strings point into config). rank, manifest_json,
 * per_process_names and sites are the caller's to set. */
TW_API void tw_config_writer(const tw_config_t *config, tw_writer_config_t *out);

typedef struct tw_writer tw_writer_t;

typedef struct tw_writer_stats {
    uint64_t records_written;
    uint64_t records_dropped;    /* by the writer: write errors, queue full */
    uint64_t records_truncated;  /* written with their args cut to fit file_max_size */
    uint64_t bytes_written;
    int write_errno;             /* the first write error, 0 if none */
    uint64_t wakeups;            /* times the idle writer thread woke up (about one per flush interval) */
    uint64_t file_names_skipped; /* record file names found taken, so the next index was used */
    uint64_t symlinks_refused;   /* of which symbolic links (never followed) */
    uint64_t memory_budget;      /* the bound on bytes waiting for the writer, as applied */
    uint64_t memory_peak;        /* the most bytes waiting at once, measured */
    uint64_t helped;             /* times a recording thread wrote for the writer thread, which runs at the
                                    lowest priority: the budget had passed half (or was full) */
    /* What writing cost (the profiler's own cost): ns recording threads spent writing for the writer
     * thread (helped), the writer thread's CPU time, ns the closing thread spent on the last writing */
    uint64_t help_ns;
    uint64_t thread_cpu_ns;
    uint64_t close_ns;
} tw_writer_stats_t;

/*
 * Creates out_dir if needed, checks it is writable, and starts the writer thread as the consumer of
 * queue (a recorder's: tw_recorder_queue()): from then on the chunks pushed to it go to the files.
 * The writer knows the queue only, never the recorder. clock converts ticks. On error returns
 * TW_EINVAL or TW_EIO with a message naming the value or path and the reason in err.
 */
TW_API int tw_writer_create(const tw_writer_config_t *config, struct tw_queue *queue, const tw_clock_t *clock,
                            tw_writer_t **out, char *err, size_t err_size);

/*
 * Writes everything queued, closes the last file, writes the summary and the final manifest, stops
 * the thread and detaches from the queue. Call after tw_recorder_collect(). Returns 0, or
 * TW_EIO when a write failed (the records concerned are counted as dropped). Closing twice is
 * closing once.
 */
TW_API int tw_writer_close(tw_writer_t *writer);

/* Frees a closed writer. */
TW_API void tw_writer_destroy(tw_writer_t *writer);

TW_API void tw_writer_stats(tw_writer_t *writer, tw_writer_stats_t *stats);

/*
 * Sets key of the manifest to json_value (JSON text: an object, a number...), replacing the key if
 * present; the manifest is rewritten with it at the writer's next write, and at close. For what is
 * known only once the writer runs (the clock's offset to rank 0's, measured once the process group
 * is up). Returns 0, TW_EINVAL (json_value does not parse) or TW_ENOMEM.
 */
TW_API int tw_writer_set_manifest_key(tw_writer_t *writer, const char *key, const char *json_value);

/* The path of the manifest this writer writes. */
TW_API const char *tw_writer_manifest_path(tw_writer_t *writer);

/* ---- the call sites' file ---------------------------------------------------------------------------- */

/*
 * Writes the table to path as JSON, atomically (a temporary file, then rename):
 *   {"sites_version": 1, "pid": PID, "count": N, "cap": CAP, "overflow": CALLS, "overflow_id": ID,
 *    "sites": {"1": {"file": ..., "line": ..., "function": ..., "text": ...}, ...}}
 * pid < 0 leaves "pid" out. Returns 0, or a negative errno value (tw_strerror() names it).
 */
TW_API int tw_sites_write_json(tw_sites_t *sites, const char *path, int64_t pid);

/* ---- extra record streams -------------------------------------------------------------------- */

#define TW_STREAM_KIND_MAX 16          /* bytes of a stream's kind: [a-z0-9_], not "calls" */
#define TW_STREAM_ROW_MAX (16 * 1024)  /* bytes of one row, its '\n' included */

typedef struct tw_writer_stream tw_writer_stream_t;

typedef struct tw_writer_stream_stats {
    uint64_t records_written;
    uint64_t records_dropped;       /* all lost rows: queue full, too long, write errors, after close,
                                     * and records_lost_upstream */
    uint64_t records_lost_upstream; /* reported by the producer (tw_writer_stream_add_dropped) */
    uint64_t bytes_written;
} tw_writer_stream_stats_t;

/*
 * Adds a stream of rows of another kind ("gpu") to the writer, written to its own rotating files
 * (see above). csv_header is the header line of its CSV files (without or with its '\n'); it may be
 * NULL when the writer's format is JSON. The stream belongs to the writer and is freed by
 * tw_writer_destroy(). Returns 0 and the stream in *out; TW_EINVAL for a bad kind or header;
 * TW_EBUSY when the kind exists already; TW_ECLOSED; TW_EFULL past 7 streams; TW_ENOMEM.
 */
TW_API int tw_writer_add_stream(tw_writer_t *writer, const char *kind, const char *csv_header,
                                tw_writer_stream_t **out);

/* The writer's format: rows are CSV lines (fields quoted as RFC 4180 says) or JSON objects. */
TW_API tw_format_t tw_writer_stream_format(const tw_writer_stream_t *stream);

/* A row's step when its producer does not know it: the step in progress when the row is queued. */
#define TW_STEP_NOW UINT64_MAX

/* One row for a stream. */
typedef struct tw_stream_row {
    const char *text;  /* one line, in the writer's format, with or without its final '\n' */
    size_t len;
    uint64_t step;     /* the step it belongs to (the schedule and captures decide by it); TW_STEP_NOW */
    uint32_t api_id;   /* GPU rows: the API whose GPU total in summary.json gpu_ns adds to; TW_API_ID_NONE */
    uint64_t gpu_ns;
} tw_stream_row_t;

/*
 * Queues one row for the writer thread, which writes it within flush_interval where its step says.
 * Thread-safe, callable from any thread (CUPTI's callback thread included); never blocks on I/O. The
 * bytes queued are charged to the writer's memory budget: a row that does not fit, one longer than
 * TW_STREAM_ROW_MAX or than a file can hold, or one queued once tw_writer_close() has begun, is
 * dropped and counted. Returns 0, TW_EFULL (no room), TW_EINVAL (too long, or holding a '\n' before
 * its end), TW_ECLOSED or TW_ENOMEM.
 */
TW_API int tw_writer_stream_put(tw_writer_stream_t *stream, const tw_stream_row_t *row);

/* The same for a row of the step in progress (TW_STEP_NOW), with no GPU time. */
TW_API int tw_writer_stream_write(tw_writer_stream_t *stream, const char *row, size_t len);

/* The same, and adds gpu_ns to api_id's GPU total in summary.json once the row is written (api_id
 * TW_API_ID_NONE adds nothing). */
TW_API int tw_writer_stream_write_gpu(tw_writer_stream_t *stream, const char *row, size_t len, uint32_t api_id,
                                      uint64_t gpu_ns);

/* The writer as where a GPU session's rows go (gpu.h, tw_gpu_start): its "gpu" stream, added when
 * the session opens it, in the writer's format. The writer must outlive the session. */
TW_API void tw_writer_gpu_rows(tw_writer_t *writer, tw_gpu_rows_t *out);

/* Counts rows lost before they reached the stream (e.g. CUPTI's dropped activity records); they
 * appear in the manifest's "streams" section. Thread-safe. */
TW_API void tw_writer_stream_add_dropped(tw_writer_stream_t *stream, uint64_t count);

TW_API void tw_writer_stream_stats(tw_writer_stream_t *stream, tw_writer_stream_stats_t *stats);

/* ---- on-demand captures --------------------------------------------------------------------------- */

/*
 * A capture: the call records of steps [from_step, from_step + steps) written, besides what the
 * schedule writes to out_dir, to files of their own in dir (created, with its parents, if missing):
 * record files named and capped as out_dir's, a manifest (its "capture" says the steps) and a
 * summary of the capture's calls, so that tw-report and torchwrapper.load() read dir as a run of its
 * own. out_dir's manifest lists every capture ("captures": id, steps, dir, state, files).
 *
 * The writer learns the program's step from tw_writer_set_step(): once it is past a capture's last
 * step, the capture stays open one more flush interval (the recording threads hand over their partial
 * chunks), then its files are closed and its manifest says "done". Stream rows of its steps (GPU,
 * tensor statistics, ...) go to files of their kind in dir too. Records of its steps that come
 * later still are counted as late, not written. Captures never overlap: one asked before the previous
 * one's steps are over is refused (TW_EBUSY). Returns 0 and the capture's number (1, 2, ...) in *id,
 * or TW_EBUSY, TW_EINVAL (steps 0, no dir), TW_ECLOSED or TW_EIO (dir cannot be made), with a
 * message in err.
 */
TW_API int tw_writer_capture(tw_writer_t *writer, uint64_t from_step, uint64_t steps, const char *dir, uint32_t *id,
                             char *err, size_t err_size);

/* The step the program is in (the recorder's), from now on: when a capture's steps are over, and
 * what TW_STEP_NOW means. The writer remembers when each of the last 256 steps began. */
TW_API void tw_writer_set_step(tw_writer_t *writer, uint64_t step);

/* The step in progress now (the last tw_writer_set_step; 0 before any). */
TW_API uint64_t tw_writer_step(tw_writer_t *writer);

/* The step that was in progress at epoch_ns (nanoseconds since the epoch on the records' clock):
 * for rows whose producer knows when, not in which step (a GPU activity knows when it was launched).
 * A moment before the oldest step remembered gets that step. */
TW_API uint64_t tw_writer_step_at(tw_writer_t *writer, int64_t epoch_ns);

typedef struct tw_writer_capture_stats {
    uint64_t from_step, to_step;  /* steps [from, to) */
    int done;                     /* files closed, manifest final */
    uint64_t records_written;
    uint64_t records_late;        /* of its steps, come after it was done */
} tw_writer_capture_stats_t;

/* Capture id's counters; TW_EINVAL when there is no such capture. */
TW_API int tw_writer_capture_stats(tw_writer_t *writer, uint32_t id, tw_writer_capture_stats_t *stats);

/* Kept for C users: tw_queue_push() on the queue the writer drains (its recorder's, see queue.h). */
TW_API void tw_writer_enqueue(tw_writer_t *writer, tw_chunk_t *chunk);

#ifdef __cplusplus
}
#endif
#endif
