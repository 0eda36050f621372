/* SPDX-License-Identifier: MIT */
/*
 * tw-report -j N: the pass over the record files on N threads (see jobs.h).
 *
 * The work is cut into units, in the order one thread would read them (GPU files first, then the
 * call files, each in the inputs' order): a whole file, or a byte range of a file larger than the
 * range size. Threads take units from a queue and feed each unit's rows to sinks of their own (a
 * pass_t each, as the one-thread pass has); once every thread is joined, their sinks are merged
 * into the driver's, in the threads' order, and their counters added up. Every sink that reads
 * this way has a merge that does not depend on which rows each thread got (sink.h), so the output
 * is byte for byte the one thread's: sinks without one make the whole report read on one thread.
 *
 * Ranges: a range holds the records that start in it (tw_reader_open_range); its first record is
 * the first line that begins in it. JSON lines hold no raw line end inside a record, so every line
 * start is a record start. A CSV record can: a quoted field may hold line ends (tw_csv_split reads
 * "a\nb" as one field), and a range cut inside one would start mid-record. Rather than scan the
 * file for quotes before cutting it (one more read of it all, on one thread), each range reports
 * where its records began and ended, and the ranges of a file must chain: the first one starts at
 * a record (the header), and reads records exactly as one pass would, so where it ends is a record
 * boundary; the next one, begun at the first line start past its cut, read the same records as one
 * pass exactly when it began there, and so on. A range that does not begin where the one before it
 * ended (or any read error) and the report is read again on one thread: correct always, and the
 * cost of a second pass only for files with quoted line ends at a cut (the writer escapes none).
 *
 * Threads share the queue (its next unit and failed flag, under its lock) and nothing else that is
 * written: each writes its own pass, sinks and counters, and the units it took (their result),
 * which the driver reads after the join. The options, inputs and sites are only read. Memory is the
 * one-thread pass's per thread: a reader's buffers and the sinks' tables, whatever the input size.
 */
#include "config.h"
#include "jobs.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "torchwrapper/common.h"

#include "util.h"

typedef struct unit {
    size_t file;            /* in in->files */
    int gpu;                /* read in the GPU pass (pass_t.gpu_pass) */
    int ranged;             /* a byte range of a large file; else the whole file */
    uint64_t offset, length;
    /* Written by the thread that read it, read by the driver after the join. */
    int rc;
    uint64_t first, end;    /* ranged: where its records began and ended */
} unit_t;

typedef struct queue {
    pthread_mutex_t lock;
    const inputs_t *in;
    unit_t *units;
    size_t count;
    size_t next;            /* the next unit to take: under lock */
    size_t end;             /* this round's units end here (see report_read_jobs) */
    int failed;             /* a unit failed: the rest need not be read. Under lock */
} queue_t;

typedef struct worker {
    pthread_t thread;
    queue_t *queue;
    pass_t pass;            /* this thread's: its sinks and counters */
    tw_read_stats_t stats;
} worker_t;

/* The range size: REPORT_RANGE_ENV when set to a count >= 1, else REPORT_RANGE_BYTES. */
static uint64_t range_bytes(void)
{
    const char *text = getenv(REPORT_RANGE_ENV);
    char *end;
    if (text == NULL || *text < '0' || *text > '9')
        return REPORT_RANGE_BYTES;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    return errno != 0 || *end != '\0' || v == 0 ? REPORT_RANGE_BYTES : v;
}

/* The units, in one thread's order, into *units (*count); 0, TW_ENOMEM, or -errno of stat. */
static int make_units(const inputs_t *in, unit_t **units, size_t *count)
{
    uint64_t size = range_bytes();
    size_t n = 0, capacity = 0;
    unit_t *list = NULL;
    *units = NULL;
    *count = 0;
    for (int gpu = 1; gpu >= 0; gpu--) {
        for (size_t i = 0; i < in->count; i++) {
            if ((in->files[i].kind == TW_FILE_GPU) != gpu || in->files[i].kind == 0)
                continue;
            struct stat st;
            if (stat(in->files[i].path, &st) != 0) {
                free(list);
                return -errno;
            }
            uint64_t bytes = st.st_size > 0 ? (uint64_t)st.st_size : 0;
            /* a gzip file is read whole: its records' offsets are not its bytes' (a file so named
             * that is not one is read whole too; one not so named fails its ranges: one thread) */
            int whole = report_has_suffix(in->files[i].path, ".gz");
            uint64_t parts = bytes > size && !whole ? (bytes + size - 1) / size : 1;
            for (uint64_t k = 0; k < parts; k++) {
                if (n == capacity) {
                    capacity = capacity ? capacity * 2 : 64;
                    unit_t *bigger = realloc(list, capacity * sizeof *list);
                    if (bigger == NULL) {
                        free(list);
                        return TW_ENOMEM;
                    }
                    list = bigger;
                }
                /* The last range reads to the end, wherever that is now (a file still written). */
                list[n++] = (unit_t){.file = i, .gpu = gpu, .ranged = parts > 1, .offset = k * size,
                                     .length = k + 1 < parts ? size : UINT64_MAX};
            }
        }
    }
    *units = list;
    *count = n;
    return 0;
}

