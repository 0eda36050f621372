/* SPDX-License-Identifier: MIT */
/*
 * The writer thread and its files. See writer.h. Lock order (also followed by the fork handlers in
 * recorder.c): recorder registry -> recorder -> writer -> chunk pool.
 */
#include "config.h"

#include <cjson/cJSON.h>
#include <csv.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "torchwrapper/api.h"
#include "torchwrapper/config.h"
#include "torchwrapper/stats.h"
#include "torchwrapper/writer.h"
#include "writer_internal.h"

#define MIN_FILE_SIZE 4096           /* room for a header and any record */
#define BUFFER_FLUSH (256 * 1024)    /* bytes of output gathered before a write() */
#define DEFAULT_BUFFER_BYTES (32ull << 20)
#define STREAM_MIN_QUEUE (1u << 20) /* bytes a stream may queue, at least */
#define CSV_HEADER "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module\n"

typedef struct {
    char *name;
    uint64_t records;
    uint64_t bytes;
    int removed; /* by max_files */
} file_entry_t;

/*
 * One rotating set of files: the call records, or one extra record stream. Written by the writer
 * thread only, except the counters (written, dropped, bytes) and the file list, which others read
 * under the writer's lock.
 */
typedef struct {
    const char *kind;      /* "calls", or the stream's kind (also in the file names) */
    const char *header;    /* CSV header line, '\n' included; NULL for JSON */
    size_t header_len;
    int fd;
    uint64_t file_bytes;   /* bytes of the current file, written or buffered */
    uint64_t index;
    file_entry_t *files;
    size_t file_count;
    size_t file_capacity;
    size_t kept;           /* files not removed by max_files */
    char *buf;             /* BUFFER_FLUSH + one line */
    size_t buf_len;
    uint64_t buf_records;
    uint64_t written;      /* under the writer's lock */
    uint64_t dropped;
    uint64_t bytes_total;
} fileset_t;

/* A row queued by tw_writer_stream_write(): this header, then len bytes of text ending in '\n'. */
typedef struct {
    uint32_t len;
    uint32_t api_id;  /* TW_API_ID_NONE: no GPU time to add to the per-API totals */
    uint64_t gpu_ns;
} queued_row_t;

struct tw_writer_stream {
    tw_writer_t *w;
    struct tw_writer_stream *next;
    char kind[TW_STREAM_KIND_MAX + 1];
    fileset_t files;       /* writer thread */
    size_t max_queued;     /* bytes */
    /* the queue, guarded by lock */
    pthread_mutex_t lock;
    char *queue;
    size_t queue_len;
    size_t queue_capacity;
    int closed;
    int kicked;            /* the writer was woken for this batch already */
    char *spare;           /* the writer thread's: the previous queue, emptied */
    size_t spare_capacity;
    _Atomic uint64_t dropped_full;     /* rows refused: queue full, too long, after close */
    _Atomic uint64_t dropped_upstream; /* lost before they reached us (tw_writer_stream_add_dropped) */
};

struct tw_writer {
    /* configuration (owned copies) */
    char *out_dir;
    char *spec;
    char *manifest_extra;
    tw_format_t format;
    uint64_t max_size;
    unsigned max_files;
    uint64_t flush_interval_ns;
    uint64_t max_chunks;
    uint64_t buffer_bytes;
    int block_when_full;
    int64_t rank;
    tw_clock_t clock;
    tw_recorder_t *rec;
    char host[256];
    int64_t pid;
    int fork_child;
    int64_t start_ns;
    int64_t end_ns;
    char manifest_path[PATH_MAX];
    char summary_path[PATH_MAX];

    /* the queue, guarded by lock */
    pthread_mutex_t lock;
    pthread_cond_t work;
    pthread_cond_t room;
    tw_chunk_t *head;
    tw_chunk_t *tail;
    uint64_t queued;
    int stopping;
    int thread_running;
    int closed;
    int streams_kicked;    /* a stream's queue is filling up: drain it now */
    pthread_t thread;
    tw_writer_stream_t *streams; /* added under lock, freed by tw_writer_destroy */
    /* counters, written by the writer thread under lock, read by anyone under lock */
    uint64_t wakeups; /* timed waits that returned: about one per flush interval when idle */
    uint64_t names_skipped;  /* file names found taken (O_EXCL), symbolic links included */
    uint64_t links_refused;  /* of which symbolic links */
    uint64_t truncated;
    int write_errno;

    /* writer thread only */
    fileset_t calls;
    tw_stats_t stats;
    struct tw_writer *next_live; /* in the list of live writers (fork handling) */
};

static tw_writer_stream_t *streams_head(tw_writer_t *w);

/* Threads that wait with deadlines on CLOCK_MONOTONIC need condition variables on that clock (the
 * default, CLOCK_REALTIME, makes every such wait return at once: the thread spins). */
void tw_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- formatting ------------------------------------------------------------------------------ */

/* CSV text field: as is when nothing needs quoting, else through libcsv's quoting. */
static char *put_csv_text(char *p, const char *s, size_t len)
{
    return tw_csv_field(p, s, len);
}

char *tw_csv_field(char *p, const char *s, size_t len)
{
    int plain = len > 0 && s[0] != ' ' && s[len - 1] != ' ';
    for (size_t i = 0; plain && i < len; i++)
        plain = s[i] != ',' && s[i] != '"' && s[i] != '\r' && s[i] != '\n';
    if (!plain && len > 0)
        return p + csv_write(p, 2 * len + 2, s, len);
    memcpy(p, s, len);
    return p + len;
}

char *tw_json_escape(char *p, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    *p++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': *p++ = '\\'; *p++ = '"'; break;
        case '\\': *p++ = '\\'; *p++ = '\\'; break;
        case '\n': *p++ = '\\'; *p++ = 'n'; break;
        case '\r': *p++ = '\\'; *p++ = 'r'; break;
        case '\t': *p++ = '\\'; *p++ = 't'; break;
        case '\b': *p++ = '\\'; *p++ = 'b'; break;
        case '\f': *p++ = '\\'; *p++ = 'f'; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                memcpy(p, "\\u00", 4);
                p[4] = hex[c >> 4];
                p[5] = hex[c & 15];
                p += 6;
            } else {
                *p++ = (char)c;
            }
        }
    }
    *p++ = '"';
    return p;
}

