/* SPDX-License-Identifier: MIT */
/*
 * The call-site table: (file, line, function) interned into ids, bounded. See sites.h; the table is
 * written to sites.json by the writer (write/manifest.c) and read back by the readers
 * (read/sites_file.c). Interning is the slow path of the extension's per-code cache (a site's first call), so a
 * mutex and a hash of the texts are cheap enough; the hot path never comes here.
 */
#include "config.h"
#include "torchwrapper/sites.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atfork.h"

typedef struct {
    char *file;
    char *function;
    char *text;
    uint32_t line;
    uint64_t hash;
} site_t;

struct tw_sites {
    pthread_mutex_t lock;
    struct tw_sites *next_live; /* in the registry of live tables (fork handlers) */
    uint32_t cap;
    uint32_t count;
    site_t *sites;    /* sites[id - 1], grown by doubling up to cap */
    uint32_t sites_capacity;
    uint32_t *index;  /* open addressing: ids (0: empty), by hash */
    size_t index_mask; /* index capacity - 1 */
    uint64_t overflow; /* atomic */
};

static uint64_t hash_text(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull; /* FNV-1a */
    return h;
}

/* The length s is kept at: cut to TW_SITE_TEXT_MAX bytes at a character boundary. */
static size_t kept_len(const char *s)
{
    return tw_utf8_cut(s, strlen(s), TW_SITE_TEXT_MAX);
}

/* A copy of s as kept; NULL when out of memory. */
static char *copy_text(const char *s)
{
    size_t n = kept_len(s);
    char *copy = malloc(n + 1);
    if (copy != NULL) {
        memcpy(copy, s, n);
        copy[n] = '\0';
    }
    return copy;
}

/*
 * Every live table, so that fork() never copies a lock held by another thread (the writer thread
 * writing the sites file): the handlers take every table's lock around fork.
 */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static tw_sites_t *registry;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&registry_lock);
    for (tw_sites_t *s = registry; s != NULL; s = s->next_live)
        pthread_mutex_lock(&s->lock);
}

static void fork_parent(void)
{
    for (tw_sites_t *s = registry; s != NULL; s = s->next_live)
        pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&registry_lock);
}

static void register_atfork(void)
{
    /* the child holds the locks: it unlocks them too */
    tw_atfork_register(TW_ATFORK_SITES, fork_prepare, fork_parent, fork_parent);
}

int tw_sites_create(uint32_t cap, tw_sites_t **out)
{
    if (out == NULL || cap == UINT32_MAX)
        return TW_EINVAL;
    tw_sites_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return TW_ENOMEM;
    s->cap = cap ? cap : TW_SITES_CAP_DEFAULT;
    pthread_mutex_init(&s->lock, NULL);
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&registry_lock);
    s->next_live = registry;
    registry = s;
    pthread_mutex_unlock(&registry_lock);
    *out = s;
    return 0;
}

