/* SPDX-License-Identifier: MIT */
/* The writer tests' fixture (test_writer*.c): see writer_fixture.c. */
#ifndef TW_WRITER_FIXTURE_H
#define TW_WRITER_FIXTURE_H
#include "tw_test.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* API names that need quoting or escaping in every format; calls cycle through them. */
extern const char *const weird_names[];
#define WEIRD_COUNT ((size_t)8)

#define GPU_HEADER "call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid"

typedef struct {
    char dir[256];
    tw_recorder_t *rec;
    tw_writer_t *writer;
    tw_clock_t clock;
    uint32_t ids[WEIRD_COUNT];
} fixture_t;

typedef struct {
    uint64_t rows;          /* data rows */
    uint64_t per_name[WEIRD_COUNT];
    int field;
    int header_ok;
    int in_header;
    int unknown;
    uint64_t files;
    uint64_t max_file_size;
    uint64_t pid_rows;      /* rows whose pid column equals `pid` */
    long pid;
    char first[128];        /* first field of the current row */
    uint64_t incomplete;    /* gzip files that are not one whole member */
    char *data;             /* with keep_data: every file's data rows (after the CSV header), in name order */
    size_t data_len;
} readback_t;

/* A writer of config in a new temporary directory, over a recorder, with the weird names interned. */
void open_fixture(fixture_t *f, tw_writer_config_t config);
/* n calls on this thread, cycling through ids; every fifth an error. */
void record_calls(tw_recorder_t *rec, const uint32_t *ids, uint64_t n);
/* Everything recorded handed to the writer, and the writer closed (its files complete). */
void close_fixture(fixture_t *f);
/* The first call-record file of a closed fixture (serial names, no rank: tw-PID-0001ext), opened for
 * reading; fails the test when it is missing. */
FILE *open_first_records(const fixture_t *f, const char *ext);
/* The writer and recorder destroyed, the directory removed. */
void free_fixture(fixture_t *f);
/* The files of dir ending in ext (gzip inflated), in name order, counted; keep_data: their rows kept. */
readback_t read_back_data(const char *dir, const char *ext, long pid, int keep_data);
readback_t read_back(const char *dir, const char *ext, long pid);
/* A JSON file parsed, or NULL. */
cJSON *read_json_file(const char *path);
/* The resource columns (flops .. mem_peak) cut off a CSV line, its newline kept. */
char *cut_resource_columns(char *line);
#endif
