/* SPDX-License-Identifier: MIT */
/*
 * tw-report, call sites: the sites files beside the record files (sites.json, sites-PID.json, at most
 * cap sites per process: bounded memory), and a row's site as its text ("train.py:42 train_step").
 */
#include "config.h"
#include "site_texts.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"
#include "torchwrapper/reader.h"

#include "groups.h"
#include "util.h"

static size_t slot_of(const report_sites_t *s, int64_t pid, uint64_t id)
{
    size_t j = report_pid_id_hash(pid, id) & (s->capacity - 1);
    while (s->slots[j].text != NULL && !(s->slots[j].pid == pid && s->slots[j].id == id))
        j = (j + 1) & (s->capacity - 1);
    return j;
}

static int add_site(report_sites_t *s, int64_t pid, uint64_t id, const char *text, int library)
{
    if ((s->count + 1) * 2 > s->capacity) {
        report_site_t *old = s->slots;
        size_t old_capacity = s->capacity;
        s->capacity = s->capacity ? s->capacity * 2 : 256;
        if ((s->slots = calloc(s->capacity, sizeof *s->slots)) == NULL) {
            s->slots = old;
            s->capacity = old_capacity;
            return TW_ENOMEM;
        }
        for (size_t i = 0; i < old_capacity; i++)
            if (old[i].text != NULL)
                s->slots[slot_of(s, old[i].pid, old[i].id)] = old[i];
        free(old);
    }
    report_site_t *slot = &s->slots[slot_of(s, pid, id)];
    char *copy = strdup(text);
    if (copy == NULL)
        return TW_ENOMEM;
    if (slot->text != NULL)
        free(slot->text); /* the same process's file read twice: the same text */
    else
        s->count++;
    *slot = (report_site_t){pid, id, copy, library};
    return 0;
}

#define LIBRARY_BIT (UINT64_C(1) << 63)

int report_site_file_is_library(const char *file)
{
    return file != NULL && (strstr(file, "/site-packages/") != NULL || strstr(file, "/dist-packages/") != NULL ||
                            strstr(file, "/lib/python3") != NULL || file[0] == '<');
}

/* The sites of one file, gathered until its pid is known (tw_sites_read_json gives it at the end). */
typedef struct {
    uint64_t *ids;
    char **texts;
    size_t count, capacity;
} file_sites_t;

static int gather_site(void *ctx, uint32_t id, const char *file, uint32_t line, const char *function,
                       const char *text)
{
    (void)line, (void)function;
    file_sites_t *f = ctx;
    if (f->count == f->capacity) {
        size_t capacity = f->capacity ? 2 * f->capacity : 64;
        uint64_t *ids = realloc(f->ids, capacity * sizeof *ids);
        if (ids != NULL)
            f->ids = ids;
        char **texts = ids != NULL ? realloc(f->texts, capacity * sizeof *texts) : NULL;
        if (texts == NULL)
            return TW_ENOMEM;
        f->texts = texts;
        f->capacity = capacity;
    }
    if ((f->texts[f->count] = strdup(text)) == NULL)
        return TW_ENOMEM;
    /* (whether the file is an installed package's or the interpreter's: the high bit, until add_site) */
    f->ids[f->count++] = id | (report_site_file_is_library(file) ? LIBRARY_BIT : 0);
    return 0;
}

/* Reads one sites file with the library's one parser of them (src/read/sites_file.c); one that does not parse
 * is not used (its sites show as ids). */
static void read_sites_file(report_sites_t *s, const char *path)
{
    file_sites_t f = {0};
    int64_t pid = -1;
    char err[256];
    int rc = tw_sites_read_json(path, gather_site, &f, &pid, err, sizeof err);
    for (size_t i = 0; i < f.count; i++) {
        if (rc == 0 && add_site(s, pid, f.ids[i] & ~LIBRARY_BIT, f.texts[i], (f.ids[i] & LIBRARY_BIT) != 0) != 0)
            rc = TW_ENOMEM;
        free(f.texts[i]);
    }
    free(f.ids);
    free(f.texts);
}

int report_load_sites(report_sites_t *s, const inputs_t *in)
{
    for (size_t i = 0; i < in->count; i++) {
        /* each directory once: the files of one directory are listed together */
        const char *path = in->files[i].path, *slash = strrchr(path, '/');
        size_t dir_len = slash != NULL ? (size_t)(slash - path) : 0;
        if (i > 0) {
            const char *prev = in->files[i - 1].path, *prev_slash = strrchr(prev, '/');
            size_t prev_len = prev_slash != NULL ? (size_t)(prev_slash - prev) : 0;
            if (prev_len == dir_len && strncmp(prev, path, dir_len) == 0)
                continue;
        }
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", dir_len ? (int)dir_len : 1, dir_len ? path : ".");
        DIR *d = opendir(dir);
        for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
            if (strncmp(e->d_name, "sites", 5) == 0 && report_has_suffix(e->d_name, ".json")) {
                char file[8192];
                snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
                read_sites_file(s, file);
            }
        }
        if (d != NULL)
            closedir(d);
    }
    return 0;
}

const char *report_site_text(const report_sites_t *s, int64_t pid, uint64_t id)
{
    if (id == 0 || s->count == 0)
        return NULL;
    const report_site_t *slot = &s->slots[slot_of(s, pid, id)];
    return slot->text;
}

int report_site_is_library(const report_sites_t *s, int64_t pid, uint64_t id)
{
    if (id == 0 || s->count == 0)
        return 0;
    const report_site_t *slot = &s->slots[slot_of(s, pid, id)];
    return slot->text != NULL && slot->library;
}

void report_sites_free(report_sites_t *s)
{
    for (size_t i = 0; i < s->capacity; i++)
        free(s->slots[i].text);
    free(s->slots);
    memset(s, 0, sizeof *s);
}