void tw_sites_destroy(tw_sites_t *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&registry_lock);
    for (tw_sites_t **p = &registry; *p != NULL; p = &(*p)->next_live) {
        if (*p == s) {
            *p = s->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    for (uint32_t i = 0; i < s->count; i++) {
        free(s->sites[i].file);
        free(s->sites[i].function);
        free(s->sites[i].text);
    }
    free(s->sites);
    free(s->index);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

uint32_t tw_sites_overflow_id(const tw_sites_t *s)
{
    return s->cap + 1;
}

/* Doubles the index (kept at most half full); lock held. */
static int grow_index(tw_sites_t *s)
{
    size_t capacity = s->index ? (s->index_mask + 1) * 2 : 256;
    uint32_t *index = calloc(capacity, sizeof *index);
    if (index == NULL)
        return TW_ENOMEM;
    for (uint32_t i = 0; i < s->count; i++) {
        size_t j = s->sites[i].hash & (capacity - 1);
        while (index[j] != 0)
            j = (j + 1) & (capacity - 1);
        index[j] = i + 1;
    }
    free(s->index);
    s->index = index;
    s->index_mask = capacity - 1;
    return 0;
}

uint32_t tw_sites_intern(tw_sites_t *s, const char *file, uint32_t line, const char *function, const char *text)
{
    if (s == NULL || file == NULL || function == NULL)
        return TW_SITE_NONE;
    /* compared and hashed as kept, so that a name longer than the cut finds its site again */
    size_t file_len = kept_len(file), function_len = kept_len(function);
    uint64_t h = hash_text(0xCBF29CE484222325ull, file, file_len);
    h = (h ^ line) * 0x9E3779B97F4A7C15ull;
    h = hash_text(h, function, function_len);
    h ^= h >> 32;
    uint32_t id = TW_SITE_NONE;
    pthread_mutex_lock(&s->lock);
    if (s->index != NULL) {
        for (size_t j = h & s->index_mask; s->index[j] != 0; j = (j + 1) & s->index_mask) {
            const site_t *e = &s->sites[s->index[j] - 1];
            if (e->hash == h && e->line == line && strlen(e->file) == file_len &&
                memcmp(e->file, file, file_len) == 0 && strlen(e->function) == function_len &&
                memcmp(e->function, function, function_len) == 0) {
                id = s->index[j];
                goto done;
            }
        }
    }
    if (s->count == s->cap) {
        id = s->cap + 1;
        goto done;
    }
    if ((s->count + 1) * 2 > (s->index ? s->index_mask + 1 : 0) && grow_index(s) != 0)
        goto done;
    if (s->count == s->sites_capacity) {
        uint32_t capacity = s->sites_capacity ? s->sites_capacity * 2 : 64;
        if (capacity > s->cap)
            capacity = s->cap;
        site_t *sites = realloc(s->sites, capacity * sizeof *sites);
        if (sites == NULL)
            goto done;
        s->sites = sites;
        s->sites_capacity = capacity;
    }
    site_t e = {copy_text(file), copy_text(function), NULL, line, h};
    if (text != NULL) {
        e.text = copy_text(text);
    } else {
        size_t n = strlen(e.file ? e.file : "") + strlen(e.function ? e.function : "") + 16;
        if ((e.text = malloc(n)) != NULL)
            snprintf(e.text, n, "%s:%u %s", e.file ? e.file : "", line, e.function ? e.function : "");
    }
    if (e.file == NULL || e.function == NULL || e.text == NULL) {
        free(e.file);
        free(e.function);
        free(e.text);
        goto done;
    }
    s->sites[s->count++] = e;
    id = s->count;
    size_t j = h & s->index_mask;
    while (s->index[j] != 0)
        j = (j + 1) & s->index_mask;
    s->index[j] = id;
done:
    pthread_mutex_unlock(&s->lock);
    return id;
}

void tw_sites_note_overflow(tw_sites_t *s, uint64_t calls)
{
    __atomic_fetch_add(&s->overflow, calls, __ATOMIC_RELAXED);
}

void tw_sites_stats(tw_sites_t *s, tw_sites_stats_t *stats)
{
    pthread_mutex_lock(&s->lock);
    stats->count = s->count;
    stats->cap = s->cap;
    pthread_mutex_unlock(&s->lock);
    stats->overflow = __atomic_load_n(&s->overflow, __ATOMIC_RELAXED);
}

int tw_sites_get(tw_sites_t *s, uint32_t id, char *file, uint32_t *line, char *function, char *text)
{
    int found = 0;
    pthread_mutex_lock(&s->lock);
    if (id != TW_SITE_NONE && id <= s->count) {
        const site_t *e = &s->sites[id - 1];
        if (file != NULL)
            strcpy(file, e->file); /* each at most TW_SITE_TEXT_MAX bytes (copy_text) */
        if (function != NULL)
            strcpy(function, e->function);
        if (text != NULL)
            snprintf(text, TW_SITE_TEXT_MAX + 1, "%s", e->text);
        if (line != NULL)
            *line = e->line;
        found = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}
