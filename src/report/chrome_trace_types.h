/* SPDX-License-Identifier: MIT */
/*
 * --trace's state, shared by its parts (not an interface of the report), each above the ones it uses:
 * the sink (chrome_trace.c: processes, threads, rows) holds each thread's calls until the outermost
 * call around them has come (chrome_trace_nest.c), writes them as events (chrome_trace_events.c:
 * a call's fields, arrows to its backward nodes) beside the GPU work, its launches and the steps
 * (chrome_trace_tracks.c), through the output files (chrome_trace_out.c).
 */
#ifndef TW_REPORT_CHROME_TRACE_TYPES_H
#define TW_REPORT_CHROME_TRACE_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <zlib.h>

#include "torchwrapper/reader.h"

#include "index.h"
#include "inputs.h"
#include "site_texts.h"
#include "sink.h"

#define TRACE_NONE UINT32_MAX

/* The track of a process's steps (ProfilerStep#N), above its threads: no thread has this id. */
#define TRACE_STEPS_TID 0x3FFFFFFFull

/* One output file. */
typedef struct trace_out {
    char *path;
    int64_t rank;      /* the rank its distributedInfo names; -1: it has none */
    FILE *file;        /* open: file (plain JSON) or gz; both NULL while closed */
    gzFile gz;
    int started;       /* its head is written: opened again, it is appended to */
    uint64_t last_use; /* the least recently used one is closed when too many are open */
    char *buf;
    size_t used;
    int failed;
    int64_t gpu_pid;   /* the process whose GPU work is on device tracks (pid = device); 0: none yet */
    struct trace_track { int64_t pid; uint64_t tid; } *tracks; /* named so far */
    size_t ntracks, track_capacity;
} trace_out_t;

/* One process of the run. */
typedef struct trace_proc {
    int64_t pid;
    size_t out;       /* its output */
    int64_t offset_ns; /* its clock's offset to rank 0's (clock_sync), added to its times */
    /* its steps: [ts, end] of the calls that began in each and hold no call of another */
    struct trace_step { int64_t step, ts, end; } *steps;
    size_t nsteps, step_capacity;
} trace_proc_t;

/* A CUDA call that launched GPU work (the GPU row's launch columns): drawn as a cuda_runtime event
 * inside the call that made it, with an arrow to the work. */
typedef struct trace_launch {
    int64_t start, end;   /* ns since the origin, on rank 0's clock */
    int64_t gpu_ts;       /* the work's */
    int64_t gpu_pid;
    uint64_t gpu_tid;
    uint64_t correlation;
    uint32_t next;        /* the next launch of the same call; TRACE_NONE */
    uint16_t name;        /* in the launch names */
} trace_launch_t;

/* A thread's event held until its outermost call has come. */
enum { NODE_CALL = 0, NODE_RUNTIME = 1 };
typedef struct trace_node {
    int64_t ts, end; /* ns since the origin; clipped to the parent when it comes */
    int64_t step;    /* -1: none */
    uint64_t call_id, parent_id, depth, fwd_call_id;
    size_t text;     /* in the thread's text: the event's fields after its times */
    uint32_t text_len;
    uint32_t first_child, last_child, next; /* the children, in time order; TRACE_NONE */
    uint32_t launch; /* NODE_RUNTIME: its launch */
    uint8_t kind;
    uint8_t multi;   /* calls inside it began in another step than it did */
    uint8_t arrow;   /* an arrow from this call to GPU work whose CUDA call is not known */
} trace_node_t;

typedef struct trace_thread {
    int64_t pid;
    uint64_t tid;
    size_t proc;
    trace_node_t *nodes;
    uint32_t nnodes, node_capacity;
    char *text;
    size_t text_used, text_capacity;
    uint32_t *roots; /* the nodes no parent has taken yet, oldest first */
    uint32_t nroots, root_capacity;
    int64_t last_end; /* of the last outermost event written: the next starts no earlier */
} trace_thread_t;

typedef struct trace {
    report_sink_t sink;
    const inputs_t *in;
    const report_sites_t *sites;
    const char *path;
    int dir;           /* path is a directory: a file per rank */
    uint64_t limit;    /* calls written at most; 0: all */
    uint64_t events;   /* calls written */
    uint64_t skipped;  /* calls beyond --limit */
    int64_t origin_ns;
    int64_t world_size;
    int any_rank;      /* some process has a rank */
    trace_out_t *outs;
    size_t nouts, outs_capacity, open_outs;
    uint64_t uses;
    trace_proc_t *procs;
    size_t nprocs, procs_capacity, proc_hint;
    trace_thread_t *threads;
    size_t nthreads, threads_capacity;
    uint32_t *thread_slots; /* (pid, tid) -> thread + 1, open addressing; 0: empty */
    size_t thread_slot_capacity;
    /* The calls that launched GPU work, (pid, call id) -> their launches and whether an arrow from the
     * call is drawn (work whose CUDA call is not known). */
    struct trace_launcher { int64_t pid; uint64_t call_id; uint32_t first; uint8_t arrow; } *launchers;
    size_t launcher_capacity, nlaunchers;
    trace_launch_t *launches;
    uint32_t nlaunches, launch_capacity;
    char launch_names[64][48];
    size_t nlaunch_names;
    /* The pass's: the calls read lately, each with its time on the trace (our value: the row's, then
     * once written its final one) for a backward node's Fwd thread id and arrow; and the nodes
     * written before their forward call (REPORT_WAIT_TRACE_FORWARD, a: the node's time, b: its
     * thread), whose arrows are drawn when it is. */
    report_index_t *index;
    uint64_t flows;    /* arrows drawn: the next one's id */
} trace_t;

#endif