/* Formats one record into line (at least TW_LINE_MAX bytes), its argument text cut to args_max
 * bytes; returns its length. */
static size_t format_record(const tw_writer_t *w, const tw_chunk_t *chunk, const tw_record_t *r, char *line,
                            size_t args_max)
{
    const char *args = chunk->text + r->args_offset;
    size_t args_len = tw_utf8_cut(args, r->args_len, args_max);
    const char *api = tw_api_name(r->api_id);
    if (api == NULL)
        api = "?";
    size_t api_len = strnlen(api, TW_API_NAME_MAX);
    const char *module = tw_module_path(r->module_id); /* NULL: not a module call */
    size_t module_len = module != NULL ? strnlen(module, TW_API_NAME_MAX) : 0;
    char *p = line;
    int64_t start = tw_clock_epoch_ns(&w->clock, r->start);
    uint64_t cost = tw_clock_duration_ns(&w->clock, r->cost);
    uint64_t self = tw_clock_duration_ns(&w->clock, r->self);
    if (w->format == TW_FORMAT_CSV) {
        p = tw_format_u64(p, r->call_id);
        *p++ = ',';
        p = put_csv_text(p, api, api_len);
        *p++ = ',';
        p = tw_format_i64(p, start);
        *p++ = ',';
        p = tw_format_u64(p, cost);
        *p++ = ',';
        p = tw_format_u64(p, self);
        *p++ = ',';
        p = tw_format_u64(p, r->gpu_ns);
        *p++ = ',';
        p = tw_format_i64(p, w->pid);
        *p++ = ',';
        p = tw_format_u64(p, chunk->tid);
        *p++ = ',';
        p = tw_format_u64(p, r->depth);
        *p++ = ',';
        p = tw_format_u64(p, r->parent_id);
        *p++ = ',';
        *p++ = (r->flags & TW_RECORD_ERROR) ? '1' : '0';
        *p++ = ',';
        p = put_csv_text(p, args, args_len);
        *p++ = ',';
        if (module != NULL && module_len == 0) { /* the root module: "" tells it from no module */
            *p++ = '"';
            *p++ = '"';
        } else if (module != NULL) {
            p = put_csv_text(p, module, module_len);
        }
        *p++ = '\n';
    } else {
        memcpy(p, "{\"call_id\":", 11);
        p = tw_format_u64(p + 11, r->call_id);
        memcpy(p, ",\"api\":", 7);
        p = tw_json_escape(p + 7, api, api_len);
        memcpy(p, ",\"start_ns\":", 12);
        p = tw_format_i64(p + 12, start);
        memcpy(p, ",\"cost_ns\":", 11);
        p = tw_format_u64(p + 11, cost);
        memcpy(p, ",\"self_ns\":", 11);
        p = tw_format_u64(p + 11, self);
        memcpy(p, ",\"gpu_ns\":", 10);
        p = tw_format_u64(p + 10, r->gpu_ns);
        memcpy(p, ",\"pid\":", 7);
        p = tw_format_i64(p + 7, w->pid);
        memcpy(p, ",\"tid\":", 7);
        p = tw_format_u64(p + 7, chunk->tid);
        memcpy(p, ",\"depth\":", 9);
        p = tw_format_u64(p + 9, r->depth);
        memcpy(p, ",\"parent_id\":", 13);
        p = tw_format_u64(p + 13, r->parent_id);
        if (r->flags & TW_RECORD_ERROR) {
            memcpy(p, ",\"error\":true", 13);
            p += 13;
        } else {
            memcpy(p, ",\"error\":false", 14);
            p += 14;
        }
        memcpy(p, ",\"args\":", 8);
        p = tw_json_escape(p + 8, args, args_len);
        memcpy(p, ",\"module\":", 10);
        p += 10;
        if (module != NULL) {
            p = tw_json_escape(p, module, module_len);
        } else {
            memcpy(p, "null", 4);
            p += 4;
        }
        *p++ = '}';
        *p++ = '\n';
    }
    return (size_t)(p - line);
}

/* ---- files ------------------------------------------------------------------------------------- */

static void warn_once(tw_writer_t *w, const char *what, const char *path, int err)
{
    pthread_mutex_lock(&w->lock);
    int first = w->write_errno == 0;
    if (first)
        w->write_errno = err;
    pthread_mutex_unlock(&w->lock);
    if (first)
        fprintf(stderr, "torchwrapper: %s %s failed: %s; the records concerned are dropped and counted in "
                        "the manifest, and the program goes on\n", what, path, strerror(err));
}

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EIO;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Writes the buffered output of fs's current file. */
static void flush_buffer(tw_writer_t *w, fileset_t *fs)
{
    if (fs->buf_len == 0)
        return;
    int err = fs->fd >= 0 ? write_all(fs->fd, fs->buf, fs->buf_len) : EBADF;
    pthread_mutex_lock(&w->lock);
    if (err == 0) {
        fs->written += fs->buf_records;
        fs->bytes_total += fs->buf_len;
        if (fs->file_count > 0) {
            fs->files[fs->file_count - 1].records += fs->buf_records;
            fs->files[fs->file_count - 1].bytes += fs->buf_len;
        }
    } else {
        fs->dropped += fs->buf_records;
    }
    pthread_mutex_unlock(&w->lock);
    if (err != 0)
        warn_once(w, "writing", fs->file_count > 0 ? fs->files[fs->file_count - 1].name : w->out_dir, err);
    fs->buf_len = 0;
    fs->buf_records = 0;
}

static void close_file(tw_writer_t *w, fileset_t *fs)
{
    flush_buffer(w, fs);
    if (fs->fd >= 0) {
        if (close(fs->fd) != 0)
            warn_once(w, "closing", fs->files[fs->file_count - 1].name, errno);
        fs->fd = -1;
    }
}

