/* SPDX-License-Identifier: MIT */
/*
 * The tables of the model watch (model_watch_tables.h): filled by the model watch through
 * model_watch.c off the hot path, read by the wrappers (wrapper.c) on it. Guarded by the GIL.
 */
#include "model_watch_tables.h"

tw_ptr_table_t tw_modules;
tw_ptr_table_t tw_tracked;

void tw_ptr_table_clear(tw_ptr_table_t *table)
{
    PyMem_Free(table->slots);
    table->slots = NULL;
    table->mask = 0;
    table->used = 0;
    table->filled = 0;
}

/* Rebuilds with room for at least `need` live entries at half load. Returns 0 or -1 (MemoryError). */
static int ptr_table_resize(tw_ptr_table_t *table, size_t need)
{
    size_t capacity = 64;
    while (capacity < 2 * need)
        capacity *= 2;
    tw_ptr_slot_t *slots = PyMem_Calloc(capacity, sizeof *slots);
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; table->slots != NULL && i <= table->mask; i++) {
        tw_ptr_slot_t *old = &table->slots[i];
        if (old->key <= TW_PTR_TOMBSTONE)
            continue;
        size_t j = tw_ptr_hash(old->key) & (capacity - 1);
        while (slots[j].key != 0)
            j = (j + 1) & (capacity - 1);
        slots[j] = *old;
    }
    PyMem_Free(table->slots);
    table->slots = slots;
    table->mask = capacity - 1;
    table->filled = table->used;
    return 0;
}

int tw_ptr_table_set(tw_ptr_table_t *table, const void *p, uint32_t value)
{
    tw_ptr_slot_t *slot = tw_ptr_find(table, p);
    if (slot != NULL) {
        slot->value = value;
        return 0;
    }
    if ((table->filled + 1) * 2 > table->mask + 1 && ptr_table_resize(table, table->used + 1) < 0)
        return -1;
    uintptr_t key = (uintptr_t)p;
    size_t i = tw_ptr_hash(key) & table->mask;
    while (table->slots[i].key > TW_PTR_TOMBSTONE)
        i = (i + 1) & table->mask;
    if (table->slots[i].key == 0)
        table->filled++;
    table->slots[i] = (tw_ptr_slot_t){key, value, 0};
    table->used++;
    return 0;
}

uint32_t tw_ptr_table_remove(tw_ptr_table_t *table, uintptr_t key)
{
    tw_ptr_slot_t *slot = tw_ptr_find(table, (const void *)key);
    if (slot == NULL)
        return 0;
    uint32_t count = slot->count;
    slot->key = TW_PTR_TOMBSTONE;
    slot->value = 0;
    slot->count = 0;
    table->used--;
    if (table->used == 0)
        tw_ptr_table_clear(table);
    return count;
}
