/* SPDX-License-Identifier: MIT */
/*
 * tw-report, the inputs: record files and directories, their kinds, and what their manifests say
 * (origin, ranks).
 */
#include "config.h"
#include "inputs.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "torchwrapper/common.h"

#include "own_cost_report.h"
#include "util.h"

static int add_file(inputs_t *in, const char *path)
{
    if (in->count == in->capacity) {
        size_t capacity = in->capacity ? in->capacity * 2 : 64;
        input_file_t *files = realloc(in->files, capacity * sizeof *files);
        if (files == NULL)
            return TW_ENOMEM;
        in->files = files;
        in->capacity = capacity;
    }
    if ((in->files[in->count].path = strdup(path)) == NULL)
        return TW_ENOMEM;
    in->files[in->count++].kind = 0;
    return 0;
}

static void copy_string(char *to, size_t size, const cJSON *item)
{
    if (cJSON_IsString(item) && to[0] == '\0')
        snprintf(to, size, "%s", item->valuestring);
}

/* The measured offset of clock_sync with the least error ("start", "stop"); 0 when none. */
static int best_clock(const cJSON *sync, int64_t *offset, int64_t *error)
{
    int found = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, sync)
    {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(m, "offset_ns");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(m, "error_ns");
        if (!cJSON_IsNumber(o) || !cJSON_IsNumber(e) || e->valuedouble < 0)
            continue;
        if (!found || (int64_t)e->valuedouble < *error) {
            *offset = (int64_t)o->valuedouble;
            *error = (int64_t)e->valuedouble;
            found = 1;
        }
    }
    return found;
}

static void add_proc(inputs_t *in, const cJSON *root)
{
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(root, "pid");
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(root, "rank");
    if (!cJSON_IsNumber(pid))
        return;
    if (in->nprocs == in->procs_capacity) {
        size_t capacity = in->procs_capacity ? 2 * in->procs_capacity : 16;
        input_proc_t *bigger = realloc(in->procs, capacity * sizeof *bigger);
        if (bigger == NULL)
            return; /* a process without its rank: its rows are still read */
        in->procs = bigger;
        in->procs_capacity = capacity;
    }
    input_proc_t *p = &in->procs[in->nprocs++];
    *p = (input_proc_t){.pid = (int64_t)pid->valuedouble, .rank = cJSON_IsNumber(rank) ? (int64_t)rank->valuedouble : -1};
    p->has_clock = best_clock(cJSON_GetObjectItemCaseSensitive(root, "clock_sync"), &p->clock_offset_ns,
                              &p->clock_error_ns);
    /* the ranks of the run: the manifest's world_size, or its clock measurement's */
    p->world_size = -1;
    const cJSON *world = cJSON_GetObjectItemCaseSensitive(root, "world_size");
    const cJSON *sync = cJSON_GetObjectItemCaseSensitive(root, "clock_sync");
    for (const cJSON *s = cJSON_IsObject(sync) ? sync->child : NULL; !cJSON_IsNumber(world) && s != NULL; s = s->next)
        world = cJSON_GetObjectItemCaseSensitive(s, "world_size");
    if (cJSON_IsNumber(world) && world->valuedouble >= 1)
        p->world_size = (int64_t)world->valuedouble;
}

const input_proc_t *report_input_proc(const inputs_t *in, int64_t pid, size_t *hint)
{
    if (hint != NULL && *hint < in->nprocs && in->procs[*hint].pid == pid)
        return &in->procs[*hint];
    for (size_t i = 0; i < in->nprocs; i++)
        if (in->procs[i].pid == pid) {
            if (hint != NULL)
                *hint = i;
            return &in->procs[i];
        }
    return NULL;
}

/* A non-negative whole number of o's key, or 0. */
static uint64_t count_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && v->valuedouble > 0 ? (uint64_t)v->valuedouble : 0;
}

/* Adds the call-record files a manifest says the writer removed (records.calls.removed). */
static void add_removed(struct run_info *info, const cJSON *root)
{
    const cJSON *records = cJSON_GetObjectItemCaseSensitive(root, "records");
    const cJSON *removed = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(records, "calls"),
                                                            "removed");
    uint64_t files = count_of(removed, "files");
    if (files == 0)
        return;
    if (info->removed_files == 0)
        copy_string(info->removed_by, sizeof info->removed_by, cJSON_GetObjectItemCaseSensitive(removed, "by"));
    info->removed_files += files;
    info->removed_records += count_of(removed, "records");
    info->removed_bytes += count_of(removed, "bytes");
}

