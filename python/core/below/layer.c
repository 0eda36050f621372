/* SPDX-License-Identifier: MIT */
/*
 * The libtorch layer, once per process: dlopen, every entry point looked up into one table, and the
 * checks that decide, per feature, whether it can be used. See layer.h.
 *
 * Two checks refuse the whole layer: its table is another version than this extension reads (a
 * _torch.so left from another torchwrapper build: the functions may take other arguments), and it was
 * built against another torch than the running one (libtorch's C++ API has no stable ABI). A layer
 * that lacks some entry points refuses only the features that need them.
 */
#include "layer.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

tw_layer_t tw_layer;

/* Every field's type is that of the function it holds, as tw_torch.h declares it: a signature changed
 * there and not here fails the build instead of the call. */
#define TW_SAME_TYPE(field, function)                                                                      \
    _Static_assert(__builtin_types_compatible_p(__typeof__(tw_layer.field), __typeof__(&function)),       \
                   "tw_layer_t." #field " is not the type of " #function " in tw_torch.h")
TW_SAME_TYPE(built_with, tw_torch_built_with);
TW_SAME_TYPE(sequence_peek, tw_torch_sequence_peek);
TW_SAME_TYPE(thread_id, tw_torch_thread_id);
TW_SAME_TYPE(start, tw_torch_start);
TW_SAME_TYPE(stop, tw_torch_stop);
TW_SAME_TYPE(observe, tw_torch_observe);
TW_SAME_TYPE(callbacks_held, tw_torch_callbacks_held);
TW_SAME_TYPE(flops, tw_torch_flops);
TW_SAME_TYPE(memory_owner, tw_torch_memory_owner);
TW_SAME_TYPE(memory_start, tw_torch_memory_start);
TW_SAME_TYPE(memory_step_aside, tw_torch_memory_step_aside);
TW_SAME_TYPE(memory_resume, tw_torch_memory_resume);
TW_SAME_TYPE(memory_stop, tw_torch_memory_stop);
TW_SAME_TYPE(tensor_summary, tw_torch_tensor_summary);

/* The entry points: where each goes in the table and which feature needs it (-1: loading itself). */
static const struct {
    const char *name;
    size_t offset;
    int feature;
} entries[] = {
    {"tw_torch_built_with", offsetof(tw_layer_t, built_with), -1},
    {"tw_torch_sequence_peek", offsetof(tw_layer_t, sequence_peek), TW_LAYER_BACKWARD},
    {"tw_torch_thread_id", offsetof(tw_layer_t, thread_id), TW_LAYER_BACKWARD},
    {"tw_torch_start", offsetof(tw_layer_t, start), TW_LAYER_BACKWARD},
    {"tw_torch_stop", offsetof(tw_layer_t, stop), TW_LAYER_BACKWARD},
    {"tw_torch_observe", offsetof(tw_layer_t, observe), TW_LAYER_BACKWARD},
    {"tw_torch_callbacks_held", offsetof(tw_layer_t, callbacks_held), TW_LAYER_BACKWARD},
    {"tw_torch_flops", offsetof(tw_layer_t, flops), TW_LAYER_FLOPS},
    {"tw_torch_memory_owner", offsetof(tw_layer_t, memory_owner), TW_LAYER_MEMORY},
    {"tw_torch_memory_start", offsetof(tw_layer_t, memory_start), TW_LAYER_MEMORY},
    {"tw_torch_memory_step_aside", offsetof(tw_layer_t, memory_step_aside), TW_LAYER_MEMORY},
    {"tw_torch_memory_resume", offsetof(tw_layer_t, memory_resume), TW_LAYER_MEMORY},
    {"tw_torch_memory_stop", offsetof(tw_layer_t, memory_stop), TW_LAYER_MEMORY},
    {"tw_torch_tensor_summary", offsetof(tw_layer_t, tensor_summary), TW_LAYER_SUMMARY},
};

/* What each feature's refusal says is off, after the cause, and what a reinstall gives back. */
static const struct {
    const char *name; /* in "lacks its ... entry points" */
    const char *off;
    const char *them;
} features[TW_LAYER_FEATURES] = {
    [TW_LAYER_BACKWARD] = {"backward", "backward nodes are off", "them"},
    [TW_LAYER_FLOPS] = {"FLOPs", "FLOPs are not counted", "them"},
    [TW_LAYER_MEMORY] = {"memory", "memory is not measured", "it"},
    [TW_LAYER_SUMMARY] = {"tensor summary", "tensor summaries are read in Python", "them"},
};

/* The refusal of a layer built against another torch than the running one. */
static void say_other_torch(tw_layer_feature_t feature, const char *built, const char *running, char *why,
                            size_t why_size)
{
    snprintf(why, why_size, "the libtorch layer was built against torch %s and this is torch %s: %s (reinstall "
             "torchwrapper with this torch to have %s)", built, running, features[feature].off, features[feature].them);
}

/* The function pointer at offset in table (the table's fields are all function pointers). */
static void (**slot_of(tw_layer_t *table, size_t offset))(void)
{
    return (void (**)(void))(void *)((char *)table + offset);
}

/* Loads the layer into tw_layer unless loaded; 0, or -1 with why (for feature's user). */
static int load(tw_layer_feature_t feature, const char *path, const char *torch_version, char *why,
                size_t why_size)
{
    if (path == NULL || torch_version == NULL) {
        snprintf(why, why_size, "the libtorch layer was not built (configure found no torch for its Python, or no C++20 "
                                "compiler)");
        return -1;
    }
    if (tw_layer.handle != NULL)
        return 0;
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *e = dlerror();
        snprintf(why, why_size, "the libtorch layer %s cannot be loaded: %s", path, e != NULL ? e : "unknown error");
        return -1;
    }
    tw_layer_t table = {.handle = handle};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        /* dlsym's object pointer to a function pointer: through memcpy, as POSIX allows */
        void *symbol = dlsym(handle, entries[i].name);
        memcpy(slot_of(&table, entries[i].offset), &symbol, sizeof symbol);
    }
    unsigned (*version)(void) = NULL;
    void *symbol = dlsym(handle, "tw_torch_layer_version");
    memcpy(&version, &symbol, sizeof symbol);
    table.version = version != NULL ? version() : 0;
    if (table.built_with == NULL) {
        snprintf(why, why_size, "the libtorch layer %s lacks its entry points", path);
        goto refused;
    }
    if (table.version != TW_TORCH_LAYER_VERSION) {
        snprintf(why, why_size, "the libtorch layer %s is of another torchwrapper build (its table is version %u, this "
                 "extension reads version %u): %s (reinstall torchwrapper to have %s)", path, table.version,
                 TW_TORCH_LAYER_VERSION, features[feature].off, features[feature].them);
        goto refused;
    }
    if (strcmp(table.built_with(), torch_version) != 0) {
        say_other_torch(feature, table.built_with(), torch_version, why, why_size);
        goto refused; /* not kept: its C++ may not even agree with the running torch's */
    }
    tw_layer = table;
    return 0;
refused:
    dlclose(handle);
    return -1;
}

int tw_layer_need(tw_layer_feature_t feature, const char *path, const char *torch_version, char *why,
                  size_t why_size)
{
    if (load(feature, path, torch_version, why, why_size) != 0)
        return -1;
    /* loaded for one torch, asked for by a session that names another (a test's refusal) */
    if (strcmp(tw_layer.built_with(), torch_version) != 0) {
        say_other_torch(feature, tw_layer.built_with(), torch_version, why, why_size);
        return -1;
    }
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        if (entries[i].feature == (int)feature && *slot_of(&tw_layer, entries[i].offset) == NULL) {
            snprintf(why, why_size, "the libtorch layer %s lacks its %s entry points (%s missing): %s", path,
                     features[feature].name, entries[i].name, features[feature].off);
            return -1;
        }
    }
    return 0;
}