static int path_join(char *out, size_t size, const char *dir, const char *name)
{
    int n = snprintf(out, size, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= size ? TW_ERANGE : 0;
}

static void write_manifest(tw_writer_t *w);

/* Keeps only the newest max_files files of fs (the current one included). */
static void enforce_max_files(tw_writer_t *w, fileset_t *fs)
{
    if (w->max_files == 0)
        return;
    for (size_t i = 0; i < fs->file_count && fs->kept > w->max_files; i++) {
        if (fs->files[i].removed)
            continue;
        char path[PATH_MAX];
        if (path_join(path, sizeof path, w->out_dir, fs->files[i].name) == 0 && unlink(path) != 0 &&
            errno != ENOENT)
            warn_once(w, "removing", path, errno);
        pthread_mutex_lock(&w->lock);
        fs->files[i].removed = 1;
        pthread_mutex_unlock(&w->lock);
        fs->kept--;
    }
}

/*
 * The name of fs's next file: the call records' name, with ".KIND" before the extension for a
 * stream (tw-...-0001.csv, tw-...-0001.gpu.csv). Returns 0 or ENAMETOOLONG.
 */
static int next_name(tw_writer_t *w, fileset_t *fs, char *name, size_t size)
{
    const char *ext = w->format == TW_FORMAT_CSV ? ".csv" : ".jsonl";
    tw_name_fields_t fields = {realtime_ns(), w->pid, w->pid, w->rank, ++fs->index, w->host};
    int n = tw_name_expand(w->spec, &fields, ext, name, size);
    if (n < 0)
        return ENAMETOOLONG;
    if (fs == &w->calls)
        return 0;
    /* The expansion ends with ext (tw_name_expand sees to it): put the kind before it. */
    size_t stem = (size_t)n - strlen(ext);
    int m = snprintf(name + stem, size - stem, ".%s%s", fs->kind, ext);
    return m < 0 || (size_t)m >= size - stem ? ENAMETOOLONG : 0;
}

/* Opens fs's next file: a new name (never an existing file, never through a symlink). */
static int open_next_file(tw_writer_t *w, fileset_t *fs)
{
    close_file(w, fs);
    if (fs->file_count == fs->file_capacity) {
        size_t capacity = fs->file_capacity ? 2 * fs->file_capacity : 16;
        pthread_mutex_lock(&w->lock); /* the manifest reads the list under it */
        file_entry_t *files = realloc(fs->files, capacity * sizeof *files);
        if (files != NULL) {
            fs->files = files;
            fs->file_capacity = capacity;
        }
        pthread_mutex_unlock(&w->lock);
        if (files == NULL)
            return ENOMEM;
    }
    char name[NAME_MAX + 1], path[PATH_MAX];
    for (int attempt = 0; attempt < 10000; attempt++) {
        if (next_name(w, fs, name, sizeof name) != 0 || path_join(path, sizeof path, w->out_dir, name) != 0)
            return ENAMETOOLONG;
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) {
            /* A name in use (another process, same second): the next index. A symbolic link there
             * is refused too (O_NOFOLLOW), never followed; it is counted and said once. */
            struct stat st;
            int planted = lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
            pthread_mutex_lock(&w->lock);
            w->names_skipped++;
            int first_link = planted && w->links_refused++ == 0;
            pthread_mutex_unlock(&w->lock);
            if (first_link)
                fprintf(stderr, "torchwrapper: %s is a symbolic link: not followed, not written; records go to the "
                                "next file name (counted in the manifest: file_names_skipped)\n", path);
            continue;
        }
        if (fd < 0)
            return errno;
        char *copy = strdup(name);
        if (copy == NULL) {
            close(fd);
            unlink(path);
            return ENOMEM;
        }
        fs->fd = fd;
        pthread_mutex_lock(&w->lock);
        fs->files[fs->file_count++] = (file_entry_t){copy, 0, 0, 0};
        pthread_mutex_unlock(&w->lock);
        fs->kept++;
        fs->file_bytes = 0;
        if (fs->header != NULL) {
            /* Written at once, so that every CSV file on disk starts with its header. */
            int err = write_all(fd, fs->header, fs->header_len);
            if (err != 0)
                warn_once(w, "writing", path, err);
            fs->file_bytes = fs->header_len;
            pthread_mutex_lock(&w->lock);
            if (err == 0) {
                fs->files[fs->file_count - 1].bytes = fs->header_len;
                fs->bytes_total += fs->header_len;
            }
            pthread_mutex_unlock(&w->lock);
        }
        enforce_max_files(w, fs);
        write_manifest(w);
        return 0;
    }
    return EEXIST;
}

/* Appends one formatted line to fs, rotating first when it would take the file past the cap. */
static void append_line(tw_writer_t *w, fileset_t *fs, const char *line, size_t len)
{
    if (fs->fd < 0 || fs->file_bytes + len > w->max_size) {
        int err = open_next_file(w, fs);
        if (err != 0) {
            warn_once(w, "creating a record file in", w->out_dir, err);
            pthread_mutex_lock(&w->lock);
            fs->dropped++;
            pthread_mutex_unlock(&w->lock);
            return;
        }
    }
    if (fs->buf_len + len > BUFFER_FLUSH)
        flush_buffer(w, fs);
    memcpy(fs->buf + fs->buf_len, line, len);
    fs->buf_len += len;
    fs->buf_records++;
    fs->file_bytes += len;
}

static void write_chunk(tw_writer_t *w, tw_chunk_t *chunk)
{
    char line[TW_LINE_MAX];
    size_t room = w->max_size - w->calls.header_len;
    for (uint32_t i = 0; i < chunk->count; i++) {
        const tw_record_t *r = &chunk->records[i];
        size_t len = format_record(w, chunk, r, line, TW_ARGS_MAX);
        if (len > room) {
            /* Larger than a whole file: cut its argument text until it fits, and count it. */
            size_t args_max = r->args_len;
            while (len > room && args_max > 0) {
                args_max = args_max > 64 ? args_max - 64 : 0;
                len = format_record(w, chunk, r, line, args_max);
            }
            pthread_mutex_lock(&w->lock);
            w->truncated++;
            pthread_mutex_unlock(&w->lock);
        }
        append_line(w, &w->calls, line, len);
        tw_stats_add(&w->stats, r->api_id, tw_clock_duration_ns(&w->clock, r->cost),
                     tw_clock_duration_ns(&w->clock, r->self), r->gpu_ns, (r->flags & TW_RECORD_ERROR) != 0);
    }
}

/*
 * Takes the rows queued on s (swapping its queue with the spare one, so that writers wait only for
 * the swap) and writes them to s's files.
 */
static void write_stream(tw_writer_t *w, tw_writer_stream_t *s)
{
    pthread_mutex_lock(&s->lock);
    char *rows = s->queue;
    size_t len = s->queue_len, capacity = s->queue_capacity;
    s->queue = s->spare;
    s->queue_capacity = s->spare_capacity;
    s->queue_len = 0;
    s->kicked = 0;
    s->spare = rows;
    s->spare_capacity = capacity;
    pthread_mutex_unlock(&s->lock);
    for (size_t at = 0; at < len;) {
        queued_row_t h;
        memcpy(&h, rows + at, sizeof h);
        at += sizeof h;
        append_line(w, &s->files, rows + at, h.len);
        if (h.api_id != TW_API_ID_NONE)
            tw_stats_add_gpu(&w->stats, h.api_id, h.gpu_ns);
        at += (h.len + 7) & ~(size_t)7;
    }
}

/* ---- manifest and summary (cJSON; int64 values written exactly as raw numbers) ----------------- */

static cJSON *raw_int(int64_t v)
{
    char text[24];
    snprintf(text, sizeof text, "%lld", (long long)v);
    return cJSON_CreateRaw(text);
}

static int write_json_atomically(tw_writer_t *w, const char *path, cJSON *root)
{
    char *text = cJSON_Print(root);
    if (text == NULL)
        return ENOMEM;
    char tmp[PATH_MAX];
    int err = 0;
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%lld", path, (long long)w->pid) >= (int)sizeof tmp) {
        free(text);
        return ENAMETOOLONG;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = errno;
    } else {
        err = write_all(fd, text, strlen(text));
        if (err == 0)
            err = write_all(fd, "\n", 1);
        if (close(fd) != 0 && err == 0)
            err = errno;
        if (err == 0 && rename(tmp, path) != 0)
            err = errno;
        if (err != 0)
            unlink(tmp);
    }
    free(text);
    return err;
}

/* Lists fs's files in the manifest's array; the writer's lock held. */
static void add_files(cJSON *files, const fileset_t *fs)
{
    for (size_t i = 0; files != NULL && i < fs->file_count; i++) {
        cJSON *f = cJSON_CreateObject();
        if (f == NULL)
            return;
        cJSON_AddStringToObject(f, "name", fs->files[i].name);
        cJSON_AddStringToObject(f, "kind", fs->kind);
        cJSON_AddItemToObject(f, "records", raw_int((int64_t)fs->files[i].records));
        cJSON_AddItemToObject(f, "bytes", raw_int((int64_t)fs->files[i].bytes));
        if (fs->files[i].removed)
            cJSON_AddTrueToObject(f, "removed_by_max_files");
        cJSON_AddItemToArray(files, f);
    }
}

static void write_manifest(tw_writer_t *w)
{
    cJSON *root = NULL;
    if (w->manifest_extra != NULL)
        root = cJSON_Parse(w->manifest_extra);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        root = cJSON_CreateObject();
    }
    if (root == NULL)
        return;
    tw_recorder_stats_t rs;
    tw_recorder_stats(w->rec, &rs);
    cJSON_AddItemToObject(root, "manifest_version", raw_int(1));
    cJSON_AddStringToObject(root, "torchwrapper", tw_version());
    cJSON_AddStringToObject(root, "format", w->format == TW_FORMAT_CSV ? "csv" : "json");
    cJSON_AddStringToObject(root, "host", w->host);
    cJSON_AddItemToObject(root, "pid", raw_int(w->pid));
    if (w->rank >= 0)
        cJSON_AddItemToObject(root, "rank", raw_int(w->rank));
    cJSON_AddItemToObject(root, "start_ns", raw_int(w->start_ns));
    cJSON_AddItemToObject(root, "end_ns", w->end_ns ? raw_int(w->end_ns) : cJSON_CreateNull());
    cJSON_AddItemToObject(root, "file_max_size", raw_int((int64_t)w->max_size));
    cJSON_AddStringToObject(root, "clock", w->clock.source == TW_CLOCK_TSC ? "tsc" : "monotonic");
    /* Every file of every kind, oldest first per kind: call records ("calls") first, then each
     * stream's ("gpu", ...). */
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    cJSON *streams = cJSON_CreateObject();
    pthread_mutex_lock(&w->lock);
    uint64_t written = w->calls.written, dropped = w->calls.dropped + rs.dropped, truncated = w->truncated;
    uint64_t bytes = w->calls.bytes_total;
    int write_errno = w->write_errno;
    add_files(files, &w->calls);
    for (tw_writer_stream_t *s = w->streams; s != NULL; s = s->next) {
        add_files(files, &s->files);
        cJSON *o = streams != NULL ? cJSON_CreateObject() : NULL;
        if (o == NULL)
            continue;
        uint64_t upstream = atomic_load(&s->dropped_upstream);
        cJSON_AddItemToObject(o, "records_written", raw_int((int64_t)s->files.written));
        cJSON_AddItemToObject(o, "records_dropped",
                              raw_int((int64_t)(s->files.dropped + atomic_load(&s->dropped_full) + upstream)));
        cJSON_AddItemToObject(o, "records_lost_upstream", raw_int((int64_t)upstream));
        cJSON_AddItemToObject(o, "bytes_written", raw_int((int64_t)s->files.bytes_total));
        cJSON_AddItemToObject(streams, s->kind, o);
    }
    pthread_mutex_unlock(&w->lock);
    cJSON_AddItemToObject(root, "records_written", raw_int((int64_t)written));
    cJSON_AddItemToObject(root, "records_dropped", raw_int((int64_t)dropped));
    cJSON_AddItemToObject(root, "records_truncated", raw_int((int64_t)truncated));
    pthread_mutex_lock(&w->lock);
    int64_t skipped = (int64_t)w->names_skipped, links = (int64_t)w->links_refused;
    pthread_mutex_unlock(&w->lock);
    cJSON_AddItemToObject(root, "file_names_skipped", raw_int(skipped));
    cJSON_AddItemToObject(root, "symlinks_refused", raw_int(links));
    cJSON_AddItemToObject(root, "bytes_written", raw_int((int64_t)bytes));
    if (streams != NULL)
        cJSON_AddItemToObject(root, "streams", streams);
    if (write_errno != 0)
        cJSON_AddStringToObject(root, "write_error", strerror(write_errno));
    else
        cJSON_AddNullToObject(root, "write_error");
    int err = write_json_atomically(w, w->manifest_path, root);
    cJSON_Delete(root);
    if (err != 0)
        warn_once(w, "writing", w->manifest_path, err);
}

static int compare_total_desc(const void *a, const void *b, void *arg)
{
    (void)arg;
    const tw_api_stats_t *x = *(tw_api_stats_t *const *)a, *y = *(tw_api_stats_t *const *)b;
    return x->total_ns < y->total_ns ? 1 : x->total_ns > y->total_ns ? -1 : 0;
}

static void write_summary(tw_writer_t *w)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *apis = root ? cJSON_AddArrayToObject(root, "apis") : NULL;
    tw_api_stats_t **order = calloc(w->stats.capacity ? w->stats.capacity : 1, sizeof *order);
    if (apis == NULL || order == NULL) {
        cJSON_Delete(root);
        free(order);
        return;
    }
    size_t n = 0;
    for (uint32_t id = 0; id < w->stats.capacity; id++)
        if (w->stats.apis[id].calls > 0 || w->stats.apis[id].gpu_ns > 0) /* GPU time of a call whose
                                                                             record was lost counts */
            order[n++] = &w->stats.apis[id];
    qsort_r(order, n, sizeof *order, compare_total_desc, NULL);
    for (size_t i = 0; i < n; i++) {
        const tw_api_stats_t *a = order[i];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL)
            break;
        const char *name = tw_api_name((uint32_t)(a - w->stats.apis));
        cJSON_AddStringToObject(o, "api", name ? name : "?");
        cJSON_AddItemToObject(o, "calls", raw_int((int64_t)a->calls));
        cJSON_AddItemToObject(o, "errors", raw_int((int64_t)a->errors));
        cJSON_AddItemToObject(o, "total_ns", raw_int((int64_t)a->total_ns));
        cJSON_AddItemToObject(o, "self_ns", raw_int((int64_t)a->self_ns));
        cJSON_AddItemToObject(o, "gpu_ns", raw_int((int64_t)a->gpu_ns));
        cJSON_AddItemToObject(o, "min_ns", raw_int((int64_t)a->min_ns));
        cJSON_AddItemToObject(o, "max_ns", raw_int((int64_t)a->max_ns));
        cJSON_AddItemToObject(o, "mean_ns", raw_int(a->calls ? (int64_t)(a->total_ns / a->calls) : 0));
        cJSON_AddItemToObject(o, "p50_ns", raw_int((int64_t)tw_stats_percentile(a, 0.50)));
        cJSON_AddItemToObject(o, "p95_ns", raw_int((int64_t)tw_stats_percentile(a, 0.95)));
        cJSON_AddItemToObject(o, "p99_ns", raw_int((int64_t)tw_stats_percentile(a, 0.99)));
        cJSON_AddItemToArray(apis, o);
    }
    free(order);
    int err = write_json_atomically(w, w->summary_path, root);
    cJSON_Delete(root);
    if (err != 0)
        warn_once(w, "writing", w->summary_path, err);
}

/* ---- the thread -------------------------------------------------------------------------------- */

/* The lock and the condition variables. The writer's timed wait computes its deadline on
 * CLOCK_MONOTONIC (immune to clock changes), so `work` must wait on that clock too: with the default
 * (CLOCK_REALTIME) every deadline lies decades in the past and the thread spins. */
static void init_sync(tw_writer_t *w)
{
    pthread_mutex_init(&w->lock, NULL);
    tw_cond_init_monotonic(&w->work);
    pthread_cond_init(&w->room, NULL);
}

static void *writer_main(void *arg)
{
    tw_writer_t *w = arg;
    uint64_t next_flush = monotonic_ns() + w->flush_interval_ns;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->head == NULL && !w->stopping && !w->streams_kicked) {
            uint64_t now = monotonic_ns();
            if (now >= next_flush)
                break;
            struct timespec deadline;
            clock_gettime(CLOCK_MONOTONIC, &deadline);
            uint64_t wait = next_flush - now;
            deadline.tv_sec += (time_t)(wait / 1000000000u);
            deadline.tv_nsec += (long)(wait % 1000000000u);
            if (deadline.tv_nsec >= 1000000000) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&w->work, &w->lock, &deadline);
            w->wakeups++;
        }
        tw_chunk_t *list = w->head;
        w->head = w->tail = NULL;
        w->queued = 0;
        w->streams_kicked = 0;
        int stop = w->stopping && list == NULL;
        tw_writer_stream_t *streams = w->streams;
        pthread_cond_broadcast(&w->room);
        pthread_mutex_unlock(&w->lock);

        while (list != NULL) {
            tw_chunk_t *next = list->next;
            write_chunk(w, list);
            tw_chunk_release(list);
            list = next;
        }
        for (tw_writer_stream_t *s = streams; s != NULL; s = s->next)
            write_stream(w, s);
        uint64_t now = monotonic_ns();
        if (now >= next_flush || stop) {
            flush_buffer(w, &w->calls);
            for (tw_writer_stream_t *s = streams; s != NULL; s = s->next)
                flush_buffer(w, &s->files);
            /* Ask recording threads for their partial chunks, so that nothing older than about
             * one interval waits in memory (their next call hands the chunk over). */
            tw_recorder_request_flush(w->rec);
            next_flush = now + w->flush_interval_ns;
        }
        pthread_mutex_lock(&w->lock);
        if (stop)
            break;
    }
    tw_writer_stream_t *streams = w->streams;
    pthread_mutex_unlock(&w->lock);
    close_file(w, &w->calls);
    for (tw_writer_stream_t *s = streams; s != NULL; s = s->next)
        close_file(w, &s->files);
    return NULL;
}

/* Starts the thread with every signal blocked, so that SIGINT and SIGTERM reach the program's own
 * threads. Lock held. */