/* Reads one unit into w's sinks: 0, or the reader's error (its message is not kept: the report is
 * then read on one thread, which says it). */
static int read_unit(worker_t *w, unit_t *u)
{
    const char *path = w->queue->in->files[u->file].path;
    char message[512];
    tw_reader_t *reader;
    int more;
    w->pass.gpu_pass = u->gpu;
    int rc = u->ranged ? tw_reader_open_range(path, u->offset, u->length, &w->stats, &reader, message, sizeof message)
                       : tw_reader_open(path, &w->stats, &reader, message, sizeof message);
    if (rc != 0)
        return rc;
    rc = tw_reader_next(reader, report_pass_row, &w->pass, 0, &more, message, sizeof message);
    if (u->ranged)
        tw_reader_range(reader, &u->first, &u->end);
    tw_reader_close(reader);
    return rc;
}

static void *work(void *arg)
{
    worker_t *w = arg;
    queue_t *q = w->queue;
    for (;;) {
        pthread_mutex_lock(&q->lock);
        size_t i = q->failed || q->next >= q->end ? q->end : q->next++;
        pthread_mutex_unlock(&q->lock);
        if (i == q->end)
            return NULL;
        if ((q->units[i].rc = read_unit(w, &q->units[i])) != 0) {
            pthread_mutex_lock(&q->lock);
            q->failed = 1;
            pthread_mutex_unlock(&q->lock);
        }
    }
}

/* 1 when every range began where the one before it in its file ended (see the top). */
static int ranges_chain(const unit_t *units, size_t count)
{
    for (size_t i = 0; i + 1 < count; i++)
        if (units[i].ranged && units[i + 1].ranged && units[i + 1].file == units[i].file &&
            units[i + 1].first != units[i].end)
            return 0;
    return 1;
}

/* The workers' sinks and counters into p's and stats. */
static void merge_into(pass_t *p, worker_t *workers, size_t nworkers, tw_read_stats_t *stats)
{
    for (size_t t = 0; t < nworkers; t++) {
        pass_t *w = &workers[t].pass;
        for (size_t s = 0; s < p->nsinks; s++)
            if (p->sinks[s]->ops->merge(p->sinks[s], w->sinks[s]) == TW_ENOMEM)
                p->out.oom = 1;
        p->out.kept += w->out.kept;
        p->out.filtered += w->out.filtered;
        p->out.oom |= w->out.oom;
        stats->rows += workers[t].stats.rows;
        stats->truncated += workers[t].stats.truncated;
        stats->malformed += workers[t].stats.malformed;
        stats->bytes += workers[t].stats.bytes;
    }
}

/* The threads' passes, each a copy of p's (options, filters) with sinks of its own; 0, or 1 (fall
 * back to one thread) when no memory for them. */
static int open_workers(const pass_t *p, const inputs_t *in, const report_sites_t *sites, worker_t *workers,
                        size_t nworkers, queue_t *q)
{
    /* A sink that fails to open says so on err; here the report then goes on one thread: quiet. */
    FILE *quiet = fopen("/dev/null", "w");
    if (quiet == NULL)
        return 1;
    int rc = 0;
    for (size_t t = 0; t < nworkers; t++) {
        worker_t *w = &workers[t];
        w->queue = q;
        w->pass = *p;
        w->pass.nsinks = 0;
        memset(&w->pass.index, 0, sizeof w->pass.index); /* its own */
        w->pass.out.kept = w->pass.out.filtered = 0;
        w->pass.out.oom = 0;
        w->pass.out.stats = &w->stats;
        if (rc == 0 && (report_open_sinks(&w->pass, p->out.o, in, sites, quiet) != 0 || w->pass.nsinks != p->nsinks))
            rc = 1;
    }
    fclose(quiet);
    return rc;
}

