/* SPDX-License-Identifier: MIT */
/* The configuration keys: the one validator of every key and its defaults (config_keys.c), the
 * configuration typed for C (config_typed.c), and the user-facing values keys take: sizes ("128MB")
 * and file name specs ("timestamp", templates; names.c). (config.h is the configure's.) */
#ifndef TORCHWRAPPER_CONFIG_KEYS_H
#define TORCHWRAPPER_CONFIG_KEYS_H

#include "torchwrapper/common.h"
#include "torchwrapper/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A size in bytes: an integer ("1048576"), or a number with a unit: decimal B, KB, MB, GB, TB
 * (powers of 1000) or binary KiB, MiB, GiB, TiB (powers of 1024); units are case-insensitive and may
 * follow a space; the number may have a fraction ("1.5GB"). The result is rounded down to whole
 * bytes and must be at least 1. Returns 0, TW_EINVAL (not a size) or TW_ERANGE (0, or above 2^63).
 */
TW_API int tw_parse_size(const char *text, uint64_t *bytes);

/* Fields of a file name template. */
typedef struct tw_name_fields {
    int64_t timestamp_ns; /* rendered as 20261122-160312.123456789 (UTC) */
    int64_t pid;
    int64_t tid;
    int64_t rank;         /* < 0: rendered as "norank" */
    uint64_t index;       /* rendered with at least 4 digits */
    const char *host;
} tw_name_fields_t;

/*
 * Checks a file_name_spec: "timestamp", "serial", or a template using {timestamp} {pid} {tid} {rank}
 * {index} {host} ("{{" and "}}" are literal braces). A template may not contain '/' or NUL, nor be
 * "." or ".."; an unknown field is an error. On error, writes a message naming the problem to err.
 * Returns 0 or TW_EINVAL.
 */
TW_API int tw_name_spec_check(const char *spec, char *err, size_t err_size);

/*
 * Expands spec into out (a file name without directory), appending extension (".csv") unless the
 * expansion already ends with it. "timestamp" is "tw-{timestamp}-{pid}-{index}", "serial" is
 * "tw-{pid}-{index}"; with a rank (>= 0) they are "tw-{timestamp}-rank{rank}-{pid}-{index}" and
 * "tw-rank{rank}-{pid}-{index}". Characters of the host name other than [A-Za-z0-9._-] become '_', so no field
 * can introduce a '/' or "..". Returns the length, or TW_EINVAL (bad spec) or TW_ERANGE (out too
 * small).
 */
TW_API int tw_name_expand(const char *spec, const tw_name_fields_t *fields, const char *extension, char *out,
                          size_t out_size);

/*
 * The profiler's configuration, validated in one place for every source (a Python dict, a JSON
 * config file, environment variables, profile()'s and Session's arguments). json_in is a JSON
 * object; its keys and what each accepts (the defaults are in one table, config_keys in config_keys.c):
 *   out_dir a path | format "json"|"csv" | file_max_size a size (>= 4096 bytes) | file_name_spec
 *   "timestamp", "serial" or a template | modules, include: lists of names | exclude null (the
 *   default list), [globs] (replacing it) or ["+glob", ...] (added to it; not both kinds) | args "summary"|"none"|"repr" | gpu "auto"|"on"|"off" | max_files a
 *   count (0: all) | max_total_size a size (0: all) | flush_interval seconds, (0, 3600] | buffer_size
 *   a size | on_full "drop"|"wait" |
 *   tensor_stats null (off), true or {"tensors": [of input output weight grad], "metrics": [of shape
 *   dtype mean std min max zeros nan inf, or registered names], "modules": [globs], "every": n |
 *   "sample": p} (normalized to null or the complete object) | track [of "parameters", "grads"] |
 *   schedule null or {"skip_first", "wait", "warmup", "active" (>= 1), "repeat": steps, "summary":
 *   "all"|"active"} (schedule.h; normalized to null or the complete object) | records "all" or
 *   "summary" (no record files: summary.json and the manifest only) | flops true|false (FLOPs per call
 *   of linear, matmul, conv, attention, ...) | peak_flops null or FLOP/s > 0 (for MFU) | memory
 *   true|false (bytes allocated, freed and the peak per call, from the allocators' reports) | compress
 *   "none"|"gzip" (record files as gzip members, .csv.gz / .jsonl.gz, file_max_size counting their
 *   compressed bytes)
 * A string given for a list key is a comma-separated list ("a" is ["a"]), from every source. With
 * from_strings, values may also be strings to convert (environment variables): numbers, booleans. On success *json_out (free() it) is the complete configuration with
 * every default filled in and sizes in bytes. On error returns TW_EINVAL and writes to err a message
 * that names the key, the value given and what is accepted (and, for an unknown key, the nearest
 * known one).
 */
TW_API int tw_config_normalize(const char *json_in, int from_strings, char **json_out, char *err, size_t err_size);

/*
 * Whose defaults fill in the keys not given. TorchWrapper's are the original TorchWrapper's (records
 * in "./output", argument summaries); profile()'s keep records in memory (out_dir null) and record no
 * argument text (args "none"); a bare Session's are profile()'s with gpu "off". The table of
 * defaults is in config_keys.c, the only place they are written.
 */
