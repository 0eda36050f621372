/* SPDX-License-Identifier: MIT */
/* The GPU tests' fixture (test_gpu*.c): see gpu_fixture.c. */
#ifndef TW_GPU_FIXTURE_H
#define TW_GPU_FIXTURE_H
#include "tw_test.h"

#include <cjson/cJSON.h>

#include "torchwrapper/gpu.h"

/* ---- the fake's controls (fake_cupti.c's fake_cupti_* functions, found with dlsym) ------------------ */

typedef struct {
    void (*reset)(void);
    void (*set_busy)(int);
    void (*set_no_api_records)(int);
    void (*set_enable_error)(int);
    int (*subscribed)(void);
    uint64_t (*enabled)(void);
    uint64_t (*calls)(void);
    uint64_t (*flushes)(void);
    unsigned (*depth)(int);
    uint64_t (*now)(void);
    void (*drop)(size_t);
    uint32_t (*launch)(int, const char *, int, uint64_t, uint64_t, uint32_t, uint32_t);
    void (*complete_api_buffer)(void);
    void (*complete_device_buffer)(void);
} fake_cupti_t;

extern fake_cupti_t fake;
/* $FAKE_CUPTI: the fake's path, which TW_CUPTI_LIBRARY names. */
extern const char *fake_path;

enum { KERNEL = 0, MEMCPY = 1, MEMSET = 2 };

/* A program's start: the fake loaded through TW_CUPTI_LIBRARY and its controls found. Returns 0, or
 * 77 (skip, said on stderr) when $FAKE_CUPTI is not set or not readable. */
int load_fake_cupti(void);

/* ---- a writer and a GPU session -------------------------------------------------------------------- */

typedef struct {
    char dir[256];
    tw_recorder_t *rec;
    tw_writer_t *writer;
    tw_clock_t clock;
    tw_gpu_t *gpu;
    const tw_gpu_hooks_t *hooks;
    tw_thread_t *t;
    uint32_t api[4]; /* "torch.matmul", "torch.nn.Linear.forward", "torch.conv2d", "api, \"quoted\"" */
} fixture_t;

/* A writer of format in a new temporary directory, over a recorder, this thread attached; no GPU. */
void open_writer(fixture_t *f, tw_format_t format);
/* tw_gpu_start on f's writer (f->hooks set when it succeeds); its return code and reason. */
int start_gpu(fixture_t *f, uint64_t flush_interval_ns, char *reason, size_t size);
/* The fake reset, then a writer and a GPU session whose flush thread stays out of the way (tests
 * flush themselves). */
void open_fixture(fixture_t *f, tw_format_t format);
/* The GPU session stopped, everything recorded handed to the writer, the writer closed. */
void close_fixture(fixture_t *f);
/* The session, writer and recorder destroyed, the directory removed. */
void free_fixture(fixture_t *f);

/* The wrapper's part: enter a call of api (push), ... leave it (pop, record). */
typedef struct {
    tw_frame_t *frame;
    uint64_t start;
    uint64_t end;
    uint64_t call_id;
    uint32_t api_id;
} call_t;

call_t enter(fixture_t *f, uint32_t api_id);
void leave(fixture_t *f, call_t *c);
void sleep_us(long us);

/* ---- reading the files back ------------------------------------------------------------------------ */

typedef struct {
    uint64_t call_id;
    char api[256];
    char kind[256];
    char name[256];
    int64_t start_ns;
    int64_t end_ns;
    uint64_t device;
    uint64_t stream;
    uint64_t correlation_id;
    int64_t pid;
    int64_t launch_start_ns; /* the CUDA call that launched it */
    int64_t launch_end_ns;
    char launch[64];
} gpu_row_t;

typedef struct {
    gpu_row_t rows[4096];
    size_t count;
    int field;
    int header;
    int header_ok;
} gpu_rows_t;

/* dir/name parsed (a new cJSON), or NULL when it cannot be read. */
cJSON *read_json(const char *dir, const char *name);
/* Every GPU row of the files the manifest lists with "kind": "gpu" (CSV or JSON lines); the caller
 * frees it. */
gpu_rows_t *read_gpu_rows(const char *dir);
/* The row of a correlation id (the test fails without one). */
const gpu_row_t *row_of(const gpu_rows_t *r, uint32_t correlation_id);
/* summary.json's gpu_ns of an API (-1 when it is not listed). */
int64_t summary_gpu_ns(const char *dir, const char *api);
/* The manifest's "gpu" stream (borrowed from m), or NULL. */
cJSON *gpu_stream_of_manifest(cJSON *m);
#endif
