/* SPDX-License-Identifier: MIT */
/*
 * The reader: streams the record files the writer wrote (CSV or JSON lines, call records or GPU
 * records) back, one row at a time, in constant memory. A gzip file (compress "gzip": *.csv.gz,
 * *.jsonl.gz; told by its first bytes, not its name) is read as what it inflates to, member after
 * member; a member cut short (a killed writer's last file) ends where its data ends, after the last
 * flush's whole lines. Corrupt gzip data is an error naming the file.
 *
 * A file's kind and column order come from its header (CSV) or its first object's keys (JSON
 * lines), so files with columns this version does not know (written by a newer one) are read, the
 * extra columns ignored. A last row without its newline (a killed process) is skipped and counted;
 * a row whose fields do not parse is skipped and counted; a file whose header is not one of ours is
 * an error naming the file.
 *
 * CSV is scanned by a memchr-based RFC 4180 splitter rather than libcsv: libcsv's byte-at-a-time
 * state machine reads 100-130 MB/s on these machines, and tw-report's target is 300 MB/s. The
 * fuzz harness checks that both split every input the same way.
 */
#ifndef TORCHWRAPPER_READER_H
#define TORCHWRAPPER_READER_H

#include "torchwrapper/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TW_FILE_CALLS = 1, /* call records: call_id, api, start_ns, cost_ns, ... */
    TW_FILE_GPU = 2,   /* GPU activity records: call_id, api, kind, name, start_ns, end_ns, ... */
    /* The model watch's streams beside them: told apart by tw_read_any_kind only; their rows are no
     * tw_row_t, and tw_read_file refuses them as it always did. */
    TW_FILE_STATS = 3,   /* tensor statistics: call_id, step, module, class, tensor, ... */
    TW_FILE_UPDATES = 4, /* parameter updates: call_id, api, outer_call_id, parameter, tensor, version, ... */
} tw_file_kind_t;

/* Strings point into the reader's buffer: valid during the callback only, not NUL-terminated. */
typedef struct tw_str {
    const char *ptr;
    size_t len;
} tw_str_t;

/* One row of either kind; fields a file lacks are 0 or empty. */
typedef struct tw_row {
    tw_file_kind_t kind;
    uint64_t call_id;
    uint64_t parent_id;
    uint64_t start_ns;
    uint64_t cost_ns;   /* calls: cost; GPU: end_ns - start_ns (0 for an end of 0: still running) */
    uint64_t self_ns;
    uint64_t gpu_ns;
    uint64_t end_ns;    /* GPU only */
    int64_t pid;
    uint64_t tid;
    uint64_t depth;
    int64_t device;     /* GPU only */
    int64_t stream;     /* GPU only */
    uint64_t correlation_id; /* GPU only */
    int error;
    tw_str_t api;
    tw_str_t args;
    tw_str_t gpu_kind;  /* kernel, memcpy, memset */
    tw_str_t name;      /* the kernel's name */
    tw_str_t module;    /* calls: the nn.Module instance's path (the model watch), or empty */
    int64_t step;       /* calls: the step the call began in (schedule.h); -1 in older files without it */
    uint64_t site;      /* calls: the call site's id in the process's sites file (sites.h); 0: none, and in
                         * older files without the column */
    uint64_t fwd_call_id; /* calls: for an autograd node, the forward call that created it; else 0 */
    tw_str_t fwd_api;   /* calls: that forward call's API, or empty */
    /* calls: 1 when module holds a module forward's path (empty: the path "", TW_MODULE_ROOT's, which
     * older files gave their first model, written "" in CSV and in JSON), 0 when the call is no module's forward (an empty CSV field, a JSON null), -1 in
     * files older than the column. Appended last: the fields above keep their places. */
    int has_module;
    /* calls: resources (recorder.h tw_resources_t), 0 when not measured and in older files */
    uint64_t flops;       /* the call's own FLOPs */
    uint64_t flops_total; /* with those of the calls inside it */
    uint64_t mem_alloc;   /* bytes allocated during the call, inside calls included */
    uint64_t mem_self;    /* of which outside the recorded calls inside it */
    uint64_t mem_freed;   /* bytes freed during the call */
    uint64_t mem_peak;    /* the highest allocated total reported during it */
    /* GPU only: the CUDA API call that launched the work (CUPTI's runtime or driver record), epoch ns
     * on the records' clock, and its name (cudaLaunchKernel, cudaMemcpyAsync, ...); 0 and empty when
     * not known, and in files older than these columns. Appended last: the fields above keep their
     * places. */
    int64_t launch_start_ns;
    int64_t launch_end_ns;
    tw_str_t launch;
} tw_row_t;

/* Called for every row; a non-zero return stops the reading and is returned by tw_read_*. */
typedef int (*tw_row_fn)(void *ctx, const tw_row_t *row);

typedef struct tw_read_stats {
    uint64_t rows;      /* delivered to the callback */
    uint64_t truncated; /* a last row without its newline */
    uint64_t malformed; /* rows whose fields did not parse */
    uint64_t bytes;     /* read (of a gzip file, what it inflated to) */
} tw_read_stats_t;

/*
 * Reads the file at path (kind from its header) and calls fn for every row. Returns 0, the
 * callback's non-zero value, TW_EIO (cannot open or read), TW_EINVAL (not a record file), or
 * TW_ENOMEM, with a message naming the path in err. stats (may be NULL) is added to.
 */
TW_API int tw_read_file(const char *path, tw_row_fn fn, void *ctx, tw_read_stats_t *stats, char *err,
                        size_t err_size);

