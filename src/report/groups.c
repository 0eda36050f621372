/* SPDX-License-Identifier: MIT */
/* tw-report's hashing and group tables: see groups.h. */
#include "config.h"
#include "groups.h"

#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

static int table_grow(group_table_t *t)
{
    size_t capacity = t->capacity ? t->capacity * 2 : 256;
    group_t **slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return TW_ENOMEM;
    for (size_t i = 0; i < t->capacity; i++) {
        group_t *g = t->slots[i];
        if (g == NULL)
            continue;
        size_t j = g->hash & (capacity - 1);
        while (slots[j] != NULL)
            j = (j + 1) & (capacity - 1);
        slots[j] = g;
    }
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

group_t *report_group_get(group_table_t *t, const char *key, size_t len)
{
    if ((t->count + 1) * 2 > t->capacity && table_grow(t) != 0)
        return NULL;
    uint64_t h = report_hash_bytes(key, len, 0);
    size_t j = h & (t->capacity - 1);
    for (group_t *g; (g = t->slots[j]) != NULL; j = (j + 1) & (t->capacity - 1))
        if (g->hash == h && g->key_len == len && memcmp(g->key, key, len) == 0)
            return g;
    group_t *g = calloc(1, sizeof *g);
    char *copy = malloc(len + 1);
    if (g == NULL || copy == NULL) {
        free(g);
        free(copy);
        return NULL;
    }
    memcpy(copy, key, len);
    copy[len] = '\0';
    *g = (group_t){.key = copy, .key_len = len, .hash = h};
    t->slots[j] = g;
    t->count++;
    return g;
}

group_t **report_group_list(const group_table_t *t, size_t *count)
{
    group_t **list = calloc(t->count ? t->count : 1, sizeof *list);
    size_t n = 0;
    for (size_t i = 0; list != NULL && i < t->capacity; i++)
        if (t->slots[i] != NULL)
            list[n++] = t->slots[i];
    *count = n;
    return list;
}

void report_group_table_free(group_table_t *t)
{
    for (size_t i = 0; i < t->capacity; i++) {
        if (t->slots[i] != NULL) {
            free(t->slots[i]->key);
            free(t->slots[i]->detail);
            free(t->slots[i]->stats.histogram);
            free(t->slots[i]);
        }
    }
    free(t->slots);
    memset(t, 0, sizeof *t);
}

/* ---- GPU time per call ---------------------------------------------------------------------------- */

static int call_gpu_grow(call_gpu_table_t *t)
{
    size_t capacity = t->capacity ? t->capacity * 2 : 1024;
    call_gpu_t *slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return TW_ENOMEM;
    for (size_t i = 0; i < t->capacity; i++) {
        const call_gpu_t *c = &t->slots[i];
        if (c->call_id == 0)
            continue;
        size_t j = report_pid_id_hash(c->pid, c->call_id) & (capacity - 1);
        while (slots[j].call_id != 0)
            j = (j + 1) & (capacity - 1);
        slots[j] = *c;
    }
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

int report_call_gpu_add(call_gpu_table_t *t, int64_t pid, uint64_t call_id, uint64_t ns)
{
    if (call_id == 0)
        return 0;
    if ((t->count + 1) * 2 > t->capacity && call_gpu_grow(t) != 0)
        return TW_ENOMEM;
    size_t j = report_pid_id_hash(pid, call_id) & (t->capacity - 1);
    for (; t->slots[j].call_id != 0; j = (j + 1) & (t->capacity - 1)) {
        if (t->slots[j].call_id == call_id && t->slots[j].pid == pid) {
            t->slots[j].ns += ns;
            return 0;
        }
    }
    t->slots[j] = (call_gpu_t){pid, call_id, ns};
    t->count++;
    return 0;
}

uint64_t report_call_gpu_of(const call_gpu_table_t *t, int64_t pid, uint64_t call_id)
{
    if (t == NULL || t->count == 0 || call_id == 0)
        return 0;
    size_t j = report_pid_id_hash(pid, call_id) & (t->capacity - 1);
    for (; t->slots[j].call_id != 0; j = (j + 1) & (t->capacity - 1))
        if (t->slots[j].call_id == call_id && t->slots[j].pid == pid)
            return t->slots[j].ns;
    return 0;
}

int report_call_gpu_merge(call_gpu_table_t *into, const call_gpu_table_t *from)
{
    int rc = 0;
    for (size_t i = 0; i < from->capacity; i++)
        if (from->slots[i].call_id != 0 &&
            report_call_gpu_add(into, from->slots[i].pid, from->slots[i].call_id, from->slots[i].ns) != 0)
            rc = TW_ENOMEM;
    return rc;
}

void report_call_gpu_free(call_gpu_table_t *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}
