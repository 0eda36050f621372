/* SPDX-License-Identifier: MIT */
/*
 * Rotating file sets (not public API): the files of one kind of record in out_dir, each at most
 * max_size bytes, named by file_name_spec, opened O_EXCL | O_NOFOLLOW (never an existing file, never
 * through a symbolic link), the oldest removed past max_files or max_total_size (a flight recorder:
 * the files kept, the one being written counted as full, never pass it). Knows nothing of records,
 * queues or threads: the writer thread appends formatted lines.
 *
 * Compressed (compress "gzip"): each file is one gzip member (".csv.gz", ".jsonl.gz") holding what
 * the plain file would, its CSV header first. Lines are gathered as they are, and deflated at each
 * flush with a sync point at its end (Z_SYNC_FLUSH: the window is kept, so the ratio stays), so that
 * what is on disk inflates to whole flushes; closing the file finishes the member. max_size counts
 * compressed bytes: a line is taken only while the bytes written, the most the lines gathered could
 * deflate to (stored blocks: gz_bound) and the member's end stay within it; when they would not, the
 * lines gathered are deflated first (their real size then counts), and the file is rotated only when
 * the line still does not fit.
 */
#ifndef TW_FILESET_H
#define TW_FILESET_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "torchwrapper/config_keys.h"
#include "torchwrapper/writer.h"

#define TW_MIN_FILE_SIZE TW_CONFIG_MIN_FILE_SIZE /* room for a header and any record (config_keys.h) */
#define TW_BUFFER_FLUSH (256 * 1024)   /* bytes of output gathered before a write() */
/* zlib's level for compress "gzip": 1, its fastest. On a BERT run's record files, 1 deflates CSV 5.7x
 * and JSON lines 9.9x at 213 and 326 MB/s of one core; 6 (zlib's default) 7.3x and 13.2x, at 66 and
 * 94 MB/s: files a quarter smaller for three times the writer thread's CPU. */
#define TW_GZIP_LEVEL 1

struct z_stream_s; /* zlib's z_stream */

enum { TW_REMOVED_MAX_FILES = 1, TW_REMOVED_MAX_TOTAL_SIZE = 2 };

/* The most bytes a file may hold: file_max_size, or half of max_total_size where that is less (so
 * that the file before the one being written is kept too), never below TW_MIN_FILE_SIZE. */
static inline uint64_t tw_fileset_file_cap(uint64_t file_max_size, uint64_t max_total_size)
{
    uint64_t half = max_total_size / 2;
    if (max_total_size == 0 || half >= file_max_size)
        return file_max_size;
    return half > TW_MIN_FILE_SIZE ? half : TW_MIN_FILE_SIZE;
}

/*
 * What every file set of one writer shares: where and how files are named, and the counters and
 * first error of them all. The configuration is set before any file is opened (and again in a forked
 * child); the counters are guarded by *lock (the writer's).
 */
typedef struct {
    const char *out_dir;
    const char *spec;      /* file_name_spec */
    tw_format_t format;    /* the extension: .csv or .jsonl */
    tw_compress_t compress; /* gzip: .gz after it, and the files gzip members */
    uint64_t max_size;
    unsigned max_files;    /* 0: no limit */
    uint64_t max_total_size; /* bytes of one kind's files kept; 0: no limit (max_size is then at most half) */
    int64_t pid;
    int64_t rank;
    char host[256];
    pthread_mutex_t *lock;
    uint64_t names_skipped;  /* file names found taken (O_EXCL), symbolic links included */
    uint64_t links_refused;  /* of which symbolic links */
    int write_errno;         /* the first error, said once on stderr */
} tw_fileset_env_t;

typedef struct {
    char *name;
    uint64_t records;
    uint64_t bytes;
    int complete; /* compressed: closed with the member's end (a killed process's last file is not) */
} tw_file_entry_t;

/*
 * One rotating set of files: the call records, or one extra record stream. Written by the writer
 * thread only, except the counters (written, dropped, bytes) and the file list, which others read
 * under env->lock.
 */