/* The same for the whole content of a file in memory (name is used in messages). */
TW_API int tw_read_buffer(const char *name, const char *data, size_t len, tw_row_fn fn, void *ctx,
                          tw_read_stats_t *stats, char *err, size_t err_size);

/* The kind of the file at path, from its first line; *kind is 0 for an empty file (or one torn
 * line). Returns 0, TW_EIO or TW_EINVAL (not a record file) with a message in err. */
TW_API int tw_read_kind(const char *path, tw_file_kind_t *kind, char *err, size_t err_size);

/* The same, and TW_FILE_STATS or TW_FILE_UPDATES for the model watch's streams' files. */
TW_API int tw_read_any_kind(const char *path, tw_file_kind_t *kind, char *err, size_t err_size);

/*
 * A file read a batch of rows at a time (tw_read_file reads it in one call): the Python binding
 * hands rows over in batches and keeps no more than one in memory. The rows, torn lines and
 * errors are tw_read_file's.
 */
typedef struct tw_reader tw_reader_t;

/* Opens path. stats (may be NULL: the reader's own) is added to as the file is read. Returns 0,
 * TW_EIO (errno kept: ENOENT ...) or TW_ENOMEM with a message naming the path in err. */
TW_API int tw_reader_open(const char *path, tw_read_stats_t *stats, tw_reader_t **reader, char *err,
                          size_t err_size);

/* Delivers the next rows to fn, at most max_rows of them (0: every row left). Returns 0 with *more
 * set to 1 when it stopped at max_rows (call again for the rest) and 0 at the end of the file; the
 * callback's non-zero value; or TW_EIO, TW_EINVAL (not a record file), TW_ENOMEM with a message in
 * err, after which every call fails again. */
TW_API int tw_reader_next(tw_reader_t *reader, tw_row_fn fn, void *ctx, size_t max_rows, int *more, char *err,
                          size_t err_size);

/*
 * Opens the part of path whose records start in [offset, offset + length) (length UINT64_MAX: to the
 * end), for reading one file on several threads: the record that starts before offset + length is
 * read to its end, past it; a range with offset > 0 starts at the first line that begins at or after
 * offset, read with the column order of the file's header (CSV) or first object (JSON lines). Read it
 * with tw_reader_next. A CSV record may hold line ends in a quoted field: a range whose offset falls
 * inside one starts in the middle of that record; tw_reader_range tells the caller, who checks that
 * each range begins where the one before it ended. Its stats count the bytes from the first record's
 * start to the last one's end, once the range is read. Returns tw_reader_open's errors, and
 * TW_EINVAL when offset > 0 and the file has no header line or is compressed (read whole).
 */
TW_API int tw_reader_open_range(const char *path, uint64_t offset, uint64_t length, tw_read_stats_t *stats,
                                tw_reader_t **reader, char *err, size_t err_size);

/* A range read to its end: the file offset of its first record's start, and of its last record's end
 * (the same offset when it holds no record). */
TW_API void tw_reader_range(const tw_reader_t *reader, uint64_t *first, uint64_t *end);

/* The file's kind: 0 until its header (or first object) is read, and for an empty file. */
TW_API tw_file_kind_t tw_reader_kind(const tw_reader_t *reader);

/* The counters the reader adds to (the caller's, or its own). */
TW_API const tw_read_stats_t *tw_reader_stats(const tw_reader_t *reader);

TW_API void tw_reader_close(tw_reader_t *reader);

/*
 * The CSV splitter, exposed for the fuzz harness: splits the first record of data[0..len) into at
 * most max_fields fields (unquoted copies in scratch, scratch_size bytes). Returns the bytes
 * consumed (the record and its line end), 0 when the record is not complete within len, or -1 when
 * it is malformed (a quote inside an unquoted field, text after a closing quote, too many fields,
 * scratch too small). *nfields receives the field count.
 */
TW_API long tw_csv_split(const char *data, size_t len, tw_str_t *fields, size_t max_fields, size_t *nfields,
                         char *scratch, size_t scratch_size);

/*
 * The input shapes of a call from its argument summary (args "summary": "((f32[4,8]@cpu, 2), {'dim':
 * f32[8]@cpu})"), as torch.profiler writes a call's input shapes: one entry per argument, the
 * positional ones then the keyword values, a tensor's sizes ("[4, 8]"), [] for anything else, and
 * for a tuple or list holding tensors the list of its items' entries ("[[[4, 8], [4, 8]], []]" for
 * torch.cat([a, b], 0): the "Input Dims" of torch.profiler's trace). Lists past 8 items show their
 * first 8 (the summary holds no more); a summary cut at TW_ARGS_MAX gives the arguments before the
 * cut. Written at out (no NUL); 2 * args_len + 2 bytes always suffice. Returns the length, 0 when
 * args is no summary (empty: args "none"; a repr), or TW_ERANGE when size is too small.
 */
TW_API int tw_args_shapes(const char *args, size_t args_len, char *out, size_t size);

/* ---- call sites' files (sites.json, written by tw_sites_write_json, writer.h) ------------------------- */

/* Called for each site of a sites file read back; the strings are valid during the call only. A
 * non-zero return stops the reading and is returned by tw_sites_read_json. */
typedef int (*tw_site_fn)(void *ctx, uint32_t id, const char *file, uint32_t line, const char *function,
                          const char *text);

/*
 * Reads a file written by tw_sites_write_json (the readers' one parser of the format): *pid gets its
 * "pid" (-1 when absent) and fn each site in the file's order. Returns 0, fn's value, TW_EIO (errno
 * kept), TW_ENOMEM, or TW_EINVAL for a file that is not a sites file, with a message naming the path.
 */
TW_API int tw_sites_read_json(const char *path, tw_site_fn fn, void *ctx, int64_t *pid, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif
