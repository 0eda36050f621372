/* SPDX-License-Identifier: MIT */
/*
 * The tables of the model watch (model_watch_tables.c; not public API): nn.Module instances by
 * address -> the id of their path, tracked tensors (parameters, gradients) by address -> the model
 * watch's index. Filled by the model watch (model_watch.c's functions), read by the wrappers' hot
 * path (wrapper.c), emptied when a session stops (session_features.c).
 */
#ifndef TW_PY_MODEL_WATCH_TABLES_H
#define TW_PY_MODEL_WATCH_TABLES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A table of live objects by address, guarded by the GIL: open addressing, linear probing. Entries
 * are put in and taken out by the model watch, which holds a weak reference to each object and takes
 * its entry out when the object dies, before its address can be reused.
 */
typedef struct {
    uintptr_t key;   /* 0: empty, TW_PTR_TOMBSTONE: deleted */
    uint32_t value;
    uint32_t count;  /* calls seen (modules table) */
} tw_ptr_slot_t;

#define TW_PTR_TOMBSTONE ((uintptr_t)1)

typedef struct {
    tw_ptr_slot_t *slots;
    size_t mask;     /* capacity - 1 (a power of two), or 0 with slots NULL */
    size_t used;     /* live entries */
    size_t filled;   /* live and deleted */
} tw_ptr_table_t;

static inline size_t tw_ptr_hash(uintptr_t key)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 29);
}

/* The entry of object p, or NULL. Valid until the table changes. */
static inline tw_ptr_slot_t *tw_ptr_find(const tw_ptr_table_t *table, const void *p)
{
    if (table->used == 0)
        return NULL;
    uintptr_t key = (uintptr_t)p;
    for (size_t i = tw_ptr_hash(key) & table->mask;; i = (i + 1) & table->mask) {
        tw_ptr_slot_t *slot = &table->slots[i];
        if (slot->key == key)
            return slot;
        if (slot->key == 0)
            return NULL;
    }
}

extern tw_ptr_table_t tw_modules; /* nn.Module instance -> module id (TW_MODULE_*), calls */
extern tw_ptr_table_t tw_tracked; /* tracked tensor (parameter, grad) -> model watch's index */

/* Sets the value of p (count kept when present, else 0). Returns 0 or -1 with an exception. */
int tw_ptr_table_set(tw_ptr_table_t *table, const void *p, uint32_t value);

/* Removes the entry of the object that was at key; returns its count (0 when absent). */
uint32_t tw_ptr_table_remove(tw_ptr_table_t *table, uintptr_t key);

/* Empties the table and frees its slots. */
void tw_ptr_table_clear(tw_ptr_table_t *table);

/*
 * Transient modules: a leaf module made anew in each call of its parent (transformers' BERT makes a
 * CrossEntropyLoss in every forward) takes the path the model watch gave the first one of its class
 * under that parent, found here by (class, the parent's path id) with no Python run and no table
 * entry: each instance would otherwise cost a resolution in Python, a table entry, a weak reference
 * and its callback, every step (~35 us a BERT step). The model watch puts an entry in only while the
 * full resolution would give the same path (it empties them when a model grows, is registered or
 * retired), and reads each entry's calls into modules.json. Guarded by the GIL.
 */
typedef struct {
    PyTypeObject *type; /* a strong reference (its address is not reused while here); NULL: free */
    uint32_t parent_id; /* the path id of the module forward it is made in (not TW_MODULE_NONE) */
    uint32_t path_id;
    uint64_t calls;     /* forward calls given path_id here */
} tw_transient_t;

#define TW_TRANSIENTS 16 /* kinds of transient a session keeps; more go through the model watch */

extern tw_transient_t tw_transients[TW_TRANSIENTS];
extern unsigned tw_transients_used;

/* Adds (type, parent_id) -> path_id (its calls kept when present). 1 when kept, 0 when full. */
int tw_transient_set(PyTypeObject *type, uint32_t parent_id, uint32_t path_id);

/* The path id of module, a leaf (no child, no parameter) of a kind set under parent_id, its call
 * counted; TW_MODULE_NONE when none. Never raises. */
uint32_t tw_transient_find(PyObject *module, uint32_t parent_id);

/* Empties the entries, dropping their types. */
void tw_transients_clear(void);

#endif
