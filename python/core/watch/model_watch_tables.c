/* SPDX-License-Identifier: MIT */
/*
 * The tables of the model watch (model_watch_tables.h): filled by the model watch through
 * model_watch.c off the hot path, read by the wrappers (wrapper.c) on it. Guarded by the GIL.
 */
#include "model_watch_tables.h"

#include "torchwrapper/recorder.h"

tw_ptr_table_t tw_modules;
tw_ptr_table_t tw_tracked;
tw_transient_t tw_transients[TW_TRANSIENTS];
unsigned tw_transients_used;

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

int tw_transient_set(PyTypeObject *type, uint32_t parent_id, uint32_t path_id)
{
    for (unsigned i = 0; i < tw_transients_used; i++)
        if (tw_transients[i].type == type && tw_transients[i].parent_id == parent_id) {
            tw_transients[i].path_id = path_id;
            return 1;
        }
    if (tw_transients_used == TW_TRANSIENTS)
        return 0;
    tw_transients[tw_transients_used++] = (tw_transient_t){(PyTypeObject *)Py_NewRef(type), parent_id, path_id, 0};
    return 1;
}

/* Whether module's attribute name (an interned str, NULL when it could not be made) is an empty
 * dict: an nn.Module's _modules and _parameters, in its instance dict. */
static int empty_dict_attribute(PyObject *module, PyObject *name)
{
    if (name == NULL)
        return 0;
    PyObject *value = PyObject_GetAttr(module, name);
    int empty = value != NULL && PyDict_Check(value) && PyDict_GET_SIZE(value) == 0;
    if (value == NULL)
        PyErr_Clear();
    Py_XDECREF(value);
    return empty;
}

uint32_t tw_transient_find(PyObject *module, uint32_t parent_id)
{
    static PyObject *modules_name, *parameters_name; /* interned once, kept for the process */
    for (unsigned i = 0; i < tw_transients_used; i++) {
        tw_transient_t *entry = &tw_transients[i];
        if (entry->type != Py_TYPE(module) || entry->parent_id != parent_id)
            continue;
        if (modules_name == NULL)
            modules_name = PyUnicode_InternFromString("_modules");
        if (parameters_name == NULL)
            parameters_name = PyUnicode_InternFromString("_parameters");
        if (modules_name == NULL || parameters_name == NULL)
            PyErr_Clear();
        if (!empty_dict_attribute(module, modules_name) || !empty_dict_attribute(module, parameters_name))
            return TW_MODULE_NONE; /* not a leaf: the model watch resolves it */
        entry->calls++;
        return entry->path_id;
    }
    return TW_MODULE_NONE;
}

void tw_transients_clear(void)
{
    unsigned used = tw_transients_used;
    tw_transients_used = 0; /* emptied first: a type's last reference can run Python code */
    for (unsigned i = 0; i < used; i++)
        Py_CLEAR(tw_transients[i].type);
}