typedef struct {
    const char *kind;      /* "calls", or the stream's kind (also in the file names) */
    const char *header;    /* CSV header line, '\n' included; NULL for JSON */
    size_t header_len;
    int fd;
    uint64_t file_bytes;   /* bytes of the current file, written or buffered (compressed: written) */
    uint64_t index;
    tw_file_entry_t *files;
    size_t file_count;
    size_t file_capacity;
    struct {               /* the files removed by max_files and max_total_size (no longer listed) */
        uint64_t files, records, bytes;
        int why;           /* the limit that removed the last of them: TW_REMOVED_* */
    } removed;
    char *buf;             /* TW_BUFFER_FLUSH + one line */
    size_t buf_len;
    uint64_t buf_records;
    uint64_t written;      /* under env->lock */
    uint64_t dropped;
    uint64_t bytes_total;
    struct z_stream_s *z;  /* compressed: the deflate state, made at the first file, reset at each */
    unsigned char *z_out;  /* what deflate gives, written as it fills */
    int z_failed;          /* a write of the current member failed: the next line opens a new file */
} tw_fileset_t;

static inline int64_t tw_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Records err (a negative errno value) as the writer's first error and says it once on stderr.
 * Every function here returns 0 or a negative errno value, as the library does (common.h). */
void tw_fileset_warn(tw_fileset_env_t *env, const char *what, const char *path, int err);

/* write() all of data, through EINTR; 0 or a negative errno value. */
int tw_write_all(int fd, const char *data, size_t len);

/* A file replaced atomically: tw_atomic_open() opens path.tmp-PID (its name in tmp, O_NOFOLLOW,
 * mode) and returns its descriptor or -errno; tw_atomic_commit() renames it over path when err (the
 * writing's first error, 0 or an errno value) is 0, else removes it, and returns the first error.
 * A reader sees the old file or the new one, never half of one. */
int tw_atomic_open(const char *path, char *tmp, size_t tmp_size, mode_t mode);
int tw_atomic_commit(const char *tmp, const char *path, int err);

/* mkdir -p: dir and its missing parents; 0 when dir is then a directory this process can write
 * into, else a negative errno value (-ENOTDIR: not a directory; -EACCES: not writable). */
int tw_make_dirs(const char *dir);

/* dir/name into out; 0 or TW_ERANGE (-ERANGE). */
int tw_path_join(char *out, size_t size, const char *dir, const char *name);

/* The longest line that fits in a new file of fs (after its header, and compressed, the member's
 * own bytes with the most a line can deflate to). */
uint64_t tw_fileset_room(const tw_fileset_env_t *env, const tw_fileset_t *fs);

/* Appends one formatted line (at most TW_LINE_MAX bytes, and tw_fileset_room) to fs, rotating first
 * when it would take the file past max_size. Returns 1 when it opened a new file (the manifest is
 * due), else 0; a line that cannot be written is counted as dropped. */
int tw_fileset_append(tw_fileset_env_t *env, tw_fileset_t *fs, const char *line, size_t len);

/* Where fs's next line can be formatted in place: the buffer is TW_BUFFER_FLUSH + one line and holds
 * at most TW_BUFFER_FLUSH between appends, so that a line formatted there and taken by
 * tw_fileset_commit is never copied (~80 of the writer's ~1,000 instructions a record). Only for a
 * fileset whose buffer's line is TW_LINE_MAX (the call records'). */
static inline char *tw_fileset_tail(tw_fileset_t *fs)
{
    return fs->buf + fs->buf_len;
}

/* Takes the len bytes formatted at tw_fileset_tail(fs) as fs's next line, where they lie: 0. When
 * the line needs a flush or a new file first, leaves it and returns -1: tw_fileset_append it from
 * a copy. */
int tw_fileset_commit(tw_fileset_env_t *env, tw_fileset_t *fs, size_t len);

/* Writes the buffered output of fs's current file (compressed: deflated, up to a sync point). */
void tw_fileset_flush(tw_fileset_env_t *env, tw_fileset_t *fs);

/* Flushes and closes fs's current file (compressed: with the member's end). */
void tw_fileset_close(tw_fileset_env_t *env, tw_fileset_t *fs);

/* In a forked child: the parent's open file and buffered output stay the parent's. */
void tw_fileset_fork_child(tw_fileset_t *fs);

/* Frees fs's file list, buffer and deflate state (not the header). */
void tw_fileset_free(tw_fileset_t *fs);

#endif