typedef enum {
    TW_CONFIG_DEFAULTS_TORCHWRAPPER = 0,
    TW_CONFIG_DEFAULTS_PROFILE = 1,
    TW_CONFIG_DEFAULTS_SESSION = 2,
    TW_CONFIG_DEFAULTS_COUNT
} tw_config_defaults_t;

/* tw_config_normalize() with the defaults of an entry point; out_dir may be null (in memory) where its
 * default is null. tw_config_normalize() is this with TW_CONFIG_DEFAULTS_TORCHWRAPPER. */
TW_API int tw_config_normalize_for(tw_config_defaults_t defaults, const char *json_in, int from_strings,
                                   char **json_out, char *err, size_t err_size);

/* The default of a config key for an entry point, as JSON text ("128000000", "\"timestamp\""), or
 * NULL for an unknown key. Static text. */
TW_API const char *tw_config_default(const char *key, tw_config_defaults_t defaults);

/* ---- the configuration as C takes it ---------------------------------------------------------------- */

/* How record files are written: CSV or JSON lines ("format"); as they are, or each one gzip member,
 * ".csv.gz" / ".jsonl.gz" ("compress"). */
typedef enum { TW_FORMAT_CSV = 0, TW_FORMAT_JSON = 1 } tw_format_t;
typedef enum { TW_COMPRESS_NONE = 0, TW_COMPRESS_GZIP = 1 } tw_compress_t;

typedef enum { TW_ARGS_NONE = 0, TW_ARGS_SUMMARY = 1, TW_ARGS_REPR = 2 } tw_args_mode_t;
typedef enum { TW_GPU_OFF = 0, TW_GPU_AUTO = 1, TW_GPU_ON = 2 } tw_gpu_mode_t;
typedef enum { TW_SITES_OFF = 0, TW_SITES_BOUNDARY = 1, TW_SITES_ALL = 2 } tw_sites_mode_t;
typedef enum { TW_ATEN_OFF = 0, TW_ATEN_BACKWARD = 1, TW_ATEN_ALL = 2 } tw_aten_mode_t;

/*
 * The keys the C side acts on, typed: what tw_config_load() makes of a configuration it validated,
 * so that the session and the writer take values as they are rather than parse text again. (Keys
 * only Python acts on, modules, include, exclude, tensor_stats, track, stay in the JSON.)
 */
typedef struct tw_config {
    char *out_dir;              /* NULL: records kept in memory */
    tw_format_t format;
    uint64_t file_max_size;     /* bytes, >= TW_CONFIG_MIN_FILE_SIZE */
    char *file_name_spec;
    unsigned max_files;         /* 0: all kept */
    uint64_t max_total_size;    /* bytes of each kind's files kept, the oldest removed past it; 0: all kept */
    uint64_t flush_interval_ns;
    uint64_t buffer_bytes;      /* buffer_size */
    int block_when_full;        /* on_full "wait" */
    tw_args_mode_t args;
    tw_gpu_mode_t gpu;
    tw_schedule_t schedule;     /* zeroed: none */
    int summary_only;           /* records "summary" */
    uint64_t on_demand_steps;   /* on_demand's steps; 0: off */
    char *on_demand_dir;        /* on_demand's dir; NULL: OUT_DIR/capture-N */
    tw_sites_mode_t sites;
    tw_aten_mode_t aten;
    int flops;                  /* FLOPs per call (config flops) */
    double peak_flops;          /* FLOP/s for MFU (config peak_flops); 0: not given */
    int memory;                 /* memory: bytes allocated, freed and the peak per call (allocator reports) */
    tw_compress_t compress;     /* compress: record files as gzip members (.csv.gz, .jsonl.gz) */
    int detail_sampled;         /* detail "sampled": the detail in the first TW_DETAIL_FIRST steps, then one
                                 * step in TW_DETAIL_EVERY (steps >= TW_DETAIL_FIRST whose number it divides) */
} tw_config_t;

#define TW_DETAIL_FIRST 10
#define TW_DETAIL_EVERY 20

/* Whether step carries the detail under detail "sampled". */
static inline int tw_detail_step(uint64_t step)
{
    return step < TW_DETAIL_FIRST || step % TW_DETAIL_EVERY == 0;
}

/* The built-in metrics of tensor_stats, space-separated, in the stats files' column order (the one
 * list: the validator's and the Python layer's). Static text. */
TW_API const char *tw_config_tensor_stats_metrics(void);

/* The smallest file_max_size: room for a header and any record. */
#define TW_CONFIG_MIN_FILE_SIZE 4096

/*
 * tw_config_normalize_for(), and the result typed in *out (free it with tw_config_free()); json_out
 * may be NULL when the JSON is not wanted. Returns 0, TW_EINVAL with the message in err, or TW_ENOMEM.
 */
TW_API int tw_config_load(tw_config_defaults_t defaults, const char *json_in, int from_strings, tw_config_t *out,
                          char **json_out, char *err, size_t err_size);

/* Frees what tw_config_load() allocated in config (not config itself). */
TW_API void tw_config_free(tw_config_t *config);

#ifdef __cplusplus
}
#endif
#endif
