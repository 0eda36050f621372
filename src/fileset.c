/* SPDX-License-Identifier: MIT */
/*
 * Rotating file sets: file names (file_name_spec), O_EXCL | O_NOFOLLOW creation, rotation before
 * file_max_size, max_files, buffered writes and the first write error. See fileset.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileset.h"
#include "torchwrapper/config.h"

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

/* Writes the buffered output of fs's current file. */
void tw_fileset_flush(tw_fileset_env_t *env, tw_fileset_t *fs)
{
    if (fs->buf_len == 0)
        return;
    int err = fs->fd >= 0 ? tw_write_all(fs->fd, fs->buf, fs->buf_len) : -EBADF;
    pthread_mutex_lock(env->lock);
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
    pthread_mutex_unlock(env->lock);
    if (err != 0)
        tw_fileset_warn(env, "writing", fs->file_count > 0 ? fs->files[fs->file_count - 1].name : env->out_dir, err);
    fs->buf_len = 0;
    fs->buf_records = 0;
}

void tw_fileset_close(tw_fileset_env_t *env, tw_fileset_t *fs)
{
    tw_fileset_flush(env, fs);
    if (fs->fd >= 0) {
        if (close(fs->fd) != 0)
            tw_fileset_warn(env, "closing", fs->files[fs->file_count - 1].name, -errno);
        fs->fd = -1;
    }
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

/* Keeps only the newest max_files files of fs (the current one included). */
static void enforce_max_files(tw_fileset_env_t *env, tw_fileset_t *fs)
{
    if (env->max_files == 0)
        return;
    for (size_t i = 0; i < fs->file_count && fs->kept > env->max_files; i++) {
        if (fs->files[i].removed)
            continue;
        char path[PATH_MAX];
        if (tw_path_join(path, sizeof path, env->out_dir, fs->files[i].name) == 0 && unlink(path) != 0 &&
            errno != ENOENT)
            tw_fileset_warn(env, "removing", path, -errno);
        pthread_mutex_lock(env->lock);
        fs->files[i].removed = 1;
        pthread_mutex_unlock(env->lock);
        fs->kept--;
    }
}

/*
 * The name of fs's next file: the call records' name, with ".KIND" before the extension for a
 * stream (tw-...-0001.csv, tw-...-0001.gpu.csv). Returns 0 or ENAMETOOLONG.
 */
static int next_name(tw_fileset_env_t *env, tw_fileset_t *fs, char *name, size_t size)
{
    const char *ext = env->format == TW_FORMAT_CSV ? ".csv" : ".jsonl";
    tw_name_fields_t fields = {tw_realtime_ns(), env->pid, env->pid, env->rank, ++fs->index, env->host};
    int n = tw_name_expand(env->spec, &fields, ext, name, size);
    if (n < 0)
        return ENAMETOOLONG;
    if (strcmp(fs->kind, "calls") == 0)
        return 0;
    /* The expansion ends with ext (tw_name_expand sees to it): put the kind before it. */
    size_t stem = (size_t)n - strlen(ext);
    int m = snprintf(name + stem, size - stem, ".%s%s", fs->kind, ext);
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
        fs->kept++;
        fs->file_bytes = 0;
        if (fs->header != NULL) {
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
        enforce_max_files(env, fs);
        return 0;
    }
    return -EEXIST;
}

int tw_fileset_append(tw_fileset_env_t *env, tw_fileset_t *fs, const char *line, size_t len)
{
    int opened = 0;
    if (fs->fd < 0 || fs->file_bytes + len > env->max_size) {
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
    memcpy(fs->buf + fs->buf_len, line, len);
    fs->buf_len += len;
    fs->buf_records++;
    fs->file_bytes += len;
    return opened;
}

void tw_fileset_fork_child(tw_fileset_t *fs)
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

void tw_fileset_free(tw_fileset_t *fs)
{
    for (size_t i = 0; i < fs->file_count; i++)
        free(fs->files[i].name);
    free(fs->files);
    free(fs->buf);
}
