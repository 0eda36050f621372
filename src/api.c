/* SPDX-License-Identifier: MIT */
/*
 * The API name table. Readers (the writer thread, report code) look names up without a lock: the
 * table is an array of fixed pages whose pointers, once published with a release store, never move.
 * Writers (interning, rare: a few thousand times per process) take a mutex and keep a hash index.
 * Each name is kept with its JSON string and CSV field, rendered once when it is interned, so that
 * the writer copies them into every record that names it (an API, a module path, a backward node's
 * forward API) instead of escaping the same bytes again (callgrind, BERT: ~270 instructions a record
 * went to tw_json_escape).
 */
#include "config.h"
#include "torchwrapper/api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "api_text.h"
#include "torchwrapper/escape.h"

#define PAGE_BITS 10
#define PAGE_SIZE (1u << PAGE_BITS)
#define MAX_PAGES 1024 /* 2^20 names */

static _Atomic(const tw_api_text_t **) pages[MAX_PAGES];
static _Atomic uint32_t name_count;

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t *index_slots; /* open addressing: id + 1, 0 for empty */
static size_t index_capacity;

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static const tw_api_text_t *text_at(uint32_t id)
{
    const tw_api_text_t **page = atomic_load_explicit(&pages[id >> PAGE_BITS], memory_order_acquire);
    return page[id & (PAGE_SIZE - 1)];
}

static const char *name_at(uint32_t id)
{
    return text_at(id)->name;
}

/* name with its renderings, in one allocation that lives as long as the process */
static tw_api_text_t *render(const char *name)
{
    size_t len = strlen(name);
    size_t size = sizeof(tw_api_text_t) + len + 1 + 6 * len + 2 + 2 * len + 2 + TW_API_TEXT_PAD;
    tw_api_text_t *text = calloc(1, size); /* zeroed: the pad is copied, never written out */
    if (text == NULL)
        return NULL;
    char *p = (char *)(text + 1);
    memcpy(p, name, len + 1);
    text->name = p;
    text->len = (uint32_t)len;
    p += len + 1;
    text->json = p;
    text->json_len = (uint32_t)(tw_json_escape(p, name, len) - p);
    p += text->json_len;
    text->csv = p;
    text->csv_len = (uint32_t)(tw_csv_field(p, name, len) - p);
    return text;
}

static int index_grow(void)
{
    size_t capacity = index_capacity ? index_capacity * 2 : 4096;
    uint32_t *slots = calloc(capacity, sizeof *slots);
    if (slots == NULL)
        return TW_ENOMEM;
    uint32_t count = atomic_load_explicit(&name_count, memory_order_relaxed);
    for (uint32_t id = 0; id < count; id++) {
        size_t i = hash_name(name_at(id)) & (capacity - 1);
        while (slots[i] != 0)
            i = (i + 1) & (capacity - 1);
        slots[i] = id + 1;
    }
    free(index_slots);
    index_slots = slots;
    index_capacity = capacity;
    return 0;
}

int tw_api_intern(const char *name, uint32_t *id)
{
    if (name == NULL || id == NULL || name[0] == '\0' || strlen(name) > TW_API_NAME_MAX)
        return TW_EINVAL;
    int err = 0;
    pthread_mutex_lock(&intern_lock);
    uint32_t count = atomic_load_explicit(&name_count, memory_order_relaxed);
    if ((size_t)(count + 1) * 2 > index_capacity && (err = index_grow()) != 0)
        goto out;
    size_t i = hash_name(name) & (index_capacity - 1);
    for (; index_slots[i] != 0; i = (i + 1) & (index_capacity - 1)) {
        if (strcmp(name_at(index_slots[i] - 1), name) == 0) {
            *id = index_slots[i] - 1;
            goto out;
        }
    }
    if (count == (uint32_t)MAX_PAGES * PAGE_SIZE) {
        err = TW_EFULL;
        goto out;
    }
    const tw_api_text_t **page = atomic_load_explicit(&pages[count >> PAGE_BITS], memory_order_relaxed);
    if (page == NULL) {
        page = calloc(PAGE_SIZE, sizeof *page);
        if (page == NULL) {
            err = TW_ENOMEM;
            goto out;
        }
        atomic_store_explicit(&pages[count >> PAGE_BITS], page, memory_order_release);
    }
    tw_api_text_t *text = render(name);
    if (text == NULL) {
        err = TW_ENOMEM;
        goto out;
    }
    page[count & (PAGE_SIZE - 1)] = text;
    index_slots[i] = count + 1;
    /* Publishes the name: a reader that sees the new count sees the page entry. */
    atomic_store_explicit(&name_count, count + 1, memory_order_release);
    *id = count;
out:
    pthread_mutex_unlock(&intern_lock);
    return err;
}

const char *tw_api_name(uint32_t id)
{
    if (id >= atomic_load_explicit(&name_count, memory_order_acquire))
        return NULL;
    return name_at(id);
}

const tw_api_text_t *tw_api_text(uint32_t id)
{
    if (id >= atomic_load_explicit(&name_count, memory_order_acquire))
        return NULL;
    return text_at(id);
}

uint32_t tw_api_count(void)
{
    return atomic_load_explicit(&name_count, memory_order_acquire);
}