static void free_workers(worker_t *workers, size_t nworkers)
{
    for (size_t t = 0; t < nworkers; t++)
        for (size_t s = 0; s < workers[t].pass.nsinks; s++)
            workers[t].pass.sinks[s]->ops->free(workers[t].pass.sinks[s]);
    for (size_t t = 0; t < nworkers; t++)
        report_index_free(&workers[t].pass.index);
    free(workers);
}

/* Reads units up to q->end on the workers' threads; 0, or 1 when some unit failed or a thread did
 * not start (the rest stopped). */
static int run_round(worker_t *workers, size_t nworkers, queue_t *q)
{
    size_t started = 0;
    for (; started < nworkers; started++)
        if (pthread_create(&workers[started].thread, NULL, work, &workers[started]) != 0)
            break;
    if (started < nworkers) { /* no thread for the rest: stop the others, read on one */
        pthread_mutex_lock(&q->lock);
        q->failed = 1;
        pthread_mutex_unlock(&q->lock);
    }
    for (size_t t = 0; t < started; t++)
        pthread_join(workers[t].thread, NULL);
    return q->failed;
}

/* Between the GPU files and the others: the driver's sinks that have a gpu_read see the threads'
 * (sink.h); 0, or 1 when one is out of memory (then read on one thread, which says so). */
static int gpu_read(pass_t *p, worker_t *workers, size_t nworkers)
{
    report_sink_t **threads = calloc(nworkers, sizeof *threads);
    if (threads == NULL)
        return 1;
    int rc = 0;
    for (size_t s = 0; rc == 0 && s < p->nsinks; s++) {
        if (p->sinks[s]->ops->gpu_read == NULL)
            continue;
        for (size_t t = 0; t < nworkers; t++)
            threads[t] = workers[t].pass.sinks[s];
        rc = p->sinks[s]->ops->gpu_read(p->sinks[s], threads, nworkers) != 0;
    }
    free(threads);
    return rc;
}

int report_read_jobs(pass_t *p, const inputs_t *in, const report_sites_t *sites, tw_read_stats_t *stats,
                     FILE *err)
{
    (void)err; /* what fails here is said by the one-thread pass that follows */
    unsigned jobs = p->out.o->jobs;
    if (jobs <= 1 || p->prepass)
        return 1;
    for (size_t s = 0; s < p->nsinks; s++)
        if (p->sinks[s]->ops->merge == NULL)
            return 1;
    queue_t q = {.in = in};
    if (make_units(in, &q.units, &q.count) != 0 || q.count < 2) {
        free(q.units);
        return 1;
    }
    size_t nworkers = jobs < q.count ? jobs : q.count;
    worker_t *workers = calloc(nworkers, sizeof *workers);
    int rc = workers == NULL || pthread_mutex_init(&q.lock, NULL) != 0 ? -1 : 0;
    if (rc != 0) {
        free(workers);
        free(q.units);
        return 1;
    }
    rc = open_workers(p, in, sites, workers, nworkers, &q);
    /* Two rounds when a sink reads something of the GPU files in the others (the units come GPU
     * files first): every thread's GPU units are read before any call unit, as in one pass. */
    size_t gpu_units = 0;
    while (gpu_units < q.count && q.units[gpu_units].gpu)
        gpu_units++;
    int two_rounds = 0;
    for (size_t s = 0; s < p->nsinks; s++)
        two_rounds |= p->sinks[s]->ops->gpu_read != NULL;
    two_rounds &= gpu_units > 0 && gpu_units < q.count;
    q.end = two_rounds ? gpu_units : q.count;
    if (rc == 0)
        rc = run_round(workers, nworkers, &q);
    if (rc == 0 && two_rounds) {
        rc = gpu_read(p, workers, nworkers);
        q.end = q.count;
        if (rc == 0)
            rc = run_round(workers, nworkers, &q);
    }
    pthread_mutex_destroy(&q.lock);
    int read = rc == 0 && !q.failed && ranges_chain(q.units, q.count);
    if (read)
        merge_into(p, workers, nworkers, stats);
    free_workers(workers, nworkers);
    free(q.units);
    return read ? 0 : 1;
}
