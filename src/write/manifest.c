/* SPDX-License-Identifier: MIT */
/*
 * manifest.json and summary.json: built with cJSON (int64 values written exactly, as raw numbers)
 * and replaced atomically (see manifest.h); and sites.json, the call-site table (record/sites.c) as
 * the records' site column refers to it (see writer.h).
 */
#include "config.h"
#include "manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torchwrapper/api.h"
#include "torchwrapper/common.h"
#include "torchwrapper/escape.h"
#include "torchwrapper/sites.h"
#include "torchwrapper/writer.h"

/* Exact integers as raw JSON numbers (cJSON's are doubles). Table-driven, not snprintf: summary.json,
 * rewritten every flush interval, holds eleven a called API (snprintf was 1.6 M of its 10 M
 * instructions for BERT's 128 APIs under callgrind). */
static cJSON *raw_int(int64_t v)
{
    char text[24];
    *tw_format_i64(text, v) = '\0';
    return cJSON_CreateRaw(text);
}

cJSON *tw_json_uint(uint64_t v)
{
    char text[24];
    *tw_format_u64(text, v) = '\0';
    return cJSON_CreateRaw(text);
}

int tw_write_file_atomically(const char *path, const char *text, mode_t mode)
{
    char tmp[PATH_MAX];
    int fd = tw_atomic_open(path, tmp, sizeof tmp, mode);
    if (fd < 0)
        return fd;
    int err = tw_write_all(fd, text, strlen(text));
    if (err == 0)
        err = tw_write_all(fd, "\n", 1);
    if (close(fd) != 0 && err == 0)
        err = -errno;
    return tw_atomic_commit(tmp, path, err);
}

static int write_json_atomically(const char *path, cJSON *root)
{
    char *text = cJSON_Print(root);
    if (text == NULL)
        return TW_ENOMEM;
    int err = tw_write_file_atomically(path, text, 0644);
    free(text);
    return err;
}

/* Lists fs's files in the manifest's array; env->lock held. */
static void add_files(cJSON *files, const tw_fileset_t *fs)
{
    for (size_t i = 0; files != NULL && i < fs->file_count; i++) {
        cJSON *f = cJSON_CreateObject();
        if (f == NULL)
            return;
        cJSON_AddStringToObject(f, "name", fs->files[i].name);
        cJSON_AddStringToObject(f, "kind", fs->kind);
        cJSON_AddItemToObject(f, "records", raw_int((int64_t)fs->files[i].records));
        cJSON_AddItemToObject(f, "bytes", raw_int((int64_t)fs->files[i].bytes));
        if (fs->files[i].complete) /* a gzip member closed with its end: readers take it as it is */
            cJSON_AddTrueToObject(f, "complete");
        cJSON_AddItemToArray(files, f);
    }
}