void report_removed_text(const struct run_info *info, char *buf, size_t size)
{
    if (size == 0)
        return;
    buf[0] = '\0';
    if (info->removed_files == 0)
        return;
    snprintf(buf, size, "The oldest %" PRIu64 " record file%s (%" PRIu64 " records, %.1f MB) were removed by %s: "
             "these figures are the newest records'; summary.json counts every call", info->removed_files,
             info->removed_files == 1 ? "" : "s", info->removed_records, (double)info->removed_bytes / 1e6,
             info->removed_by);
}

/* Notes a manifest's start time, rank and what --html's summary shows; a manifest that does not
 * parse is simply not used. */
static void read_manifest(inputs_t *in, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return;
    /* The whole file: a long run's manifest lists thousands of files. */
    char *buf = NULL;
    size_t len = 0, capacity = 0;
    for (;;) {
        if (len + 65536 + 1 > capacity) {
            char *bigger = capacity < (64u << 20) ? realloc(buf, capacity = len + 65536 * 2 + 1) : NULL;
            if (bigger == NULL)
                break;
            buf = bigger;
        }
        size_t n = fread(buf + len, 1, 65536, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    if (buf == NULL)
        return;
    buf[len] = '\0';
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(root, "start_ns");
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(root, "pid");
    const cJSON *rank = cJSON_GetObjectItemCaseSensitive(root, "rank");
    /* start_ns is an epoch time in ns: as a double it is exact to 256 ns, plenty for an origin. */
    if (cJSON_IsNumber(start) && start->valuedouble > 0 && (int64_t)start->valuedouble < in->origin_ns)
        in->origin_ns = (int64_t)start->valuedouble;
    if (cJSON_IsNumber(pid) && cJSON_IsNumber(rank) && in->nranks < 256) {
        in->rank_pids[in->nranks][0] = (int64_t)pid->valuedouble;
        in->rank_pids[in->nranks++][1] = (int64_t)rank->valuedouble;
    }
    if (cJSON_IsObject(root)) {
        add_proc(in, root);
        struct run_info *info = &in->info;
        const cJSON *host = cJSON_GetObjectItemCaseSensitive(root, "host");
        if (cJSON_IsString(host) && info->hosts == 0)
            info->hosts = 1;
        else if (cJSON_IsString(host) && strcmp(info->host, host->valuestring) != 0)
            info->hosts = 2; /* "and others" */
        copy_string(info->host, sizeof info->host, host);
        copy_string(info->torch, sizeof info->torch, cJSON_GetObjectItemCaseSensitive(root, "torch"));
        copy_string(info->torchwrapper, sizeof info->torchwrapper,
                    cJSON_GetObjectItemCaseSensitive(root, "torchwrapper"));
        info->written += count_of(root, "records_written");
        info->dropped += count_of(root, "records_dropped");
        const cJSON *peak = cJSON_GetObjectItemCaseSensitive(root, "peak_flops");
        if (cJSON_IsNumber(peak) && peak->valuedouble > 0 && info->peak_flops == 0)
            info->peak_flops = peak->valuedouble;
        const cJSON *cpus = cJSON_GetObjectItemCaseSensitive(root, "cpus");
        const cJSON *threads = cJSON_GetObjectItemCaseSensitive(root, "torch_threads");
        if (info->manifests == 0 && cJSON_IsNumber(cpus) && cpus->valuedouble >= 1)
            info->cpus = (int64_t)cpus->valuedouble;
        if (info->manifests == 0 && cJSON_IsNumber(threads) && threads->valuedouble >= 1)
            info->torch_threads = (int64_t)threads->valuedouble;
        report_own_add(&info->own, root);
        add_removed(info, root);
        info->manifests++;
    }
    cJSON_Delete(root);
}

static int compare_names(const void *a, const void *b)
{
    return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* Lists the record files of a directory (*.csv, *.jsonl, and compressed *.csv.gz, *.jsonl.gz) in
 * name order, which is time order for the writer's names, and reads its manifests. 0, or after a
 * message on err: opendir's -errno, TW_ENOMEM, or -ENOENT (no record files there). */
static int add_directory(inputs_t *in, const char *dir, FILE *err)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        int rc = -errno;
        fprintf(err, "tw-report: cannot read the directory %s: %s\n", dir, strerror(errno));
        return rc;
    }
    char **names = NULL;
    size_t count = 0, capacity = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *name = e->d_name;
        int manifest = strncmp(name, "manifest", 8) == 0 && report_has_suffix(name, ".json");
        if (!manifest && !report_has_suffix(name, ".csv") && !report_has_suffix(name, ".jsonl") &&
            !report_has_suffix(name, ".csv.gz") && !report_has_suffix(name, ".jsonl.gz"))
            continue;
        /* the model watch's streams beside the records (config tensor_stats, track) are not call records */
        if (strstr(name, ".stats.") != NULL || strstr(name, ".updates.") != NULL)
            continue;
        if (count == capacity) {
            capacity = capacity ? capacity * 2 : 64;
            char **bigger = realloc(names, capacity * sizeof *names);
            if (bigger == NULL) {
                rc = TW_ENOMEM;
                break;
            }
            names = bigger;
        }
        size_t len = strlen(dir) + strlen(name) + 2;
        if ((names[count] = malloc(len)) == NULL) {
            rc = TW_ENOMEM;
            break;
        }
        snprintf(names[count++], len, "%s/%s", dir, name);
    }
    closedir(d);
    if (rc == 0)
        qsort(names, count, sizeof *names, compare_names);
    size_t before = in->count;
    for (size_t i = 0; i < count; i++) {
        if (rc == 0) {
            const char *base = strrchr(names[i], '/') + 1;
            if (strncmp(base, "manifest", 8) == 0 && report_has_suffix(base, ".json"))
                read_manifest(in, names[i]);
            else
                rc = add_file(in, names[i]);
        }
        free(names[i]);
    }
    free(names);
    if (rc != 0) {
        fprintf(err, "tw-report: %s\n", tw_strerror(rc));
        return rc;
    }
    if (in->count == before) {
        fprintf(err, "tw-report: %s holds no record files (*.csv, *.jsonl, *.csv.gz or *.jsonl.gz written by "
                     "TorchWrapper)\n", dir);
        return -ENOENT;
    }
    return 0;
}

