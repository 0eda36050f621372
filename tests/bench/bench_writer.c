/* SPDX-License-Identifier: MIT */
/*
 * Writer throughput (records per second written to files, one writer thread, CSV and JSON, plain and
 * compressed: compress "gzip", with the bytes a record takes on disk) and the cost of appending one
 * record on the calling thread (tw_call_begin + tw_call_end, no clock).
 * Output goes to a temporary directory that is removed afterwards.
 *
 * bench_writer N csv|json: only that format, plain, and nothing else: run under callgrind at two N,
 * the difference over the difference of N is the writer's instructions a record.
 */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "torchwrapper/torchwrapper.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void rm_rf(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d != NULL)
        closedir(d);
    rmdir(dir);
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Records are produced on this thread first (not timed), then the writer is timed alone. */
typedef struct {
    tw_chunk_t **chunks;
    size_t count;
} copies_t;

/* Copies a recorded chunk into one of the library's layout (records, then text), for the writer. */
static int copy_chunk(const tw_chunk_t *chunk, void *arg)
{
    copies_t *c = arg;
    size_t records = chunk->capacity * sizeof(tw_record_t);
    tw_chunk_t *copy = malloc(sizeof *copy + records + chunk->text_capacity);
    if (copy == NULL)
        return -1;
    memcpy(copy, chunk, sizeof *copy + records);
    copy->text = (char *)(copy->records + chunk->capacity);
    memcpy(copy->text, chunk->text, chunk->text_used);
    c->chunks[c->count++] = copy;
    return 0;
}