void tw_manifest_write(tw_fileset_env_t *env, const char *path, const tw_manifest_t *m)
{
    cJSON *root = NULL;
    if (m->extra_json != NULL)
        root = cJSON_Parse(m->extra_json);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        root = cJSON_CreateObject();
    }
    if (root == NULL)
        return;
    cJSON_AddItemToObject(root, "manifest_version", raw_int(1));
    cJSON_AddStringToObject(root, "torchwrapper", tw_version());
    cJSON_AddStringToObject(root, "format", env->format == TW_FORMAT_CSV ? "csv" : "json");
    cJSON_AddStringToObject(root, "compress", env->compress == TW_COMPRESS_GZIP ? "gzip" : "none");
    cJSON_AddStringToObject(root, "host", env->host);
    cJSON_AddItemToObject(root, "pid", raw_int(env->pid));
    if (env->rank >= 0)
        cJSON_AddItemToObject(root, "rank", raw_int(env->rank));
    cJSON_AddItemToObject(root, "start_ns", raw_int(m->start_ns));
    cJSON_AddItemToObject(root, "end_ns", m->end_ns ? raw_int(m->end_ns) : cJSON_CreateNull());
    cJSON_AddItemToObject(root, "file_max_size", raw_int((int64_t)env->max_size));
    cJSON_AddStringToObject(root, "clock", m->clock == TW_CLOCK_TSC ? "tsc" : "monotonic");
    /* Every file of every kind, oldest first per kind: call records ("calls") first, then each
     * stream's ("gpu", ...). Per kind, "records": what was written and what was lost, and why, in
     * one scheme; the calls' counts also at the top level and the streams' in "streams", as readers
     * of earlier versions find them. */
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    cJSON *records = cJSON_AddObjectToObject(root, "records");
    cJSON *streams = cJSON_CreateObject();
    pthread_mutex_lock(env->lock);
    for (size_t i = 0; i < m->kind_count; i++) {
        const tw_manifest_kind_t *k = &m->kinds[i];
        add_files(files, k->files);
        uint64_t dropped = tw_manifest_drops_total(&k->drops);
        cJSON *o = records != NULL ? cJSON_AddObjectToObject(records, k->kind) : NULL;
        if (o != NULL) {
            cJSON_AddItemToObject(o, "written", raw_int((int64_t)k->files->written));
            cJSON_AddItemToObject(o, "dropped", raw_int((int64_t)dropped));
            cJSON *by = cJSON_AddObjectToObject(o, "dropped_by");
            if (by != NULL) {
                cJSON_AddItemToObject(by, "full", raw_int((int64_t)k->drops.full));
                cJSON_AddItemToObject(by, "invalid", raw_int((int64_t)k->drops.invalid));
                cJSON_AddItemToObject(by, "closed", raw_int((int64_t)k->drops.closed));
                cJSON_AddItemToObject(by, "write", raw_int((int64_t)k->drops.write));
                cJSON_AddItemToObject(by, "upstream", raw_int((int64_t)k->drops.upstream));
            }
            cJSON_AddItemToObject(o, "truncated", raw_int((int64_t)k->truncated));
            cJSON_AddItemToObject(o, "bytes_written", raw_int((int64_t)k->files->bytes_total));
            const tw_fileset_t *fs = k->files;
            cJSON *removed = fs->removed.files > 0 ? cJSON_AddObjectToObject(o, "removed") : NULL;
            if (removed != NULL) { /* the oldest files, gone from "files" (max_files, max_total_size) */
                cJSON_AddItemToObject(removed, "files", raw_int((int64_t)fs->removed.files));
                cJSON_AddItemToObject(removed, "records", raw_int((int64_t)fs->removed.records));
                cJSON_AddItemToObject(removed, "bytes", raw_int((int64_t)fs->removed.bytes));
                cJSON_AddStringToObject(removed, "by",
                                        fs->removed.why == TW_REMOVED_MAX_FILES ? "max_files" : "max_total_size");
            }
        }
        if (i == 0) {
            cJSON_AddItemToObject(root, "records_written", raw_int((int64_t)k->files->written));
            cJSON_AddItemToObject(root, "records_dropped", raw_int((int64_t)dropped));
            cJSON_AddItemToObject(root, "records_truncated", raw_int((int64_t)k->truncated));
            cJSON_AddItemToObject(root, "bytes_written", raw_int((int64_t)k->files->bytes_total));
            continue;
        }
        o = streams != NULL ? cJSON_CreateObject() : NULL;
        if (o == NULL)
            continue;
        cJSON_AddItemToObject(o, "records_written", raw_int((int64_t)k->files->written));
        cJSON_AddItemToObject(o, "records_dropped", raw_int((int64_t)dropped));
        cJSON_AddItemToObject(o, "records_lost_upstream", raw_int((int64_t)k->drops.upstream));
        cJSON_AddItemToObject(o, "bytes_written", raw_int((int64_t)k->files->bytes_total));
        cJSON_AddItemToObject(streams, k->kind, o);
    }
    int64_t skipped = (int64_t)env->names_skipped, links = (int64_t)env->links_refused;
    int write_errno = env->write_errno;
    pthread_mutex_unlock(env->lock);
    cJSON_AddItemToObject(root, "file_names_skipped", raw_int(skipped));
    cJSON_AddItemToObject(root, "symlinks_refused", raw_int(links));
    if (streams != NULL)
        cJSON_AddItemToObject(root, "streams", streams);
    if (m->memory_budget != 0) {
        cJSON *o = cJSON_AddObjectToObject(root, "memory");
        if (o != NULL) {
            cJSON_AddItemToObject(o, "budget_bytes", raw_int((int64_t)m->memory_budget));
            cJSON_AddItemToObject(o, "peak_bytes", raw_int((int64_t)m->memory_peak));
        }
    }
    if (m->writer_cost != NULL) { /* the profiler's own cost: its writing's part */
        cJSON *o = cJSON_AddObjectToObject(root, "writer");
        if (o != NULL) {
            cJSON_AddItemToObject(o, "helped", raw_int((int64_t)m->writer_cost[TW_MANIFEST_HELPED]));
            cJSON_AddItemToObject(o, "help_ns", raw_int((int64_t)m->writer_cost[TW_MANIFEST_HELP_NS]));
            cJSON_AddItemToObject(o, "thread_cpu_ns", raw_int((int64_t)m->writer_cost[TW_MANIFEST_THREAD_CPU_NS]));
            cJSON_AddItemToObject(o, "close_ns", raw_int((int64_t)m->writer_cost[TW_MANIFEST_CLOSE_NS]));
        }
    }
    cJSON *captures = m->captures_json != NULL ? cJSON_Parse(m->captures_json) : NULL;
    if (captures != NULL)
        cJSON_AddItemToObject(root, "captures", captures);
    if (m->sites_file != NULL) { /* call sites (sites.h): the file the site column's ids refer to */
        cJSON *o = cJSON_AddObjectToObject(root, "sites");
        if (o != NULL) {
            cJSON_AddStringToObject(o, "file", m->sites_file);
            cJSON_AddItemToObject(o, "count", raw_int(m->sites->count));
            cJSON_AddItemToObject(o, "cap", raw_int(m->sites->cap));
            cJSON_AddItemToObject(o, "overflow", raw_int((int64_t)m->sites->overflow));
        }
    }
    if (write_errno != 0)
        cJSON_AddStringToObject(root, "write_error", strerror(write_errno));
    else
        cJSON_AddNullToObject(root, "write_error");
    int err = write_json_atomically(path, root);
    cJSON_Delete(root);
    if (err != 0)
        tw_fileset_warn(env, "writing", path, err);
}

