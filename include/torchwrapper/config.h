/* SPDX-License-Identifier: MIT */
/* Parsing of user-facing values: sizes ("128MB") and file name specs ("timestamp", templates). */
#ifndef TORCHWRAPPER_CONFIG_H
#define TORCHWRAPPER_CONFIG_H

#include "torchwrapper/common.h"

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
 * object; its keys and what each accepts (the defaults are in one table, config_keys in config.c):
 *   out_dir a path | format "json"|"csv" | file_max_size a size (>= 4096 bytes) | file_name_spec
 *   "timestamp", "serial" or a template | modules, include: lists of names | exclude null (the
 *   default list), [globs] (replacing it) or ["+glob", ...] (added to it; not both kinds) | args "summary"|"none"|"repr" | gpu "auto"|"on"|"off" | max_files a
 *   count (0: all) | flush_interval seconds, (0, 3600] | buffer_size a size | on_full "drop"|"wait" |
 *   tensor_stats null (off), true or {"tensors": [of input output weight grad], "metrics": [of shape
 *   dtype mean std min max zeros nan inf, or registered names], "modules": [globs], "every": n |
 *   "sample": p} (normalized to null or the complete object) | track [of "parameters", "grads"] |
 *   schedule null or {"skip_first", "wait", "warmup", "active" (>= 1), "repeat": steps, "summary":
 *   "all"|"active"} (schedule.h; normalized to null or the complete object) | records "all" or
 *   "summary" (no record files: summary.json and the manifest only)
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
 * defaults is in config.c, the only place they are written.
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

#ifdef __cplusplus
}
#endif
#endif