static int start_thread(tw_writer_t *w)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&w->thread, NULL, writer_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err == 0)
        w->thread_running = 1;
    return err;
}

/* ---- live writers, for fork handling ------------------------------------------------------------- */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static tw_writer_t *live_writers;

/* Lock order: the writer's lock, then each stream's (a stream's writer never holds its lock while
 * taking the writer's). */
void tw_writer_fork_prepare(tw_writer_t *w)
{
    pthread_mutex_lock(&w->lock);
    for (tw_writer_stream_t *s = w->streams; s != NULL; s = s->next)
        pthread_mutex_lock(&s->lock);
}

void tw_writer_fork_parent(tw_writer_t *w)
{
    for (tw_writer_stream_t *s = w->streams; s != NULL; s = s->next)
        pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&w->lock);
}

/* A file set in a forked child: the parent's open file and buffered output stay the parent's. */
static void fileset_fork_child(fileset_t *fs)
{
    if (fs->fd >= 0)
        close(fs->fd);
    fs->fd = -1;
    for (size_t i = 0; i < fs->file_count; i++)
        free(fs->files[i].name);
    fs->file_count = 0;
    fs->kept = 0;
    fs->index = 0;
    fs->buf_len = 0;
    fs->buf_records = 0;
    fs->written = fs->dropped = fs->bytes_total = 0;
}

/*
 * In the child of a fork: the writer thread does not exist there, the queued chunks and rows and
 * the buffered output are the parent's (the parent writes them), and so are the open files. The
 * child starts afresh, with its own files and manifest, and a thread started at its first chunk.
 */
void tw_writer_fork_child(tw_writer_t *w)
{
    for (tw_writer_stream_t *s = w->streams; s != NULL; s = s->next) {
        pthread_mutex_unlock(&s->lock);
        pthread_mutex_init(&s->lock, NULL);
        s->queue_len = 0;
        s->kicked = 0;
        atomic_store(&s->dropped_full, 0);
        atomic_store(&s->dropped_upstream, 0);
        fileset_fork_child(&s->files);
    }
    pthread_mutex_unlock(&w->lock);
    init_sync(w);
    for (tw_chunk_t *c = w->head, *next; c != NULL; c = next) {
        next = c->next;
        tw_chunk_release(c);
    }
    w->head = w->tail = NULL;
    w->queued = 0;
    w->thread_running = 0;
    w->streams_kicked = 0;
    fileset_fork_child(&w->calls);
    w->truncated = 0;
    w->write_errno = 0;
    tw_stats_free(&w->stats);
    tw_stats_init(&w->stats);
    w->pid = getpid();
    w->fork_child = 1;
    w->start_ns = realtime_ns();
    snprintf(w->manifest_path, sizeof w->manifest_path, "%s/manifest-%lld.json", w->out_dir, (long long)w->pid);
    snprintf(w->summary_path, sizeof w->summary_path, "%s/summary-%lld.json", w->out_dir, (long long)w->pid);
}

/* ---- public API ---------------------------------------------------------------------------------- */

