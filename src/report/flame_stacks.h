/* SPDX-License-Identifier: MIT */
/* The flame graph's stacks (flame.c builds them, flame_output.c writes them): their types, shared by
 * those two files only. */
#ifndef TORCHWRAPPER_REPORT_FLAME_STACKS_H
#define TORCHWRAPPER_REPORT_FLAME_STACKS_H

#include <stddef.h>
#include <stdint.h>

#include "index.h"
#include "site_texts.h"
#include "sink.h"

typedef struct flame flame_t;

/* A frame's name, interned: nodes compare names by pointer. */
typedef struct frame_name {
    char *text;
    size_t len;
    uint64_t hash;
    int package; /* package_t, for the colour */
} frame_name_t;

typedef struct flame_node {
    const frame_name_t *name; /* NULL: waiting for its own row; or (--by module) a call that is no frame */
    uint64_t self_ns, calls, total_ns;
    struct flame_node *child, *next; /* first child, next sibling */
} flame_node_t;

struct flame {
    report_sink_t sink;
    const char *folded, *flamegraph; /* the files written (NULL: not that one; --html embeds the SVG) */
    int by_module;
    int timeline;                /* backward nodes under the backward call that ran them */
    report_index_t *index;       /* the pass's: calls read lately (their frame is our value), and
                                  * the nodes waiting for their parent or their forward call */
    const report_sites_t *sites; /* call sites as frames (NULL, or no sites files: none) */
    int oom;
    uint64_t self_ns; /* all the self time counted: what the stacks sum to */
    uint64_t calls;   /* all the calls counted */
    flame_node_t root;
    /* interned names, open addressing */
    frame_name_t **names;
    size_t name_capacity, name_count;
    /* nodes come from chunks; freed ones are reused through a free list */
    flame_node_t **chunks;
    size_t nchunks, chunk_used;
    flame_node_t *free_nodes;
    size_t live_nodes;
};

enum { NODES_PER_CHUNK = 4096 };
enum { FRAME_NAME_MAX = 1000 }; /* bytes of a frame's name kept (cut at a character boundary) */

typedef enum { PKG_NN, PKG_OPTIM, PKG_TENSOR, PKG_TORCH, PKG_USER, PKG_NONE } package_t;

#endif