/* Records per second through one writer thread; *per_record receives the bytes a record took on disk. */
static double writer_throughput(tw_format_t format, tw_compress_t compress, uint64_t n, uint32_t *ids, int nids,
                                double *per_record)
{
    char dir[] = "/tmp/tw-bench-writer-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 0;
    tw_recorder_t *rec;
    tw_recorder_create(&rec);
    tw_thread_t *t = tw_recorder_attach(rec);
    for (uint64_t i = 0; i < n; i++) {
        tw_frame_t *f = tw_call_begin(t);
        tw_call_end(t, f, ids[i % nids], 2300 * i, 2300 * i + 5000 + i % 777, 0);
    }
    tw_recorder_collect(rec);
    tw_recorder_stats_t rs;
    tw_recorder_stats(rec, &rs);
    copies_t copies = {calloc(rs.chunks, sizeof(tw_chunk_t *)), 0};
    if (copies.chunks == NULL || tw_recorder_foreach_chunk(rec, copy_chunk, &copies) != 0)
        return 0;
    tw_clock_t clock;
    tw_clock_init_manual(&clock, TW_CLOCK_TSC, 0, 1700000000000000000LL, 2.3);
    tw_writer_config_t config = {.out_dir = dir, .format = format, .file_max_size = 256u << 20,
                                 .file_name_spec = "serial", .buffer_bytes = 1ull << 40, .rank = -1,
                                 .compress = compress};
    tw_writer_t *w;
    char err[256];
    /* Records were made before the writer started: only handing them over and writing is timed. The
     * writer drains a queue of its own: the recorder's still holds the originals, which it would
     * write too (a queue a writer attaches to is drained from its first chunk). */
    tw_queue_t *queue;
    if (tw_queue_create(&queue) != 0 || tw_writer_create(&config, queue, &clock, &w, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 0;
    }
    double t0 = now_s();
    for (size_t i = 0; i < copies.count; i++)
        tw_writer_enqueue(w, copies.chunks[i]); /* the writer owns them now */
    tw_writer_close(w);
    double elapsed = now_s() - t0;
    tw_writer_stats_t ws;
    tw_writer_stats(w, &ws);
    if (ws.records_written != n)
        fprintf(stderr, "wrote %llu of %llu records\n", (unsigned long long)ws.records_written, (unsigned long long)n);
    double mb = ws.bytes_written / 1e6;
    tw_writer_destroy(w);
    tw_queue_destroy(queue);
    tw_recorder_destroy(rec);
    free(copies.chunks);
    rm_rf(dir);
    *per_record = (double)ws.bytes_written / (double)n;
    printf("  %-5s %-5s %8.2f M records/s  %7.0f MB/s  %6.1f bytes/record  (%llu records, %.0f MB, one writer "
           "thread)\n", format == TW_FORMAT_CSV ? "CSV" : "JSON", compress == TW_COMPRESS_GZIP ? "gzip" : "plain",
           n / elapsed / 1e6, mb / elapsed, *per_record, (unsigned long long)n, mb);
    return n / elapsed;
}

static double append_cost_ns(void)
{
    enum { N = 1000, REPS = 2001 };
    static double samples[REPS];
    tw_recorder_t *rec;
    tw_recorder_create(&rec);
    tw_thread_t *t = tw_recorder_attach(rec);
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = now_s();
        for (uint64_t i = 0; i < N; i++) {
            tw_frame_t *f = tw_call_begin(t);
            tw_call_end(t, f, 1, i, i + 9, 0);
        }
        samples[rep] = (now_s() - t0) / N * 1e9;
        if (rep % 200 == 199) { /* recycle chunks, as the writer does, so memory stays warm */
            tw_recorder_destroy(rec);
            tw_recorder_create(&rec);
            t = tw_recorder_attach(rec);
        }
    }
    tw_recorder_destroy(rec);
    qsort(samples, REPS, sizeof samples[0], compare_double);
    return samples[REPS / 2];
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 5000000;
    const char *names[] = {"torch.add", "torch.nn.functional.relu", "torch.Tensor.__add__",
                           "torch.nn.modules.linear.Linear.forward", "torch.optim.Adam.step"};
    uint32_t ids[5];
    for (int i = 0; i < 5; i++)
        tw_api_intern(names[i], &ids[i]);
    if (argc > 2) { /* one format only (callgrind) */
        double bytes;
        int json_only = strcmp(argv[2], "json") == 0;
        if (!json_only && strcmp(argv[2], "csv") != 0) {
            fprintf(stderr, "bench_writer: format '%s' is not accepted: give csv or json\n", argv[2]);
            return 2;
        }
        return writer_throughput(json_only ? TW_FORMAT_JSON : TW_FORMAT_CSV, TW_COMPRESS_NONE, n, ids, 5, &bytes) > 0
                   ? 0 : 1;
    }
    printf("writer throughput, %llu records (targets: 2 M/s CSV, 1 M/s JSON):\n", (unsigned long long)n);
    double csv_bytes, json_bytes, csv_gz_bytes, json_gz_bytes;
    double csv = writer_throughput(TW_FORMAT_CSV, TW_COMPRESS_NONE, n, ids, 5, &csv_bytes);
    double json = writer_throughput(TW_FORMAT_JSON, TW_COMPRESS_NONE, n, ids, 5, &json_bytes);
    double csv_gz = writer_throughput(TW_FORMAT_CSV, TW_COMPRESS_GZIP, n, ids, 5, &csv_gz_bytes);
    double json_gz = writer_throughput(TW_FORMAT_JSON, TW_COMPRESS_GZIP, n, ids, 5, &json_gz_bytes);
    double append = append_cost_ns();
    printf("appending one record on the calling thread: %.1f ns median (target: under 10 ns)\n", append);
    printf("{\"csv_records_per_s\": %.0f, \"json_records_per_s\": %.0f, \"csv_gzip_records_per_s\": %.0f, "
           "\"json_gzip_records_per_s\": %.0f, \"csv_bytes_per_record\": %.1f, \"json_bytes_per_record\": %.1f, "
           "\"csv_gzip_bytes_per_record\": %.1f, \"json_gzip_bytes_per_record\": %.1f, \"append_ns\": %.2f}\n",
           csv, json, csv_gz, json_gz, csv_bytes, json_bytes, csv_gz_bytes, json_gz_bytes, append);
    return 0;
}