int report_collect_inputs(const options_t *o, inputs_t *in, FILE *err)
{
    in->origin_ns = INT64_MAX;
    for (size_t i = 0; i < o->ninputs; i++) {
        const char *path = o->inputs[i];
        struct stat st;
        if (stat(path, &st) != 0) {
            int rc = -errno;
            fprintf(err, "tw-report: %s: %s\n", path, strerror(errno));
            return rc;
        }
        if (S_ISDIR(st.st_mode)) {
            int rc = add_directory(in, path, err);
            if (rc != 0)
                return rc;
            continue;
        }
        if (add_file(in, path) != 0) {
            fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
            return TW_ENOMEM;
        }
        /* The manifest beside a file given alone gives the run's start. */
        char dir[4096];
        const char *slash = strrchr(path, '/');
        int n = slash ? snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path) : snprintf(dir, sizeof dir, ".");
        DIR *d = n > 0 && (size_t)n < sizeof dir ? opendir(dir) : NULL;
        for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
            if (strncmp(e->d_name, "manifest", 8) == 0 && report_has_suffix(e->d_name, ".json")) {
                char manifest[8192];
                snprintf(manifest, sizeof manifest, "%s/%s", dir, e->d_name);
                read_manifest(in, manifest);
            }
        }
        if (d != NULL)
            closedir(d);
    }
    for (size_t i = 0; i < in->count; i++) {
        char message[512];
        int rc = tw_read_kind(in->files[i].path, &in->files[i].kind, message, sizeof message);
        if (rc != 0) {
            fprintf(err, "tw-report: %s\n", message);
            return rc;
        }
    }
    return 0;
}

void report_free_inputs(inputs_t *in)
{
    for (size_t i = 0; i < in->count; i++)
        free(in->files[i].path);
    free(in->files);
    free(in->procs);
}
