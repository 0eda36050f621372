/* SPDX-License-Identifier: MIT */
/*
 * The writer's state, shared by its parts (not public API), each above the ones it uses. The writer
 * thread (writer.c: the thread, create/close and fork) drains sources: the call records of the chunk
 * queue (writer_calls.c) and each row stream (writer_streams.c: GPU rows, tensor statistics,
 * parameter updates), all through one interface (writer_source_ops_t); every row carries its step,
 * so that each source follows the schedule and lands in the capture of its step
 * (writer_captures.c); all of them write through out_dir's files and manifest (writer_outdir.c). The
 * files are fileset.c's, the manifest's JSON manifest.c's.
 *
 * Memory: every byte waiting for the writer (chunks of call records with their argument text, rows
 * queued on streams) is charged to one budget, the chunk queue's (queue.h), bounded by buffer_size.
 *
 * Who writes: the writer thread runs at the lowest priority (SCHED_IDLE where there is one), so that
 * it uses only CPU time nobody else wants and never takes a core from the program's threads (one of
 * torch's intra-op workers held up makes the whole parallel region wait). A thread starved of CPU
 * would let the budget fill up: past its high-water mark the producers help (queue.h), writing on
 * their own thread. Whoever writes holds the pen, the writer thread one chunk or one stream's rows
 * at a time, so that a producer waiting for it waits for at most that; what the pen guards is the
 * state marked "pen" below, and the source list's files.
 *
 * Lock order: the pen -> recorder registry -> queue -> writer (lock) -> a stream's lock -> the step
 * timeline's lock -> chunk pool. The writer never calls the queue with its own lock held. fork() does
 * not take the pen (the queue's handler, which takes the queue's lock first, calls the writer's): a
 * forked child makes it anew, as it makes its writer thread.
 */
#ifndef TW_WRITER_STATE_H
#define TW_WRITER_STATE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "torchwrapper/queue.h"
#include "torchwrapper/stats.h"
#include "torchwrapper/writer.h"
#include "fileset.h"
#include "format.h"
#include "manifest.h"

#define WRITER_SOURCES_MAX 8   /* the calls and up to 7 streams */
#define WRITER_TIMELINE 256     /* step boundaries remembered, to find the step of a moment */

typedef struct writer_source writer_source_t;

/* What a source does for the writer. Each is called by the writer thread, except close (the closing
 * thread), the fork handlers (the forking thread, with the writer's lock held) and free. */
typedef struct writer_source_ops {
    /* Writes what the source holds: to its files in the steps the schedule records, to a capture's
     * files in a capture's steps. The writer thread, without the pen: it takes the pen for each
     * piece (a chunk, a stream's rows), and leaves the rest to a producer waiting for the pen. */
    void (*drain)(tw_writer_t *w, writer_source_t *s);
    /* The same with the pen held: everything queued (all: the closing thread), or a bounded share (a
     * producer helping). */
    void (*write)(tw_writer_t *w, writer_source_t *s, int all);
    /* Producers are refused from now on (tw_writer_close began). */
    void (*close)(writer_source_t *s);
    void (*fork_prepare)(writer_source_t *s);
    void (*fork_parent)(writer_source_t *s);
    /* In a forked child: what the source held is the parent's. */
    void (*fork_child)(writer_source_t *s);
    void (*free)(writer_source_t *s);
} writer_source_ops_t;

/* One kind of record the writer drains. Counters are atomic: producers count what they refuse. */
struct writer_source {
    const writer_source_ops_t *ops;
    writer_source_t *_Atomic next; /* added under the writer's lock, at the tail; links never change,
                                    * so that the writer thread walks the list without the lock */
    unsigned index;            /* 0: the calls; a capture's files of this kind are its files[index] */
    char kind[TW_STREAM_KIND_MAX + 1];
    tw_fileset_t files;        /* out_dir's files of this kind (pen) */
    _Atomic uint64_t dropped_full;     /* no room in the memory budget, or no memory */
    _Atomic uint64_t dropped_invalid;  /* too long for a file, or not one line */
    _Atomic uint64_t dropped_closed;   /* came once the writer was closing */
    _Atomic uint64_t dropped_upstream; /* lost before they reached the writer (CUPTI's buffers) */
};

typedef enum { CAPTURE_RECORDING, CAPTURE_ENDING, CAPTURE_DONE } capture_state_t;

/* An on-demand capture (tw_writer_capture): files of every kind, a manifest and a summary in dir. */
typedef struct capture {
    uint32_t id;
    uint64_t from, to;       /* steps [from, to); to is cut to the steps recorded when the program ends first */
    uint64_t asked;          /* steps asked for */
    uint64_t last_step;      /* the largest step of its records so far (pen) */
    char *dir;
    char *manifest_extra;    /* the writer's, with "capture" */
    char manifest_path[PATH_MAX];
    char summary_path[PATH_MAX];
    tw_fileset_env_t env;    /* the writer's, in dir; its lock is the writer's */
    tw_fileset_t files[WRITER_SOURCES_MAX]; /* by source index; a kind's buffer made at its first row */
    tw_stats_t stats;        /* pen */
    int64_t start_ns, end_ns;
    capture_state_t state;   /* under the writer's lock; only the writer thread moves it */
    _Atomic uint64_t late;   /* records of its steps that came after it was done */
} capture_t;

