/* SPDX-License-Identifier: MIT */
/*
 * The libtorch layer (libtorch/tw_torch.h), loaded once per process with dlopen: one table of its
 * entry points, and per feature (backward nodes, FLOPs, memory, tensor summaries) whether it can be
 * used and, when not, the reason a user reads. backward.c, flops.c, memory.c and args.c call the layer
 * through this table only. Private to the extension module; GIL held.
 */
#ifndef TW_CORE_LAYER_H
#define TW_CORE_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "libtorch/tw_torch.h"

/* What a session uses the layer for: each needs its own entry points, and says its own reason. */
typedef enum {
    TW_LAYER_BACKWARD, /* backward nodes as records (config aten, backward.c) */
    TW_LAYER_FLOPS,    /* FLOPs per call (config flops, flops.c) */
    TW_LAYER_MEMORY,   /* memory per call (config memory, memory.c) */
    TW_LAYER_SUMMARY,  /* tensor summaries in C (config args "summary", args.c); Python does them without */
    TW_LAYER_FEATURES
} tw_layer_feature_t;

/*
 * The loaded layer. Every field is NULL (version 0) until a load succeeded: the layer was found,
 * its table is this extension's version (TW_TORCH_LAYER_VERSION) and it was built against the
 * running torch. An entry point the layer lacks stays NULL: the features that need it are refused
 * (tw_layer_need), the others work. The fields' types are checked against tw_torch.h at build time.
 */
typedef struct {
    void *handle;
    unsigned version; /* tw_torch_layer_version() */
    const char *(*built_with)(void);
    /* backward nodes */
    uint64_t (*sequence_peek)(void);
    uint64_t (*thread_id)(void);
    int (*start)(const tw_torch_hooks_t *, int);
    void (*stop)(void);
    void (*observe)(int);
    int (*callbacks_held)(void);
    /* FLOPs */
    uint64_t (*flops)(int, struct _object *const *, size_t, struct _object *, struct _object *, uint64_t, uint64_t,
                      const tw_torch_flops_node_t **, unsigned *);
    /* memory */
    int (*memory_owner)(void);
    int (*memory_start)(tw_torch_memory_report_t);
    int (*memory_step_aside)(void);
    int (*memory_resume)(void);
    int (*memory_stop)(int);
    /* tensor summaries */
    int (*tensor_summary)(struct _object *, char *, size_t);
} tw_layer_t;

extern tw_layer_t tw_layer;

/*
 * The layer at path loaded (once per process) for feature, the running torch being torch_version
 * (torch.__version__); path or torch_version NULL: the layer was not built. 0 when feature can be
 * used, or -1 with the reason in why: one line for the user that says what is off (the layer is
 * missing, built against another torch, lacks the feature's entry points).
 */
int tw_layer_need(tw_layer_feature_t feature, const char *path, const char *torch_version, char *why,
                  size_t why_size);

#endif
