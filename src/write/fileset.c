/* SPDX-License-Identifier: MIT */
/*
 * Rotating file sets: file names (file_name_spec), O_EXCL | O_NOFOLLOW creation, rotation before
 * file_max_size, the oldest files removed past max_files and max_total_size, buffered writes
 * (deflated into gzip members with compress "gzip") and the first write error. See fileset.h.
 */
#include "config.h"
#include "fileset.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "torchwrapper/config_keys.h"

void tw_fileset_warn(tw_fileset_env_t *env, const char *what, const char *path, int err)
{
    pthread_mutex_lock(env->lock);
    int first = env->write_errno == 0;
    if (first)
        env->write_errno = -err;
    pthread_mutex_unlock(env->lock);
    if (first)
        fprintf(stderr, "torchwrapper: %s %s failed: %s; the records concerned are dropped and counted in "
                        "the manifest, and the program goes on\n", what, path, tw_strerror(err));
}

int tw_write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---- gzip members ------------------------------------------------------------------------------ */

#define GZ_HEADER 10           /* the gzip header zlib writes (no name, no time) */
#define GZ_END 16              /* finishing a member: a last empty block (2 bytes) and the CRC and
                                * length (8), with room to spare */
#define Z_OUT_SIZE (64 * 1024) /* deflate's output, written each time it fills */

/* The most n bytes of lines can deflate to in one deflate() call ending in a sync point: stored
 * blocks at worst, 5 bytes for each of at most 16 KiB (zlib's deflateBound counts n >> 12 + n >> 14
 * + n >> 25 + 7), the sync point's empty stored block (5 bytes) and the bits the call before left. */
static uint64_t gz_bound(uint64_t n)
{
    return n + (n >> 11) + 16;
}

uint64_t tw_fileset_room(const tw_fileset_env_t *env, const tw_fileset_t *fs)
{
    if (env->compress == TW_COMPRESS_NONE)
        return env->max_size > fs->header_len ? env->max_size - fs->header_len : 0;
    uint64_t member = GZ_HEADER + gz_bound(fs->header_len) + GZ_END;
    if (env->max_size <= member + 16)
        return 0;
    uint64_t left = env->max_size - member - 16; /* gz_bound(n) <= left */
    return left - (left >> 11) - 1;
}

/* Whether a line of len bytes fits in fs's current file. */
static int line_fits(const tw_fileset_env_t *env, const tw_fileset_t *fs, size_t len)
{
    if (env->compress == TW_COMPRESS_NONE)
        return fs->file_bytes + len <= env->max_size;
    return fs->file_bytes + gz_bound(fs->buf_len + len) + GZ_END <= env->max_size;
}

/* Deflates data into fs's current member with flush (Z_SYNC_FLUSH, Z_FINISH), writing what comes
 * out; *written receives the bytes written. 0 or a negative errno value. */