int tw_writer_create(const tw_writer_config_t *config, tw_recorder_t *rec, const tw_clock_t *clock,
                     tw_writer_t **out, char *err, size_t err_size)
{
    if (config == NULL || rec == NULL || clock == NULL || out == NULL || config->out_dir == NULL ||
        config->out_dir[0] == '\0') {
        snprintf(err, err_size, "out_dir is missing");
        return TW_EINVAL;
    }
    if (config->format != TW_FORMAT_CSV && config->format != TW_FORMAT_JSON) {
        snprintf(err, err_size, "format %d is not csv or json", (int)config->format);
        return TW_EINVAL;
    }
    if (config->file_max_size < MIN_FILE_SIZE) {
        snprintf(err, err_size, "file_max_size %llu bytes is too small: at least %d bytes are needed for a "
                                "header and any record", (unsigned long long)config->file_max_size, MIN_FILE_SIZE);
        return TW_EINVAL;
    }
    const char *spec = config->file_name_spec ? config->file_name_spec : "timestamp";
    if (tw_name_spec_check(spec, err, err_size) != 0)
        return TW_EINVAL;
    if (mkdir(config->out_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, err_size, "out_dir '%s' cannot be created: %s", config->out_dir, strerror(errno));
        return TW_EIO;
    }
    struct stat st;
    if (stat(config->out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, err_size, "out_dir '%s' is not a directory", config->out_dir);
        return TW_EIO;
    }
    if (access(config->out_dir, W_OK | X_OK) != 0) {
        snprintf(err, err_size, "out_dir '%s' is not writable: %s", config->out_dir, strerror(errno));
        return TW_EIO;
    }
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
        fprintf(stderr, "torchwrapper: warning: out_dir '%s' is writable by every user and has no sticky bit: "
                        "others can delete or replace the record files (chmod o-w or +t)\n", config->out_dir);
    tw_writer_t *w = calloc(1, sizeof *w);
    if (w == NULL || (w->calls.buf = malloc(BUFFER_FLUSH + TW_LINE_MAX)) == NULL) {
        free(w);
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    w->out_dir = strdup(config->out_dir);
    w->spec = strdup(spec);
    w->manifest_extra = config->manifest_json ? strdup(config->manifest_json) : NULL;
    if (w->out_dir == NULL || w->spec == NULL || (config->manifest_json && w->manifest_extra == NULL)) {
        free(w->out_dir);
        free(w->spec);
        free(w->manifest_extra);
        free(w->calls.buf);
        free(w);
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    w->format = config->format;
    w->max_size = config->file_max_size;
    w->max_files = config->max_files;
    w->flush_interval_ns = config->flush_interval_ns ? config->flush_interval_ns : 1000000000u;
    uint64_t buffer_bytes = config->buffer_bytes ? config->buffer_bytes : DEFAULT_BUFFER_BYTES;
    w->buffer_bytes = buffer_bytes;
    w->max_chunks = buffer_bytes / (sizeof(tw_chunk_t) + TW_CHUNK_RECORDS * sizeof(tw_record_t));
    if (w->max_chunks < 2)
        w->max_chunks = 2;
    w->block_when_full = config->block_when_full;
    w->rank = config->rank;
    w->clock = *clock;
    w->rec = rec;
    w->calls.kind = "calls";
    w->calls.fd = -1;
    if (w->format == TW_FORMAT_CSV) {
        w->calls.header = CSV_HEADER;
        w->calls.header_len = sizeof CSV_HEADER - 1;
    }
    w->pid = getpid();
    w->start_ns = realtime_ns();
    if (gethostname(w->host, sizeof w->host - 1) != 0)
        strcpy(w->host, "localhost");
    tw_stats_init(&w->stats);
    init_sync(w);
    char suffix[32] = "";
    if (config->per_process_names)
        snprintf(suffix, sizeof suffix, "-%lld", (long long)w->pid);
    if (snprintf(w->manifest_path, sizeof w->manifest_path, "%s/manifest%s.json", w->out_dir, suffix) >=
            (int)sizeof w->manifest_path ||
        snprintf(w->summary_path, sizeof w->summary_path, "%s/summary%s.json", w->out_dir, suffix) >=
            (int)sizeof w->summary_path) {
        snprintf(err, err_size, "out_dir '%s' is too long", config->out_dir);
        tw_writer_destroy(w);
        return TW_EINVAL;
    }
    pthread_mutex_lock(&w->lock);
    int thread_err = start_thread(w);
    pthread_mutex_unlock(&w->lock);
    if (thread_err != 0) {
        snprintf(err, err_size, "cannot start the writer thread: %s", strerror(thread_err));
        tw_writer_destroy(w);
        return TW_EIO;
    }
    pthread_mutex_lock(&live_lock);
    w->next_live = live_writers;
    live_writers = w;
    pthread_mutex_unlock(&live_lock);
    tw_recorder_set_writer(rec, w);
    *out = w;
    return 0;
}

void tw_writer_enqueue(tw_writer_t *w, tw_chunk_t *chunk)
{
    pthread_mutex_lock(&w->lock);
    if (!w->thread_running && !w->closed && start_thread(w) != 0) {
        w->calls.dropped += chunk->count;
        pthread_mutex_unlock(&w->lock);
        tw_chunk_release(chunk);
        return;
    }
    tw_chunk_append(&w->head, &w->tail, chunk);
    w->queued++;
    pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->lock);
}

int tw_writer_admit(tw_writer_t *w)
{
    int ok = 1;
    pthread_mutex_lock(&w->lock);
    if (w->queued >= w->max_chunks) {
        if (w->block_when_full && w->thread_running) {
            while (w->queued >= w->max_chunks && !w->stopping)
                pthread_cond_wait(&w->room, &w->lock);
        } else {
            ok = 0;
        }
    }
    pthread_mutex_unlock(&w->lock);
    return ok;
}

int tw_writer_close(tw_writer_t *w)
{
    /* Rows written to a stream from now on are refused and counted: the last drain is below. */
    for (tw_writer_stream_t *s = streams_head(w); s != NULL; s = s->next) {
        pthread_mutex_lock(&s->lock);
        s->closed = 1;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_lock(&w->lock);
    if (w->closed) {
        pthread_mutex_unlock(&w->lock);
        return w->write_errno ? TW_EIO : 0;
    }
    if (!w->thread_running && start_thread(w) != 0) {
        /* cannot happen in practice; write on this thread instead */
        w->stopping = 1;
        pthread_mutex_unlock(&w->lock);
        writer_main(w);
        pthread_mutex_lock(&w->lock);
    } else {
        w->stopping = 1;
        pthread_cond_broadcast(&w->work);
        pthread_cond_broadcast(&w->room);
        pthread_mutex_unlock(&w->lock);
        pthread_join(w->thread, NULL);
        pthread_mutex_lock(&w->lock);
        w->thread_running = 0;
    }
    w->closed = 1;
    pthread_mutex_unlock(&w->lock);
    tw_recorder_set_writer(w->rec, NULL);
    w->end_ns = realtime_ns();
    write_summary(w);
    write_manifest(w);
    pthread_mutex_lock(&live_lock);
    for (tw_writer_t **p = &live_writers; *p != NULL; p = &(*p)->next_live) {
        if (*p == w) {
            *p = w->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&live_lock);
    return w->write_errno ? TW_EIO : 0;
}

static void fileset_free(fileset_t *fs)
{
    for (size_t i = 0; i < fs->file_count; i++)
        free(fs->files[i].name);
    free(fs->files);
    free(fs->buf);
}

void tw_writer_destroy(tw_writer_t *w)
{
    if (w == NULL)
        return;
    if (w->thread_running)
        tw_writer_close(w);
    for (tw_chunk_t *c = w->head, *next; c != NULL; c = next) {
        next = c->next;
        tw_chunk_release(c);
    }
    for (tw_writer_stream_t *s = w->streams, *next; s != NULL; s = next) {
        next = s->next;
        fileset_free(&s->files);
        free((char *)s->files.header);
        free(s->queue);
        free(s->spare);
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
    fileset_free(&w->calls);
    tw_stats_free(&w->stats);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->work);
    pthread_cond_destroy(&w->room);
    free(w->out_dir);
    free(w->spec);
    free(w->manifest_extra);
    free(w);
}

void tw_writer_stats(tw_writer_t *w, tw_writer_stats_t *stats)
{
    pthread_mutex_lock(&w->lock);
    stats->records_written = w->calls.written;
    stats->records_dropped = w->calls.dropped;
    stats->records_truncated = w->truncated;
    stats->bytes_written = w->calls.bytes_total;
    stats->write_errno = w->write_errno;
    stats->wakeups = w->wakeups;
    stats->file_names_skipped = w->names_skipped;
    stats->symlinks_refused = w->links_refused;
    pthread_mutex_unlock(&w->lock);
}

const char *tw_writer_manifest_path(tw_writer_t *w)
{
    return w->manifest_path;
}

tw_format_t tw_writer_format(const tw_writer_t *w)
{
    return w->format;
}

/* ---- extra record streams ------------------------------------------------------------------------ */

static tw_writer_stream_t *streams_head(tw_writer_t *w)
{
    pthread_mutex_lock(&w->lock);
    tw_writer_stream_t *s = w->streams;
    pthread_mutex_unlock(&w->lock);
    return s;
}

static int kind_ok(const char *kind)
{
    size_t n = kind != NULL ? strlen(kind) : 0;
    if (n == 0 || n > TW_STREAM_KIND_MAX || strcmp(kind, "calls") == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((kind[i] >= 'a' && kind[i] <= 'z') || (kind[i] >= '0' && kind[i] <= '9') || kind[i] == '_'))
            return 0;
    return 1;
}

int tw_writer_add_stream(tw_writer_t *w, const char *kind, const char *csv_header, tw_writer_stream_t **out)
{
    if (w == NULL || out == NULL || !kind_ok(kind) || (w->format == TW_FORMAT_CSV && csv_header == NULL))
        return TW_EINVAL;
    size_t header_len = csv_header != NULL ? strlen(csv_header) : 0;
    if (w->format == TW_FORMAT_CSV && (header_len == 0 || header_len + 1 > MIN_FILE_SIZE / 2 ||
                                        memchr(csv_header, '\n', header_len - 1) != NULL))
        return TW_EINVAL;
    tw_writer_stream_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return TW_ENOMEM;
    char *header = NULL;
    if (w->format == TW_FORMAT_CSV) {
        /* One line, ending in '\n' whether or not the caller gave one. */
        int has_newline = csv_header[header_len - 1] == '\n';
        header = malloc(header_len + 2);
        if (header != NULL) {
            memcpy(header, csv_header, header_len);
            if (!has_newline)
                header[header_len++] = '\n';
            header[header_len] = '\0';
        }
    }
    s->files.buf = malloc(BUFFER_FLUSH + TW_STREAM_ROW_MAX);
    if (s->files.buf == NULL || (w->format == TW_FORMAT_CSV && header == NULL)) {
        free(s->files.buf);
        free(header);
        free(s);
        return TW_ENOMEM;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->w = w;
    strcpy(s->kind, kind);
    s->files.kind = s->kind;
    s->files.header = header;
    s->files.header_len = header_len;
    s->files.fd = -1;
    s->max_queued = w->buffer_bytes / 4 > STREAM_MIN_QUEUE ? w->buffer_bytes / 4 : STREAM_MIN_QUEUE;
    pthread_mutex_lock(&w->lock);
    int taken = w->closed;
    for (tw_writer_stream_t *o = w->streams; o != NULL && !taken; o = o->next)
        taken = strcmp(o->kind, kind) == 0;
    if (!taken) {
        /* Added at the head: the writer thread walks a list it read under the lock, whose links
         * never change afterwards. */
        s->next = w->streams;
        w->streams = s;
    }
    pthread_mutex_unlock(&w->lock);
    if (taken) {
        pthread_mutex_destroy(&s->lock);
        free(s->files.buf);
        free(header);
        free(s);
        return TW_EBUSY;
    }
    *out = s;
    return 0;
}

tw_format_t tw_writer_stream_format(const tw_writer_stream_t *s)
{
    return s->w->format;
}

int tw_writer_stream_write_gpu(tw_writer_stream_t *s, const char *row, size_t len, uint32_t api_id, uint64_t gpu_ns)
{
    size_t text = len > 0 && row[len - 1] == '\n' ? len : len + 1; /* one '\n' at the end */
    if (len == 0 || text > TW_STREAM_ROW_MAX || text > s->w->max_size - s->files.header_len ||
        memchr(row, '\n', text - 1) != NULL) {
        atomic_fetch_add(&s->dropped_full, 1);
        return TW_EINVAL;
    }
    size_t need = sizeof(queued_row_t) + ((text + 7) & ~(size_t)7);
    int kick = 0, rc = 0;
    pthread_mutex_lock(&s->lock);
    if (s->closed) {
        rc = TW_ENOTACTIVE;
    } else if (s->queue_len + need > s->max_queued) {
        rc = TW_EFULL;
    } else {
        if (s->queue_len + need > s->queue_capacity) {
            size_t capacity = s->queue_capacity ? s->queue_capacity : 64 * 1024;
            while (capacity < s->queue_len + need)
                capacity *= 2;
            if (capacity > s->max_queued)
                capacity = s->max_queued;
            char *queue = realloc(s->queue, capacity);
            if (queue == NULL) {
                rc = TW_ENOMEM;
            } else {
                s->queue = queue;
                s->queue_capacity = capacity;
            }
        }
        if (rc == 0) {
            queued_row_t h = {(uint32_t)text, api_id, gpu_ns};
            char *at = s->queue + s->queue_len;
            memcpy(at, &h, sizeof h);
            memcpy(at + sizeof h, row, len);
            at[sizeof h + text - 1] = '\n';
            s->queue_len += need;
            /* Past half of its bound, the writer is woken to drain it rather than at the next
             * flush interval. */
            if (!s->kicked && s->queue_len > s->max_queued / 2)
                kick = s->kicked = 1;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) {
        atomic_fetch_add(&s->dropped_full, 1);
        return rc;
    }
    if (kick) {
        pthread_mutex_lock(&s->w->lock);
        s->w->streams_kicked = 1;
        pthread_cond_signal(&s->w->work);
        pthread_mutex_unlock(&s->w->lock);
    }
    return 0;
}

int tw_writer_stream_write(tw_writer_stream_t *s, const char *row, size_t len)
{
    return tw_writer_stream_write_gpu(s, row, len, TW_API_ID_NONE, 0);
}

void tw_writer_stream_add_dropped(tw_writer_stream_t *s, uint64_t count)
{
    atomic_fetch_add(&s->dropped_upstream, count);
}

void tw_writer_stream_stats(tw_writer_stream_t *s, tw_writer_stream_stats_t *stats)
{
    tw_writer_t *w = s->w;
    pthread_mutex_lock(&w->lock);
    stats->records_written = s->files.written;
    stats->records_dropped = s->files.dropped;
    stats->bytes_written = s->files.bytes_total;
    pthread_mutex_unlock(&w->lock);
    stats->records_dropped += atomic_load(&s->dropped_full);
    stats->records_lost_upstream = atomic_load(&s->dropped_upstream);
    stats->records_dropped += stats->records_lost_upstream;
}