static int compare_total_desc(const void *a, const void *b, void *arg)
{
    (void)arg;
    const tw_api_stats_t *x = *(tw_api_stats_t *const *)a, *y = *(tw_api_stats_t *const *)b;
    return x->total_ns < y->total_ns ? 1 : x->total_ns > y->total_ns ? -1 : 0;
}

void tw_summary_write(tw_fileset_env_t *env, const char *path, const tw_stats_t *stats)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *apis = root ? cJSON_AddArrayToObject(root, "apis") : NULL;
    tw_api_stats_t **order = calloc(stats->capacity ? stats->capacity : 1, sizeof *order);
    if (apis == NULL || order == NULL) {
        cJSON_Delete(root);
        free(order);
        return;
    }
    size_t n = 0;
    for (uint32_t id = 0; id < stats->capacity; id++)
        /* GPU time of a call whose record was lost counts */
        if (stats->apis[id].calls > 0 || stats->apis[id].gpu_ns > 0)
            order[n++] = &stats->apis[id];
    qsort_r(order, n, sizeof *order, compare_total_desc, NULL);
    for (size_t i = 0; i < n; i++) {
        const tw_api_stats_t *a = order[i];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL)
            break;
        const char *name = tw_api_name((uint32_t)(a - stats->apis));
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
    int err = write_json_atomically(path, root);
    cJSON_Delete(root);
    if (err != 0)
        tw_fileset_warn(env, "writing", path, err);
}

/* ---- sites.json -------------------------------------------------------------------------------------- */

/* fputs of s as a JSON string. */
static void put_json_string(FILE *f, const char *s)
{
    char buf[6 * TW_SITE_TEXT_MAX + 2];
    size_t n = strlen(s);
    if (n > TW_SITE_TEXT_MAX)
        n = TW_SITE_TEXT_MAX;
    char *end = tw_json_escape(buf, s, n);
    fwrite(buf, 1, (size_t)(end - buf), f);
}

int tw_sites_write_json(tw_sites_t *s, const char *path, int64_t pid)
{
    char tmp[PATH_MAX];
    int fd = tw_atomic_open(path, tmp, sizeof tmp, 0644);
    if (fd < 0)
        return fd;
    FILE *f = fdopen(fd, "w");
    if (f == NULL) {
        int err = -errno;
        close(fd);
        return tw_atomic_commit(tmp, path, err);
    }
    /* the sites interned by now (a site never changes once interned: those that come meanwhile are
     * in the next file) */
    tw_sites_stats_t st;
    tw_sites_stats(s, &st);
    fprintf(f, "{\"sites_version\": 1");
    if (pid >= 0)
        fprintf(f, ", \"pid\": %lld", (long long)pid);
    fprintf(f, ", \"count\": %u, \"cap\": %u, \"overflow\": %llu, \"overflow_id\": %u,\n \"sites\": {", st.count,
            st.cap, (unsigned long long)st.overflow, tw_sites_overflow_id(s));
    char file[TW_SITE_TEXT_MAX + 1], function[TW_SITE_TEXT_MAX + 1], text[TW_SITE_TEXT_MAX + 1];
    for (uint32_t id = 1; id <= st.count; id++) {
        uint32_t line = 0;
        if (!tw_sites_get(s, id, file, &line, function, text))
            break;
        fprintf(f, "%s\n  \"%u\": {\"file\": ", id > 1 ? "," : "", id);
        put_json_string(f, file);
        fprintf(f, ", \"line\": %u, \"function\": ", line);
        put_json_string(f, function);
        fputs(", \"text\": ", f);
        put_json_string(f, text);
        fputc('}', f);
    }
    fputs("\n }}\n", f);
    int err = ferror(f) ? TW_EIO : 0;
    if (fclose(f) != 0 && err == 0)
        err = -errno;
    return tw_atomic_commit(tmp, path, err);
}