static int deflate_out(tw_fileset_t *fs, const char *data, size_t len, int flush, uint64_t *written)
{
    z_stream *z = fs->z;
    *written = 0;
    z->next_in = (unsigned char *)(uintptr_t)data;
    z->avail_in = (uInt)len;
    int rc;
    do {
        z->next_out = fs->z_out;
        z->avail_out = Z_OUT_SIZE;
        rc = deflate(z, flush);
        if (rc == Z_STREAM_ERROR)
            return -EINVAL;
        size_t have = Z_OUT_SIZE - z->avail_out;
        int err = have > 0 ? tw_write_all(fs->fd, (const char *)fs->z_out, have) : 0;
        if (err != 0)
            return err;
        *written += have;
    } while (z->avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    return 0;
}

/* Starts a member in the file just opened: zlib's state (made at the first file, reset after), and
 * the header with a sync point after it, on disk at once (CSV: every file on disk starts with its
 * header; JSON: the gzip header alone). Returns the bytes written, or a negative errno value. */
static int64_t gz_begin(tw_fileset_t *fs)
{
    if (fs->z == NULL) {
        z_stream *z = calloc(1, sizeof *z);
        unsigned char *out = z != NULL ? malloc(Z_OUT_SIZE) : NULL;
        if (out == NULL || deflateInit2(z, TW_GZIP_LEVEL, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            free(out);
            free(z);
            return TW_ENOMEM;
        }
        fs->z = z;
        fs->z_out = out;
    } else if (deflateReset(fs->z) != Z_OK) {
        return -EINVAL;
    }
    fs->z_failed = 0;
    uint64_t written;
    int err = deflate_out(fs, fs->header != NULL ? fs->header : "", fs->header != NULL ? fs->header_len : 0,
                          Z_SYNC_FLUSH, &written);
    return err != 0 ? err : (int64_t)written;
}

/* Writes the buffered output of fs's current file: as it is, or deflated up to a sync point. */
void tw_fileset_flush(tw_fileset_env_t *env, tw_fileset_t *fs)
{
    if (fs->buf_len == 0)
        return;
    uint64_t bytes = fs->buf_len;
    int err;
    if (fs->fd < 0)
        err = -EBADF;
    else if (env->compress == TW_COMPRESS_NONE)
        err = tw_write_all(fs->fd, fs->buf, fs->buf_len);
    else if ((err = fs->z_failed ? -EIO : deflate_out(fs, fs->buf, fs->buf_len, Z_SYNC_FLUSH, &bytes)) == 0)
        fs->file_bytes += bytes;
    else
        fs->z_failed = 1; /* the member has a hole now: the next line goes to a new file */
    pthread_mutex_lock(env->lock);
    if (err == 0) {
        fs->written += fs->buf_records;
        fs->bytes_total += bytes;
        if (fs->file_count > 0) {
            fs->files[fs->file_count - 1].records += fs->buf_records;
            fs->files[fs->file_count - 1].bytes += bytes;
        }
    } else {
        fs->dropped += fs->buf_records;
    }
    pthread_mutex_unlock(env->lock);
    if (err != 0)
        tw_fileset_warn(env, "writing", fs->file_count > 0 ? fs->files[fs->file_count - 1].name : env->out_dir, err);
    fs->buf_len = 0;
    fs->buf_records = 0;
}

void tw_fileset_close(tw_fileset_env_t *env, tw_fileset_t *fs)
{
    tw_fileset_flush(env, fs);
    if (fs->fd < 0)
        return;
    tw_file_entry_t *file = &fs->files[fs->file_count - 1];
    int complete = 0;
    if (env->compress != TW_COMPRESS_NONE && !fs->z_failed) {
        /* The member's end: a last empty block, the CRC and the length. */
        uint64_t bytes;
        int err = deflate_out(fs, "", 0, Z_FINISH, &bytes);
        if (err != 0)
            tw_fileset_warn(env, "writing", file->name, err);
        pthread_mutex_lock(env->lock);
        if (err == 0) {
            file->bytes += bytes;
            fs->bytes_total += bytes;
        }
        pthread_mutex_unlock(env->lock);
        complete = err == 0;
    }
    if (close(fs->fd) != 0) {
        tw_fileset_warn(env, "closing", file->name, -errno);
        complete = 0;
    }
    fs->fd = -1;
    pthread_mutex_lock(env->lock);
    file->complete = complete;
    pthread_mutex_unlock(env->lock);
}

int tw_atomic_open(const char *path, char *tmp, size_t tmp_size, mode_t mode)
{
    if (snprintf(tmp, tmp_size, "%s.tmp-%lld", path, (long long)getpid()) >= (int)tmp_size)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
    return fd >= 0 ? fd : -errno;
}

int tw_atomic_commit(const char *tmp, const char *path, int err)
{
    if (err == 0 && rename(tmp, path) != 0)
        err = -errno;
    if (err != 0)
        unlink(tmp);
    return err;
}

int tw_path_join(char *out, size_t size, const char *dir, const char *name)
{
    int n = snprintf(out, size, "%s/%s", dir, name);
    return n < 0 || (size_t)n >= size ? TW_ERANGE : 0;
}

int tw_make_dirs(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char was = *p;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -errno;
        if (was == '\0')
            break;
        *p = was;
    }
    struct stat st;
    if (stat(dir, &st) != 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? (access(dir, W_OK | X_OK) == 0 ? 0 : -errno) : -ENOTDIR;
}

/* Why fs's oldest file must go, with kept_bytes in the closed files: the newest max_files files are
 * kept (the current one included), and within max_total_size, the current one counted as full
 * (max_size), as it will be. 0: it stays. */
static int removal_due(const tw_fileset_env_t *env, const tw_fileset_t *fs, size_t gone, uint64_t kept_bytes)
{
    if (env->max_files != 0 && fs->file_count - gone > env->max_files)
        return TW_REMOVED_MAX_FILES;
    if (env->max_total_size != 0 && kept_bytes + env->max_size > env->max_total_size)
        return TW_REMOVED_MAX_TOTAL_SIZE;
    return 0;
}

/* Removes fs's oldest files past max_files and max_total_size, never the one just opened (the last).
 * Their entries leave the list, into fs's removed totals, so that neither the list nor the manifest
 * grows with a run that is left on. */
static void enforce_limits(tw_fileset_env_t *env, tw_fileset_t *fs)
{
    if (env->max_files == 0 && env->max_total_size == 0)
        return;
    uint64_t kept_bytes = 0; /* the closed files' (their sizes are final) */
    for (size_t i = 0; i + 1 < fs->file_count; i++)
        kept_bytes += fs->files[i].bytes;
    size_t gone = 0;
    int why;
    while (gone + 1 < fs->file_count && (why = removal_due(env, fs, gone, kept_bytes)) != 0) {
        tw_file_entry_t *file = &fs->files[gone++];
        char path[PATH_MAX];
        if (tw_path_join(path, sizeof path, env->out_dir, file->name) == 0 && unlink(path) != 0 && errno != ENOENT)
            tw_fileset_warn(env, "removing", path, -errno);
        kept_bytes -= file->bytes;
        pthread_mutex_lock(env->lock);
        fs->removed.files++;
        fs->removed.records += file->records;
        fs->removed.bytes += file->bytes;
        fs->removed.why = why;
        pthread_mutex_unlock(env->lock);
    }
    if (gone == 0)
        return;
    for (size_t i = 0; i < gone; i++)
        free(fs->files[i].name);
    pthread_mutex_lock(env->lock); /* the manifest reads the list under it */
    memmove(fs->files, fs->files + gone, (fs->file_count - gone) * sizeof *fs->files);
    fs->file_count -= gone;
    pthread_mutex_unlock(env->lock);
}

/*
 * The name of fs's next file: the call records' name, with ".KIND" before the extension for a
 * stream (tw-...-0001.csv, tw-...-0001.gpu.csv), and ".gz" after it when compressed. Returns 0 or
 * ENAMETOOLONG.
 */
static int next_name(tw_fileset_env_t *env, tw_fileset_t *fs, char *name, size_t size)
{
    const char *ext = env->format == TW_FORMAT_CSV ? ".csv" : ".jsonl";
    tw_name_fields_t fields = {tw_realtime_ns(), env->pid, env->pid, env->rank, ++fs->index, env->host};
    int n = tw_name_expand(env->spec, &fields, ext, name, size);
    if (n < 0)
        return ENAMETOOLONG;
    /* The expansion ends with ext (tw_name_expand sees to it): put a stream's kind before it. */
    size_t stem = (size_t)n - strlen(ext);
    const char *gz = env->compress == TW_COMPRESS_GZIP ? ".gz" : "";
    int m = strcmp(fs->kind, "calls") == 0 ? snprintf(name + stem, size - stem, "%s%s", ext, gz)
                                           : snprintf(name + stem, size - stem, ".%s%s%s", fs->kind, ext, gz);
    return m < 0 || (size_t)m >= size - stem ? ENAMETOOLONG : 0;
}

/* Opens fs's next file: a new name (never an existing file, never through a symlink). */
static int open_next_file(tw_fileset_env_t *env, tw_fileset_t *fs)
{
    tw_fileset_close(env, fs);
    if (fs->file_count == fs->file_capacity) {
        size_t capacity = fs->file_capacity ? 2 * fs->file_capacity : 16;
        pthread_mutex_lock(env->lock); /* the manifest reads the list under it */
        tw_file_entry_t *files = realloc(fs->files, capacity * sizeof *files);
        if (files != NULL) {
            fs->files = files;
            fs->file_capacity = capacity;
        }
        pthread_mutex_unlock(env->lock);
        if (files == NULL)
            return TW_ENOMEM;
    }
    char name[NAME_MAX + 1], path[PATH_MAX];
    for (int attempt = 0; attempt < 10000; attempt++) {
        if (next_name(env, fs, name, sizeof name) != 0 || tw_path_join(path, sizeof path, env->out_dir, name) != 0)
            return -ENAMETOOLONG;
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) {
            /* A name in use (another process, same second): the next index. A symbolic link there
             * is refused too (O_NOFOLLOW), never followed; it is counted and said once. */
            struct stat st;
            int planted = lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
            pthread_mutex_lock(env->lock);
            env->names_skipped++;
            int first_link = planted && env->links_refused++ == 0;
            pthread_mutex_unlock(env->lock);
            if (first_link)
                fprintf(stderr, "torchwrapper: %s is a symbolic link: not followed, not written; records go to the "
                                "next file name (counted in the manifest: file_names_skipped)\n", path);
            continue;
        }
        if (fd < 0)
            return -errno;
        char *copy = strdup(name);
        if (copy == NULL) {
            close(fd);
            unlink(path);
            return TW_ENOMEM;
        }
        fs->fd = fd;
        pthread_mutex_lock(env->lock);
        fs->files[fs->file_count++] = (tw_file_entry_t){copy, 0, 0, 0};
        pthread_mutex_unlock(env->lock);
        fs->file_bytes = 0;
        if (env->compress != TW_COMPRESS_NONE) {
            /* The member's start, and the header in it, on disk at once. */
            int64_t got = gz_begin(fs);
            if (got < 0) {
                tw_fileset_warn(env, "writing", path, (int)got);
                fs->z_failed = 1;
            } else {
                fs->file_bytes = (uint64_t)got;
                pthread_mutex_lock(env->lock);
                fs->files[fs->file_count - 1].bytes = (uint64_t)got;
                fs->bytes_total += (uint64_t)got;
                pthread_mutex_unlock(env->lock);
            }
        } else if (fs->header != NULL) {
            /* Written at once, so that every CSV file on disk starts with its header. */
            int err = tw_write_all(fd, fs->header, fs->header_len);
            if (err != 0)
                tw_fileset_warn(env, "writing", path, err);
            fs->file_bytes = fs->header_len;
            pthread_mutex_lock(env->lock);
            if (err == 0) {
                fs->files[fs->file_count - 1].bytes = fs->header_len;
                fs->bytes_total += fs->header_len;
            }
            pthread_mutex_unlock(env->lock);
        }
        enforce_limits(env, fs);
        return 0;
    }
    return -EEXIST;
}

/* Whether a line of len bytes goes into fs's buffer as things are: no flush and no new file first. */
static int takes_as_is(const tw_fileset_env_t *env, const tw_fileset_t *fs, size_t len)
{
    return fs->fd >= 0 && !(fs->z_failed && fs->buf_len == 0) && line_fits(env, fs, len) &&
           fs->buf_len + len <= TW_BUFFER_FLUSH;
}

/* The len bytes at the buffer's tail become fs's next line. */
static void take_line(const tw_fileset_env_t *env, tw_fileset_t *fs, size_t len)
{
    fs->buf_len += len;
    fs->buf_records++;
    if (env->compress == TW_COMPRESS_NONE)
        fs->file_bytes += len;
}

int tw_fileset_append(tw_fileset_env_t *env, tw_fileset_t *fs, const char *line, size_t len)
{
    int opened = 0;
    if (!takes_as_is(env, fs, len)) {
        /* Compressed: the lines gathered are deflated first, so that their real size counts. */
        if (fs->fd >= 0 && env->compress != TW_COMPRESS_NONE && fs->buf_len > 0 && !line_fits(env, fs, len))
            tw_fileset_flush(env, fs);
        /* A member with a hole (a write failed) takes lines until they are flushed, dropped, then the
         * next file: one new file a flush at most while the disk fails. */
        if (fs->fd < 0 || (fs->z_failed && fs->buf_len == 0) || !line_fits(env, fs, len)) {
            int err = open_next_file(env, fs);
            if (err != 0) {
                tw_fileset_warn(env, "creating a record file in", env->out_dir, err);
                pthread_mutex_lock(env->lock);
                fs->dropped++;
                pthread_mutex_unlock(env->lock);
                return 0;
            }
            opened = 1;
        }
        if (fs->buf_len + len > TW_BUFFER_FLUSH)
            tw_fileset_flush(env, fs);
    }
    memcpy(fs->buf + fs->buf_len, line, len);
    take_line(env, fs, len);
    return opened;
}

int tw_fileset_commit(tw_fileset_env_t *env, tw_fileset_t *fs, size_t len)
{
    if (!takes_as_is(env, fs, len))
        return -1;
    take_line(env, fs, len);
    return 0;
}

/* The deflate state, freed (a forked child's copy is its own to free). */
static void gz_free(tw_fileset_t *fs)
{
    if (fs->z != NULL)
        deflateEnd(fs->z);
    free(fs->z);
    free(fs->z_out);
    fs->z = NULL;
    fs->z_out = NULL;
}

void tw_fileset_fork_child(tw_fileset_t *fs)
{
    if (fs->fd >= 0)
        close(fs->fd);
    fs->fd = -1;
    gz_free(fs); /* the parent's member: the child's next file starts one of its own */
    for (size_t i = 0; i < fs->file_count; i++)
        free(fs->files[i].name);
    fs->file_count = 0;
    memset(&fs->removed, 0, sizeof fs->removed);
    fs->index = 0;
    fs->buf_len = 0;
    fs->buf_records = 0;
    fs->written = fs->dropped = fs->bytes_total = 0;
}

void tw_fileset_free(tw_fileset_t *fs)
{
    for (size_t i = 0; i < fs->file_count; i++)
        free(fs->files[i].name);
    free(fs->files);
    free(fs->buf);
    gz_free(fs);
}