struct tw_writer {
    /* configuration (owned copies) */
    char *out_dir;
    char *spec;
    char *manifest_extra;
    uint64_t flush_interval_ns;
    uint64_t buffer_bytes;  /* the memory budget (queue.h) */
    tw_schedule_t schedule; /* the steps whose records are written */
    int summary_only;       /* no record files */
    tw_clock_t clock;
    tw_queue_t *queue;      /* the chunk queue (the recorder pushes to it), and the memory budget */
    int64_t start_ns;
    int64_t end_ns;
    char manifest_path[PATH_MAX];
    char summary_path[PATH_MAX];
    tw_sites_t *sites;      /* the caller's, or NULL */
    char sites_path[PATH_MAX];
    uint32_t sites_written; /* sites in the file written last */
    int sites_file_written; /* sites.json exists (even with no site in it) */

    /* held by whoever writes: the writer thread, a producer helping it, the closing thread (see the top) */
    pthread_mutex_t pen;
    int pen_closed;              /* closed: nobody writes any more, the files are closed (pen) */
    _Atomic unsigned pen_waiting; /* producers with no room waiting for the pen: the thread leaves them the work */
    _Atomic uint64_t helped;     /* times a producer wrote for the writer thread */
    /* What writing cost the program (the profiler's own cost, the manifest's "writer"): ns producers
     * spent writing for the thread (waiting for the pen included), the thread's CPU time (read by the
     * thread itself after each round), ns the closing thread spent on the last writing */
    _Atomic uint64_t help_ns;
    _Atomic uint64_t thread_cpu_ns;
    _Atomic uint64_t close_ns;
    _Atomic uint64_t flushed_ns; /* the files were last flushed with all queued by then (monotonic time) */
    _Atomic int boosted;         /* the thread was raised to normal priority: it goes back to the lowest */
    _Atomic pid_t tid;           /* the writer thread's, once it runs (Linux) */

    /* guarded by lock */
    pthread_mutex_t lock;
    pthread_cond_t bell;   /* the doorbell: the thread waits on it (CLOCK_MONOTONIC deadlines) */
    _Atomic int rung;      /* work came: chunks pushed, a stream filling up, a capture asked (set without the lock) */
    int stopping;          /* tw_writer_close: drain once more and end */
    uint64_t wakeups;      /* timed waits that returned */
    int thread_running;
    int attached;          /* to the queue, until closed */
    int closed;
    pthread_t thread;
    writer_source_t calls;       /* the first source; the streams follow it */
    tw_format_cache_t calls_format; /* the call records' repeated digits (format.h); the pen held */
    tw_writer_stream_t *gpu;     /* the stream a GPU session opened (tw_writer_gpu_rows), or NULL */
    unsigned source_count;
    capture_t **captures;        /* appended under lock, oldest first; freed by tw_writer_destroy */
    tw_chunk_t *batch;           /* the chunk being written (popped, not released yet): a forked
                                  * child, where its writer is gone, gives it back to the pool */
    size_t capture_count, capture_capacity;
    int manifest_due;            /* a capture began: the writer thread rewrites the manifest (with the pen) */
    _Atomic uint64_t step;       /* the program's step (tw_writer_set_step) */
    uint64_t truncated;          /* call records cut to fit a file */
    _Atomic uint64_t stream_bytes; /* of the budget, the streams' part: at most half of it, so that a
                                    * burst of rows never starves the call records */
    /* the files: names, counters and first error (env.lock is &lock) */
    tw_fileset_env_t env;

    /* the step timeline: when each of the last WRITER_TIMELINE steps began, on the records' clock */
    pthread_mutex_t timeline_lock;
    struct {
        uint64_t step;
        int64_t begin_ns;
    } timeline[WRITER_TIMELINE];
    unsigned timeline_next, timeline_count;

    /* pen */
    tw_stats_t stats;
    uint64_t summary_changes; /* calls and GPU rows added to stats since summary.json was written */
    /* The captures as the pen's holder sees them: a copy of the list, taken when it grew, so that a
     * record finds its capture (however many there are) without the lock. */
    capture_t **capture_view;
    size_t capture_view_count, capture_view_capacity;
    size_t first_open_capture; /* of the view: the captures before it are done */
};

/*
 * Rings the writer's doorbell: the thread drains its sources now rather than at the next interval
 * (whoever brings work: the queue, a stream filling up, a capture asked). Never waits for the lock:
 * the writer thread, at the lowest priority, holds it while it rewrites the manifest, and beside busy
 * processes it got no CPU for a minute while a recording thread waited here (make check-load:
 * test_pipeline's child did not exit 60 s after SIGINT). The flag is seen by the thread before it
 * sleeps (wait_for_work reads it under the lock); the signal is sent when the lock is free, and a
 * signal missed costs a wait of at most the flush interval, never a record.
 */
static inline void tw_writer_ring(tw_writer_t *w)
{
    atomic_store(&w->rung, 1);
    if (pthread_mutex_trylock(&w->lock) == 0) {
        pthread_cond_signal(&w->bell);
        pthread_mutex_unlock(&w->lock);
    }
}

#endif
