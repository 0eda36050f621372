/* SPDX-License-Identifier: MIT */
#include "tw_test.h"

#include <cjson/cJSON.h>
#include <csv.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>

#include <cJSON.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zlib.h>

/* write() as the library sees it: the executable's definition interposes on libc's, so errors can
 * be injected into the writer thread's writes. */
static int inject_errno; /* set by the test thread, read by the writer thread: atomic accesses */

ssize_t write(int fd, const void *buf, size_t count)
{
    int injected = __atomic_load_n(&inject_errno, __ATOMIC_RELAXED);
    if (injected != 0 && fd > 2) {
        errno = injected;
        return -1;
    }
    return syscall(SYS_write, fd, buf, count);
}

static const char *const weird_names[] = {
    "torch.add", "torch.Tensor.__add__", "api,with,commas", "api \"with\" quotes", "api\nwith\nnewlines",
    "ünïcödé.名前", " leading and trailing ", "back\\slash\ttab",
};
#define WEIRD_COUNT (sizeof weird_names / sizeof weird_names[0])

typedef struct {
    char dir[256];
    tw_recorder_t *rec;
    tw_writer_t *writer;
    tw_clock_t clock;
    uint32_t ids[WEIRD_COUNT];
} fixture_t;

static void open_fixture(fixture_t *f, tw_writer_config_t config)
{
    strcpy(f->dir, "/tmp/tw-test-writer-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    config.out_dir = f->dir;
    for (size_t i = 0; i < WEIRD_COUNT; i++)
        assert_int_equal(tw_api_intern(weird_names[i], &f->ids[i]), 0);
    assert_int_equal(tw_recorder_create(&f->rec), 0);
    tw_clock_init_manual(&f->clock, TW_CLOCK_MONOTONIC, 0, 1700000000000000000LL, 1.0);
    char err[512] = "";
    assert_int_equal(tw_writer_create(&config, tw_recorder_queue(f->rec), &f->clock, &f->writer, err, sizeof err), 0);
}

static void record_calls(tw_recorder_t *rec, const uint32_t *ids, uint64_t n)
{
    tw_thread_t *t = tw_recorder_attach(rec);
    assert_non_null(t);
    for (uint64_t i = 0; i < n; i++) {
        tw_frame_t *frame = tw_call_begin(t);
        tw_call_end(t, frame, ids[i % WEIRD_COUNT], 1000 * i, 1000 * i + 10 + i % 7, i % 5 == 0 ? TW_RECORD_ERROR : 0);
    }
}

static void close_fixture(fixture_t *f)
{
    tw_recorder_collect(f->rec);
    tw_writer_close(f->writer);
}

static void free_fixture(fixture_t *f)
{
    tw_writer_destroy(f->writer);
    tw_recorder_destroy(f->rec);
    rm_rf(f->dir);
}

/* ---- reading the files back ------------------------------------------------------------------- */

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

static void on_field(void *data, size_t len, void *arg)
{
    readback_t *r = arg;
    if (r->in_header) {
        static const char *const header[] = {"call_id", "api", "start_ns", "cost_ns", "self_ns", "gpu_ns", "pid",
                                             "tid", "depth", "parent_id", "error", "args", "module"};
        if (r->field < 13 && (strlen(header[r->field]) != len || memcmp(header[r->field], data, len) != 0))
            r->header_ok = 0;
    } else if (r->field == 1) {
        size_t i = 0;
        while (i < WEIRD_COUNT && (strlen(weird_names[i]) != len || memcmp(weird_names[i], data, len) != 0))
            i++;
        if (i < WEIRD_COUNT)
            r->per_name[i]++;
        else
            r->unknown++;
    } else if (r->field == 6) {
        char number[32];
        snprintf(number, sizeof number, "%.*s", (int)len, (const char *)data);
        r->pid_rows += strtol(number, NULL, 10) == r->pid;
    }
    r->field++;
}

static void on_row(int c, void *arg)
{
    readback_t *r = arg;
    if (!r->in_header)
        r->rows++;
    r->in_header = 0;
    r->field = 0;
}

static void read_json_line(readback_t *r, const char *line)
{
    cJSON *o = cJSON_Parse(line);
    assert_non_null(o);
    const char *api = cJSON_GetStringValue(cJSON_GetObjectItem(o, "api"));
    assert_non_null(api);
    size_t i = 0;
    while (i < WEIRD_COUNT && strcmp(weird_names[i], api) != 0)
        i++;
    if (i < WEIRD_COUNT)
        r->per_name[i]++;
    else
        r->unknown++;
    if ((long)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "pid")) == r->pid)
        r->pid_rows++;
    assert_true(cJSON_IsBool(cJSON_GetObjectItem(o, "error")));
    r->rows++;
    cJSON_Delete(o);
}

/* What gzip data inflates to (malloc'd, NUL-terminated, *out_len bytes); *complete: whether it is
 * whole members and nothing else (a member cut short is read to where its data ends). */
static char *inflate_all(const char *raw, size_t len, size_t *out_len, int *complete)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
    size_t cap = 4 * len + 4096, used = 0;
    char *out = malloc(cap);
    z.next_in = (unsigned char *)raw;
    z.avail_in = (uInt)len;
    int rc = Z_OK;
    *complete = 0;
    while (z.avail_in > 0) {
        if (cap - used < 65536) {
            out = realloc(out, cap *= 2);
            assert_non_null(out);
        }
        z.next_out = (unsigned char *)out + used;
        z.avail_out = (uInt)(cap - used - 1);
        rc = inflate(&z, Z_NO_FLUSH);
        used = (size_t)((char *)z.next_out - out);
        assert_true(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR);
        if (rc == Z_STREAM_END && z.avail_in > 0)
            inflateReset(&z); /* the next member */
        else if (rc == Z_BUF_ERROR && z.avail_out > 0)
            break; /* cut short */
    }
    *complete = rc == Z_STREAM_END;
    inflateEnd(&z);
    out[used] = '\0';
    *out_len = used;
    return out;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static readback_t read_back_data(const char *dir, const char *ext, long pid, int keep_data)
{
    readback_t r;
    memset(&r, 0, sizeof r);
    r.header_ok = 1;
    r.pid = pid;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char path[512];
    char *names[4096];
    size_t count = 0;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < strlen(ext) || strcmp(e->d_name + n - strlen(ext), ext) != 0)
            continue;
        assert_true(count < 4096);
        names[count++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, count, sizeof names[0], compare_names);
    int gz = strlen(ext) > 3 && strcmp(ext + strlen(ext) - 3, ".gz") == 0;
    int csv = strncmp(ext, ".csv", 4) == 0;
    for (size_t k = 0; k < count; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        free(names[k]);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        fseek(fp, 0, SEEK_END);
        long size = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        char *text = malloc((size_t)size + 1);
        assert_int_equal(fread(text, 1, (size_t)size, fp), (size_t)size);
        text[size] = '\0';
        fclose(fp);
        r.files++;
        if ((uint64_t)size > r.max_file_size)
            r.max_file_size = (uint64_t)size;
        if (gz) {
            size_t inflated;
            int complete;
            char *plain = inflate_all(text, (size_t)size, &inflated, &complete);
            r.incomplete += !complete;
            free(text);
            text = plain;
            size = (long)inflated;
        }
        if (keep_data) {
            const char *rows = csv ? strchr(text, '\n') + 1 : text;
            size_t n = (size_t)(text + size - rows);
            r.data = realloc(r.data, r.data_len + n + 1);
            memcpy(r.data + r.data_len, rows, n);
            r.data_len += n;
            r.data[r.data_len] = '\0';
        }
        if (csv) {
            struct csv_parser p;
            assert_int_equal(csv_init(&p, CSV_STRICT | CSV_STRICT_FINI), 0);
            r.in_header = 1;
            r.field = 0;
            assert_int_equal(csv_parse(&p, text, (size_t)size, on_field, on_row, &r), (size_t)size);
            csv_fini(&p, on_field, on_row, &r);
            csv_free(&p);
        } else {
            for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n"))
                read_json_line(&r, line);
        }
        free(text);
    }
    return r;
}

static readback_t read_back(const char *dir, const char *ext, long pid)
{
    return read_back_data(dir, ext, pid, 0);
}

static cJSON *read_json_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return NULL;
    char *text = calloc(1, 1 << 22);
    size_t n = fread(text, 1, (1 << 22) - 1, fp);
    fclose(fp);
    text[n] = '\0';
    cJSON *o = cJSON_Parse(text);
    free(text);
    return o;
}

/* ---- tests -------------------------------------------------------------------------------------- */

static void check_cap_and_contents(tw_format_t format, const char *ext)
{
    enum { N = 20000 };
    fixture_t f;
    tw_writer_config_t config = {.format = format, .file_max_size = 8192, .file_name_spec = "serial", .rank = -1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, N);
    close_fixture(&f);
    readback_t r = read_back(f.dir, ext, getpid());
    assert_true(r.header_ok);
    assert_int_equal(r.rows, N);
    assert_int_equal(r.unknown, 0);
    assert_int_equal(r.pid_rows, N);
    for (size_t i = 0; i < WEIRD_COUNT; i++)
        assert_int_equal(r.per_name[i], N / WEIRD_COUNT);
    assert_true(r.max_file_size <= 8192);
    assert_true(r.files > 100);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, N);
    assert_int_equal(ws.records_dropped, 0);
    /* the manifest lists every file with its count, and the totals */
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    assert_non_null(m);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "records_written")), N);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "files")), r.files);
    uint64_t listed = 0;
    cJSON *file;
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(m, "files"))
        listed += (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(file, "records"));
    assert_int_equal(listed, N);
    cJSON_Delete(m);
    /* the summary counts every call per API */
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    cJSON *s = read_json_file(path);
    assert_non_null(s);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(s, "apis")), WEIRD_COUNT);
    cJSON *api;
    cJSON_ArrayForEach(api, cJSON_GetObjectItem(s, "apis"))
        assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls")), N / WEIRD_COUNT);
    cJSON_Delete(s);
    free_fixture(&f);
}

static void csv_files_never_exceed_the_cap_and_read_back_identical(void **state)
{
    check_cap_and_contents(TW_FORMAT_CSV, ".csv");
}

static void json_files_never_exceed_the_cap_and_read_back_identical(void **state)
{
    check_cap_and_contents(TW_FORMAT_JSON, ".jsonl");
}

static void json_strings_are_escaped_per_rfc8259(void **state)
{
    char out[128];
    const char in[] = "a\"b\\c\nd\re\tf\bg\fh\x01i\x7fj é";
    char *end = tw_json_escape(out, in, sizeof in - 1);
    *end = '\0';
    assert_string_equal(out, "\"a\\\"b\\\\c\\nd\\re\\tf\\bg\\fh\\u0001i\\u007fj é\"");
    cJSON *parsed = cJSON_Parse(out);
    assert_non_null(parsed);
    assert_string_equal(cJSON_GetStringValue(parsed), in);
    cJSON_Delete(parsed);
}

/* The escaper copies runs of plain bytes at once: every byte value, alone and at the start, middle
 * and end of a run, is escaped as RFC 8259 says (checked against a byte-at-a-time reference). */
static char *reference_json_escape(char *p, const unsigned char *s, size_t len)
{
    *p++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = s[i];
        const char *short_escape = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                                   : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (short_escape != NULL)
            p += sprintf(p, "%s", short_escape);
        else if (c < 0x20 || c == 0x7f)
            p += sprintf(p, "\\u%04x", c);
        else
            *p++ = (char)c;
    }
    *p++ = '"';
    return p;
}

static void json_escape_matches_a_reference_for_every_byte_anywhere_in_a_run(void **state)
{
    (void)state;
    for (unsigned c = 0; c < 256; c++) {
        unsigned char inputs[4][8] = {{(unsigned char)c}, {(unsigned char)c, 'a', 'b'}, {'a', (unsigned char)c, 'b'},
                                      {'a', 'b', (unsigned char)c}};
        size_t lens[4] = {1, 3, 3, 3};
        for (int k = 0; k < 4; k++) {
            char got[64], want[64];
            size_t got_len = (size_t)(tw_json_escape(got, (const char *)inputs[k], lens[k]) - got);
            size_t want_len = (size_t)(reference_json_escape(want, inputs[k], lens[k]) - want);
            assert_int_equal(got_len, want_len);
            assert_memory_equal(got, want, got_len);
        }
    }
    char empty[4];
    assert_int_equal(tw_json_escape(empty, "", 0) - empty, 2);
    assert_memory_equal(empty, "\"\"", 2);
}

/* The resource columns (flops .. mem_peak) cut off a CSV line, its newline kept: the tests of the
 * columns before them read the line's end. */
static char *cut_resource_columns(char *line)
{
    for (int i = 0; i < 6; i++) {
        char *comma = strrchr(line, ',');
        assert_non_null(comma);
        *comma = '\0';
    }
    strcat(line, "\n");
    return line;
}

/* An autograd node (TW_RECORD_BACKWARD) carries the link to its forward call in place of argument
 * text: written as the fwd_call_id and fwd_api columns, with empty arguments, in CSV and JSON. */
static void check_backward_columns(tw_format_t format, const char *ext)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = format, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                          .rank = -1});
    uint32_t node, linear;
    assert_int_equal(tw_api_intern("AddmmBackward0", &node), 0);
    assert_int_equal(tw_api_intern("torch.nn.functional.linear", &linear), 0);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    tw_frame_t *frame = tw_call_begin(t);
    uint64_t forward = frame->call_id;
    tw_call_end_args(t, frame, linear, 0, 5, 0, "(1,)", 4);
    char link[TW_BACKWARD_LINK_SIZE];
    tw_backward_link_pack(link, forward, linear);
    frame = tw_call_begin(t);
    frame->site = 3;
    tw_call_end_args(t, frame, node, 10, 15, TW_RECORD_BACKWARD, link, sizeof link);
    close_fixture(&f);
    char path[512], line[4096], want[128];
    snprintf(path, sizeof path, "%s/tw-%ld-0001%s", f.dir, (long)getpid(), ext);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    if (format == TW_FORMAT_CSV) {
        assert_non_null(fgets(line, sizeof line, fp)); /* header */
        assert_non_null(fgets(line, sizeof line, fp));
        assert_non_null(strstr(cut_resource_columns(line), ",\"(1,)\",,0,0,0,\n")); /* args, module, step, site, no link */
        assert_non_null(fgets(line, sizeof line, fp));
        cut_resource_columns(line);
        snprintf(want, sizeof want, ",0,,,0,3,%llu,torch.nn.functional.linear\n", (unsigned long long)forward);
        assert_string_equal(line + strlen(line) - strlen(want), want); /* error, empty args, ..., the link */
    } else {
        assert_non_null(fgets(line, sizeof line, fp));
        assert_non_null(strstr(line, "\"fwd_call_id\":0,\"fwd_api\":\"\"}"));
        assert_non_null(fgets(line, sizeof line, fp));
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "args")), "");
        assert_int_equal(cJSON_GetObjectItem(o, "fwd_call_id")->valuedouble, (double)forward);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "fwd_api")), "torch.nn.functional.linear");
        cJSON_Delete(o);
    }
    fclose(fp);
    free_fixture(&f);
}

static void a_backward_node_names_its_forward_call_in_place_of_arguments(void **state)
{
    check_backward_columns(TW_FORMAT_CSV, ".csv");
    check_backward_columns(TW_FORMAT_JSON, ".jsonl");
}

/* Resources (TW_RECORD_RESOURCES): a parent call that states no FLOPs around a child that states 100,
 * with the thread's allocator reports in between: the child's own and total FLOPs, the parent's total
 * (its child's), memory inclusive and self, freed, and the peak of each, as columns in CSV and JSON;
 * a call with nothing to report writes zeros. */
static void check_resource_columns(tw_format_t format, const char *ext)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = format, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                          .rank = -1});
    tw_thread_t *t = tw_recorder_attach(f.rec);
    tw_memory_counters_t mem = {.allocated = 1000, .freed = 10, .total = 5000, .peak = 0};
    t->memory = &mem;
    tw_frame_t *parent = tw_call_begin(t);
    mem.allocated += 300; /* the parent's own allocation: total 5300 */
    mem.total = mem.peak = 5300;
    tw_frame_t *child = tw_call_begin(t);
    child->flops = 100;
    mem.allocated += 4096; /* the child's: total 9396, then freed back to 5300 */
    mem.total = 9396;
    mem.peak = 9396;
    mem.freed += 4096;
    mem.total = 5300;
    tw_call_end(t, child, f.ids[0], 1, 2, 0);
    assert_int_equal(mem.peak, 9396); /* the parent's peak so far: its child's */
    tw_call_end(t, parent, f.ids[1], 0, 3, 0);
    t->memory = NULL;
    tw_call_end(t, tw_call_begin(t), f.ids[2], 4, 5, 0); /* nothing to report */
    close_fixture(&f);
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/tw-%ld-0001%s", f.dir, (long)getpid(), ext);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    /* flops, flops_total, mem_alloc, mem_self, mem_freed, mem_peak; child first (it ended first) */
    const uint64_t want[3][6] = {{100, 100, 4096, 4096, 4096, 9396}, {0, 100, 4396, 300, 4096, 9396}, {0}};
    const int carries[3] = {1, 1, 0}; /* the last carries none: empty CSV fields, no JSON keys */
    static const char *const keys[6] = {"flops", "flops_total", "mem_alloc", "mem_self", "mem_freed", "mem_peak"};
    if (format == TW_FORMAT_CSV)
        assert_non_null(fgets(line, sizeof line, fp)); /* header */
    for (int i = 0; i < 3; i++) {
        assert_non_null(fgets(line, sizeof line, fp));
        if (format == TW_FORMAT_CSV) {
            char expect[256];
            snprintf(expect, sizeof expect, ",%llu,%llu,%llu,%llu,%llu,%llu\n", (unsigned long long)want[i][0],
                     (unsigned long long)want[i][1], (unsigned long long)want[i][2], (unsigned long long)want[i][3],
                     (unsigned long long)want[i][4], (unsigned long long)want[i][5]);
            if (!carries[i])
                strcpy(expect, ",,,,,,\n");
            assert_string_equal(line + strlen(line) - strlen(expect), expect);
        } else {
            cJSON *o = cJSON_Parse(line);
            assert_non_null(o);
            for (int k = 0; k < 6; k++) {
                if (carries[i])
                    assert_int_equal(cJSON_GetObjectItem(o, keys[k])->valuedouble, (double)want[i][k]);
                else
                    assert_null(cJSON_GetObjectItem(o, keys[k]));
            }
            cJSON_Delete(o);
        }
    }
    assert_null(fgets(line, sizeof line, fp));
    fclose(fp);
    free_fixture(&f);
}

static void flops_and_memory_are_written_per_call_with_totals_and_self(void **state)
{
    check_resource_columns(TW_FORMAT_CSV, ".csv");
    check_resource_columns(TW_FORMAT_JSON, ".jsonl");
}

/* Module calls: the path in the module column, before step ("" for the root, quoted in CSV so that it differs from
 * a call with no module, which leaves it empty; null in JSON). */
static void check_module_column(tw_format_t format, const char *ext)
{
    fixture_t f;
    tw_writer_config_t config = {.format = format, .file_max_size = 1 << 20, .file_name_spec = "serial", .rank = -1};
    open_fixture(&f, config);
    uint32_t path_id;
    assert_int_equal(tw_api_intern("encoder.layers,\"3\".self_attn", &path_id), 0);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    uint32_t modules[3] = {TW_MODULE_ROOT, path_id + 1, TW_MODULE_NONE};
    for (int i = 0; i < 3; i++) {
        tw_frame_t *frame = tw_call_begin(t);
        frame->module_id = modules[i];
        frame->site = (uint32_t)(7 * i); /* the site column follows the step */
        tw_call_end(t, frame, f.ids[0], 10 * i, 10 * i + 5, 0);
    }
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/tw-%ld-0001%s", f.dir, (long)getpid(), ext);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char line[4096];
    /* module, step, site, then fwd_call_id and fwd_api (not a backward node: 0 and empty) */
    const char *csv_ends[] = {",\"\",0,0,0,\n", ",\"encoder.layers,\"\"3\"\".self_attn\",0,7,0,\n", ",,,0,14,0,\n"};
    const char *json_paths[] = {"", "encoder.layers,\"3\".self_attn", NULL};
    if (format == TW_FORMAT_CSV) {
        assert_non_null(fgets(line, sizeof line, fp));
        assert_non_null(strstr(line, ",args,module,step,site,fwd_call_id,fwd_api,flops,flops_total,mem_alloc,"
                                     "mem_self,mem_freed,mem_peak\n"));
    }
    for (int i = 0; i < 3; i++) {
        assert_non_null(fgets(line, sizeof line, fp));
        if (format == TW_FORMAT_CSV) {
            cut_resource_columns(line);
            size_t n = strlen(line), m = strlen(csv_ends[i]);
            assert_true(n > m);
            assert_string_equal(line + n - m, csv_ends[i]);
        } else {
            cJSON *o = cJSON_Parse(line);
            assert_non_null(o);
            cJSON *module = cJSON_GetObjectItem(o, "module");
            assert_non_null(module);
            if (json_paths[i] == NULL)
                assert_true(cJSON_IsNull(module));
            else
                assert_string_equal(cJSON_GetStringValue(module), json_paths[i]);
            assert_int_equal(cJSON_GetObjectItem(o, "site")->valueint, 7 * i);
            cJSON_Delete(o);
        }
    }
    fclose(fp);
    free_fixture(&f);
}

static void module_paths_are_written_before_the_step_and_site_columns(void **state)
{
    check_module_column(TW_FORMAT_CSV, ".csv");
    check_module_column(TW_FORMAT_JSON, ".jsonl");
}

#define GPU_HEADER "call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid"

/* Calls of steps 0..9, two per step; the writer keeps the schedule's active steps, and the summary
 * counts every call or those of active steps (summary_active); summary_only writes no record file. */
static void check_schedule(int summary_active, int summary_only)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1, .summary_only = summary_only,
                                 .schedule = {1, 1, 2, 1, 2, 1, summary_active}}; /* active: steps 4, 5 */
    open_fixture(&f, config);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (uint32_t step = 0; step < 10; step++) {
        tw_recorder_set_step(f.rec, step);
        for (int i = 0; i < 2; i++)
            tw_call_end(t, tw_call_begin(t), f.ids[0], 100 * step + i, 100 * step + i + 1, 0);
    }
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/tw-%ld-0001.csv", f.dir, (long)getpid());
    FILE *fp = fopen(path, "r");
    if (summary_only) {
        assert_null(fp);
    } else {
        assert_non_null(fp);
        char line[4096];
        assert_non_null(fgets(line, sizeof line, fp)); /* the header */
        /* step, then site (none), fwd_call_id and fwd_api (not a node) */
        const char *steps[] = {",4,0,0,\n", ",4,0,0,\n", ",5,0,0,\n", ",5,0,0,\n"};
        for (int i = 0; i < 4; i++) {
            assert_non_null(fgets(line, sizeof line, fp));
            cut_resource_columns(line);
            assert_string_equal(line + strlen(line) - 8, steps[i]);
        }
        assert_null(fgets(line, sizeof line, fp));
        fclose(fp);
    }
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    cJSON *s = read_json_file(path);
    assert_non_null(s);
    cJSON *api = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "apis"), 0);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls")), summary_active ? 4 : 20);
    cJSON_Delete(s);
    free_fixture(&f);
}

static void a_schedule_writes_the_records_of_active_steps_only(void **state)
{
    check_schedule(0, 0);
    check_schedule(1, 0);
}

static void summary_only_writes_the_summary_and_no_record_file(void **state)
{
    check_schedule(0, 1);
    /* nor a file of another stream (GPU rows): their time still reaches the summary */
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1, .summary_only = 1});
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &s), 0);
    const char row[] = "1,api,kernel,k,1,2,0,7,1,1\n";
    assert_int_equal(tw_writer_stream_write_gpu(s, row, sizeof row - 1, f.ids[0], 250), 0);
    close_fixture(&f);
    DIR *d = opendir(f.dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        assert_null(strstr(e->d_name, ".csv"));
    closedir(d);
    char path[512];
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    cJSON *summary = read_json_file(path);
    cJSON *api = cJSON_GetArrayItem(cJSON_GetObjectItem(summary, "apis"), 0);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "gpu_ns")), 250);
    cJSON_Delete(summary);
    free_fixture(&f);
}

/* The steps column of every line of a CSV record file, in order, into steps; returns the count. */
static size_t csv_steps(const char *path, uint32_t *steps, size_t max)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return 0;
    char line[4096];
    size_t n = 0;
    assert_non_null(fgets(line, sizeof line, fp)); /* the header */
    while (n < max && fgets(line, sizeof line, fp) != NULL) {
        /* the last columns are step, site, fwd_call_id, fwd_api (empty here), then the resources */
        cut_resource_columns(line);
        for (int cut = 0; cut < 3; cut++)
            *strrchr(line, ',') = '\0';
        steps[n++] = (uint32_t)strtoul(strrchr(line, ',') + 1, NULL, 10);
    }
    fclose(fp);
    return n;
}

/* Calls of steps 0..9, two per step, with a capture of steps 3..5: the capture's dir gets exactly
 * those, with a manifest and summary of their own; out_dir keeps what the schedule writes (every
 * step) and its manifest lists the capture. */
static void a_capture_writes_its_steps_to_a_dir_of_its_own(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1});
    char dir[512], err[256] = "", path[600];
    snprintf(dir, sizeof dir, "%s/captures/first", f.dir); /* parents are made */
    uint32_t id = 0;
    assert_int_equal(tw_writer_capture(f.writer, 3, 3, dir, &id, err, sizeof err), 0);
    assert_int_equal(id, 1);
    /* one at a time: a capture that would begin inside it is refused, and says which runs */
    assert_int_equal(tw_writer_capture(f.writer, 5, 2, dir, &id, err, sizeof err), TW_EBUSY);
    assert_non_null(strstr(err, "capture 1 (steps 3-5) is still recording"));
    assert_int_equal(tw_writer_capture(f.writer, 6, 0, dir, &id, err, sizeof err), TW_EINVAL);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (uint32_t step = 0; step < 10; step++) {
        tw_recorder_set_step(f.rec, step);
        tw_writer_set_step(f.writer, step);
        for (int i = 0; i < 2; i++)
            tw_call_end(t, tw_call_begin(t), f.ids[0], 100 * step + i, 100 * step + i + 1, 0);
    }
    close_fixture(&f);
    uint32_t steps[64];
    snprintf(path, sizeof path, "%s/tw-%ld-0001.csv", dir, (long)getpid());
    assert_int_equal(csv_steps(path, steps, 64), 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(steps[i], 3 + i / 2);
    snprintf(path, sizeof path, "%s/tw-%ld-0001.csv", f.dir, (long)getpid());
    assert_int_equal(csv_steps(path, steps, 64), 20);

    snprintf(path, sizeof path, "%s/manifest.json", dir);
    cJSON *m = read_json_file(path);
    assert_non_null(m);
    cJSON *capture = cJSON_GetObjectItem(m, "capture");
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(capture, "steps"), 0)), 3);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(capture, "steps"), 1)), 5);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "records_written")), 6);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "files")), 1);
    assert_false(cJSON_IsNull(cJSON_GetObjectItem(m, "end_ns")));
    cJSON_Delete(m);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    cJSON *s = read_json_file(path);
    cJSON *api = cJSON_GetArrayItem(cJSON_GetObjectItem(s, "apis"), 0);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls")), 6);
    cJSON_Delete(s);

    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    m = read_json_file(path);
    cJSON *listed = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "captures"), 0);
    assert_non_null(listed);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "captures")), 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(listed, "state")), "done");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(listed, "dir")), dir);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(listed, "records_written")), 6);
    assert_int_equal(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(listed, "steps"), 1)), 5);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(listed, "files")), 1);
    cJSON_Delete(m);
    free_fixture(&f);
}

/* While the program runs on: once its step is past a capture's steps, the capture is finished
 * (files closed, manifest final) about one flush interval later; records of its steps that come
 * after that are counted as late, not written; a second capture follows. */
static void a_capture_is_finished_while_the_program_runs_and_counts_late_records(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1,
                                          .flush_interval_ns = 10 * 1000 * 1000});
    char dir[512], err[256] = "";
    snprintf(dir, sizeof dir, "%s/capture-1", f.dir);
    uint32_t id = 0;
    assert_int_equal(tw_writer_capture(f.writer, 0, 2, dir, &id, err, sizeof err), 0);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (uint32_t step = 0; step < 2; step++) {
        tw_recorder_set_step(f.rec, step);
        tw_call_end(t, tw_call_begin(t), f.ids[0], step, step + 1, 0);
    }
    tw_recorder_set_step(f.rec, 2);
    tw_writer_set_step(f.writer, 2);
    tw_writer_capture_stats_t cs = {0};
    /* the partial chunk reaches the writer at this thread's next call after a flush request */
    for (int i = 0; i < 60000 && !cs.done; i++) {
        tw_call_end(t, tw_call_begin(t), f.ids[1], 0, 1, 0);
        assert_int_equal(tw_writer_capture_stats(f.writer, 1, &cs), 0);
        usleep(1000);
    }
    assert_true(cs.done);
    assert_int_equal(cs.records_written, 2);
    /* a record of step 1 that comes now: late */
    tw_recorder_set_step(f.rec, 1);
    tw_call_end(t, tw_call_begin(t), f.ids[0], 5, 6, 0);
    tw_recorder_set_step(f.rec, 3);
    tw_writer_set_step(f.writer, 3);
    char second[512];
    snprintf(second, sizeof second, "%s/capture-2", f.dir);
    assert_int_equal(tw_writer_capture(f.writer, 3, 1, second, &id, err, sizeof err), 0);
    assert_int_equal(id, 2);
    tw_call_end(t, tw_call_begin(t), f.ids[0], 7, 8, 0);
    close_fixture(&f);
    assert_int_equal(tw_writer_capture_stats(f.writer, 1, &cs), 0);
    assert_int_equal(cs.records_late, 1);
    assert_int_equal(cs.records_written, 2);
    assert_int_equal(tw_writer_capture_stats(f.writer, 2, &cs), 0);
    assert_true(cs.done);
    assert_int_equal(cs.records_written, 1);
    assert_int_equal(tw_writer_capture_stats(f.writer, 3, &cs), TW_EINVAL);
    free_fixture(&f);
}

/* summary.json is there while the program runs (rewritten each flush interval), not only at close:
 * a summary-only job can be watched. */
static void the_summary_is_rewritten_while_the_program_runs(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1, .summary_only = 1,
                                          .flush_interval_ns = 10 * 1000 * 1000});
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (int i = 0; i < 5; i++)
        tw_call_end(t, tw_call_begin(t), f.ids[0], 10 * i, 10 * i + 3, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    double calls = 0;
    /* the partial chunk reaches the writer at this thread's next call after a flush request: calls
     * of another API keep coming while we look */
    for (int i = 0; i < 60000 && calls != 5; i++) {
        tw_call_end(t, tw_call_begin(t), f.ids[1], 0, 1, 0);
        cJSON *s = read_json_file(path);
        const cJSON *api;
        cJSON_ArrayForEach(api, cJSON_GetObjectItem(s, "apis"))
            if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(api, "api")), weird_names[0]) == 0)
                calls = cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls"));
        cJSON_Delete(s);
        usleep(1000);
    }
    assert_true(calls == 5);
    close_fixture(&f);
    free_fixture(&f);
}

/* Records reach the writer late (a thread's partial chunk): by then later captures may have begun;
 * each record still goes to the capture of its step, however many came since. */
static void records_find_their_capture_among_many(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 1 << 20,
                                          .file_name_spec = "serial", .rank = -1});
    char dir[512], err[256] = "";
    uint32_t id = 0;
    for (uint32_t k = 0; k < 5; k++) { /* captures of steps 0, 1, 2, 3, 4: one step each */
        snprintf(dir, sizeof dir, "%s/capture-%u", f.dir, k + 1);
        tw_writer_set_step(f.writer, k);
        assert_int_equal(tw_writer_capture(f.writer, k, 1, dir, &id, err, sizeof err), 0);
    }
    tw_thread_t *t = tw_recorder_attach(f.rec);
    for (uint32_t step = 0; step < 5; step++) { /* step k gets k + 1 calls, all in one late chunk */
        tw_recorder_set_step(f.rec, step);
        for (uint32_t i = 0; i <= step; i++)
            tw_call_end(t, tw_call_begin(t), f.ids[0], 10 * step + i, 10 * step + i + 1, 0);
    }
    tw_writer_set_step(f.writer, 5);
    close_fixture(&f);
    for (uint32_t k = 1; k <= 5; k++) {
        tw_writer_capture_stats_t cs;
        assert_int_equal(tw_writer_capture_stats(f.writer, k, &cs), 0);
        assert_true(cs.done);
        assert_int_equal(cs.records_written, k);
        assert_int_equal(cs.records_late, 0);
    }
    free_fixture(&f);
}

static void an_existing_name_is_never_overwritten(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 4096, .file_name_spec = "fixed-{index}",
                                 .rank = -1};
    open_fixture(&f, config);
    char path[512];
    snprintf(path, sizeof path, "%s/fixed-0001.csv", f.dir);
    FILE *fp = fopen(path, "w");
    fputs("not ours\n", fp);
    fclose(fp);
    /* a symlink planted at the next name is not followed either */
    snprintf(path, sizeof path, "%s/fixed-0002.csv", f.dir);
    assert_int_equal(symlink("/tmp/tw-test-writer-target-must-not-exist", path), 0);
    record_calls(f.rec, f.ids, 100);
    close_fixture(&f);
    snprintf(path, sizeof path, "%s/fixed-0001.csv", f.dir);
    fp = fopen(path, "r");
    char line[64];
    assert_non_null(fgets(line, sizeof line, fp));
    fclose(fp);
    assert_string_equal(line, "not ours\n");
    assert_int_equal(access("/tmp/tw-test-writer-target-must-not-exist", F_OK), -1);
    snprintf(path, sizeof path, "%s/fixed-0003.csv", f.dir);
    assert_int_equal(access(path, F_OK), 0);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, 100);
    assert_int_equal(ws.file_names_skipped, 2); /* the file and the link, counted */
    assert_int_equal(ws.symlinks_refused, 1);
    free_fixture(&f);
}

typedef struct manifest_reader {
    const char *path;
    int stop; /* atomic accesses: set by the test thread, polled by the reader */
    int reads, complete, incomplete;
} manifest_reader_t;

static void *read_manifests(void *arg)
{
    manifest_reader_t *m = arg;
    while (!__atomic_load_n(&m->stop, __ATOMIC_RELAXED)) {
        FILE *fp = fopen(m->path, "r");
        if (fp == NULL)
            continue;
        /* The whole file, however long the list of files grows. */
        static char text[4 << 20];
        size_t n = fread(text, 1, sizeof text - 1, fp);
        fclose(fp);
        text[n] = '\0';
        cJSON *root = cJSON_Parse(text);
        m->reads++;
        if (root != NULL && cJSON_GetObjectItemCaseSensitive(root, "files") != NULL)
            m->complete++;
        else
            m->incomplete++;
        cJSON_Delete(root);
    }
    return NULL;
}

static void a_manifest_read_during_rotation_is_always_complete(void **state)
{
    /* 4096-byte files: hundreds of rotations, each rewriting the manifest, while a reader polls it. */
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = TW_FORMAT_CSV, .file_max_size = 4096, .rank = -1});
    char path[600];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    manifest_reader_t m = {.path = path};
    pthread_t reader;
    assert_int_equal(pthread_create(&reader, NULL, read_manifests, &m), 0);
    for (int i = 0; i < 20; i++)
        record_calls(f.rec, f.ids, 2000);
    close_fixture(&f);
    __atomic_store_n(&m.stop, 1, __ATOMIC_RELAXED);
    pthread_join(reader, NULL);
    assert_true(m.reads > 0);
    assert_int_equal(m.incomplete, 0);
    free_fixture(&f);
}

static void max_files_keeps_the_newest(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 4096, .file_name_spec = "serial",
                                 .max_files = 3, .rank = -1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 5000);
    close_fixture(&f);
    readback_t r = read_back(f.dir, ".csv", getpid());
    assert_int_equal(r.files, 3);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    cJSON *files = cJSON_GetObjectItem(m, "files");
    int n = cJSON_GetArraySize(files), removed = 0;
    assert_true(n > 3);
    for (int i = 0; i < n; i++) {
        int gone = cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(files, i), "removed_by_max_files"));
        removed += gone;
        assert_int_equal(gone, i < n - 3); /* the oldest went */
    }
    assert_int_equal(removed, n - 3);
    cJSON_Delete(m);
    free_fixture(&f);
}

#define PRODUCERS 8
#define PER_PRODUCER 1000000

static void *produce(void *arg)
{
    fixture_t *f = arg;
    record_calls(f->rec, f->ids, PER_PRODUCER);
    return NULL;
}

static void eight_producers_lose_nothing(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 64 << 20, .file_name_spec = "serial",
                                 .block_when_full = 1, .buffer_bytes = 8 << 20, .rank = -1};
    open_fixture(&f, config);
    pthread_t threads[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, produce, &f), 0);
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(threads[i], NULL);
    close_fixture(&f);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    tw_recorder_stats_t rs;
    tw_recorder_stats(f.rec, &rs);
    assert_int_equal(rs.dropped, 0);
    assert_int_equal(ws.records_dropped, 0);
    assert_int_equal(ws.records_written, (uint64_t)PRODUCERS * PER_PRODUCER);
    readback_t r = read_back(f.dir, ".csv", getpid());
    assert_int_equal(r.rows, (uint64_t)PRODUCERS * PER_PRODUCER);
    free_fixture(&f);
}

/* ---- a writer thread starved of CPU ------------------------------------------------------------ */

/* The tid of the writer thread (it names itself tw-writer when it starts; one at a time here), once
 * it has started; -1 where /proc has no such thread. */
static pid_t writer_tid(void)
{
    for (int tries = 0; tries < 100000; tries++) {
        DIR *d = opendir("/proc/self/task");
        if (d == NULL)
            return -1;
        pid_t found = -1;
        struct dirent *e;
        while ((e = readdir(d)) != NULL && found < 0) {
            char path[300], comm[32] = "";
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
            FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
            if (f != NULL && fgets(comm, sizeof comm, f) != NULL && strcmp(comm, "tw-writer\n") == 0)
                found = (pid_t)atol(e->d_name);
            if (f != NULL)
                fclose(f);
        }
        closedir(d);
        if (found > 0)
            return found;
        usleep(100); /* not started yet */
    }
    return -1;
}

static int spin_stop; /* atomic accesses */

/* A thread that never sleeps, on the CPU of *arg. */
static void *spin(void *arg)
{
    sched_setaffinity(0, sizeof(cpu_set_t), arg);
    while (!__atomic_load_n(&spin_stop, __ATOMIC_RELAXED))
        ;
    return NULL;
}

/* Clears (on 0) or sets again CAP_SYS_NICE in this thread's effective capabilities, which let it
 * raise the writer thread from the lowest priority: 0, or -1 where it cannot. */
static int effective_sys_nice(int on)
{
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data) != 0)
        return -1;
    if (on)
        data[0].effective |= data[0].permitted & (1u << CAP_SYS_NICE);
    else
        data[0].effective &= ~(1u << CAP_SYS_NICE);
    return (int)syscall(SYS_capset, &header, data);
}

#define STARVED_RECORDS (256u * 1024) /* 8 times what a budget of 4 MiB holds */

/*
 * The writer thread runs at the lowest priority; here it shares its one CPU with a thread that never
 * sleeps, so it gets almost none, while this thread records on another CPU (or the same, on one CPU)
 * 8 times what the budget holds. The producer writes for it: every record reaches the files, none is
 * dropped (on_full "drop", the default), and with on_full "wait" too. Counts only, no clock.
 * unprivileged: this thread may not raise the writer thread to normal priority (no CAP_SYS_NICE, and
 * RLIMIT_NICE 0, as for most users), which then stays at the lowest throughout.
 */
static void check_starved_writer(int block_when_full, int unprivileged)
{
    struct rlimit nice_limit;
    assert_int_equal(getrlimit(RLIMIT_NICE, &nice_limit), 0);
    if (unprivileged) {
        struct rlimit none = {0, nice_limit.rlim_max};
        if (effective_sys_nice(0) != 0 || setrlimit(RLIMIT_NICE, &none) != 0)
            skip();
    }
    fixture_t f;
    /* the defaults, but a smaller budget: 26 MB of files rather than 100 for the same proportions */
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 30, .file_name_spec = "serial",
                                 .block_when_full = block_when_full, .buffer_bytes = 4 << 20, .rank = -1};
    open_fixture(&f, config);
    pid_t tid = writer_tid();
    if (tid < 0) {
        free_fixture(&f);
        skip(); /* no /proc: not Linux */
    }
#ifdef SCHED_IDLE
    assert_int_equal(sched_getscheduler(tid), SCHED_IDLE);
#endif
    cpu_set_t allowed, writer_cpu, producer_cpu;
    assert_int_equal(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    int a = -1, b = -1;
    for (int i = 0; i < CPU_SETSIZE && b < 0; i++)
        if (CPU_ISSET(i, &allowed)) {
            if (a < 0)
                a = i;
            else
                b = i;
        }
    if (b < 0)
        b = a; /* one CPU: the three threads share it */
    CPU_ZERO(&writer_cpu);
    CPU_SET(a, &writer_cpu);
    CPU_ZERO(&producer_cpu);
    CPU_SET(b, &producer_cpu);
    assert_int_equal(sched_setaffinity(tid, sizeof writer_cpu, &writer_cpu), 0);
    __atomic_store_n(&spin_stop, 0, __ATOMIC_RELAXED);
    pthread_t spinner;
    assert_int_equal(pthread_create(&spinner, NULL, spin, &writer_cpu), 0);
    assert_int_equal(sched_setaffinity(0, sizeof producer_cpu, &producer_cpu), 0);
    record_calls(f.rec, f.ids, STARVED_RECORDS);
    tw_recorder_collect(f.rec);
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    uint64_t helped = ws.helped;
#ifdef SCHED_IDLE
    if (unprivileged) /* never raised */
        assert_int_equal(sched_getscheduler(tid), SCHED_IDLE);
#endif
    __atomic_store_n(&spin_stop, 1, __ATOMIC_RELAXED);
    pthread_join(spinner, NULL);
    assert_int_equal(sched_setaffinity(0, sizeof allowed, &allowed), 0);
    close_fixture(&f);
    if (unprivileged) {
        assert_int_equal(setrlimit(RLIMIT_NICE, &nice_limit), 0);
        effective_sys_nice(1);
    }
    tw_writer_stats(f.writer, &ws);
    tw_recorder_stats_t rs;
    tw_recorder_stats(f.rec, &rs);
    assert_int_equal(rs.dropped, 0);
    assert_int_equal(ws.records_dropped, 0);
    assert_int_equal(ws.records_written, STARVED_RECORDS);
    readback_t r = read_back(f.dir, ".csv", getpid());
    assert_int_equal(r.rows, STARVED_RECORDS);
    /* the producer wrote for the writer thread (valgrind runs one thread at a time, its own way) */
    if (getenv("TW_UNDER_VALGRIND") == NULL)
        assert_true(helped > 0);
    free_fixture(&f);
}

static void a_writer_starved_of_cpu_loses_nothing(void **state)
{
    check_starved_writer(0, 0);
}

static void a_writer_starved_of_cpu_loses_nothing_when_producers_wait(void **state)
{
    check_starved_writer(1, 0);
}

static void a_writer_starved_of_cpu_loses_nothing_where_it_may_not_be_raised(void **state)
{
    check_starved_writer(0, 1);
    check_starved_writer(1, 1);
}

static void a_full_disk_drops_and_counts_and_goes_on(void **state)
{
    static const int errors[] = {ENOSPC, EIO};
    for (int k = 0; k < 2; k++) {
        fixture_t f;
        tw_writer_config_t config = {.format = TW_FORMAT_JSON, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                     .rank = -1};
        open_fixture(&f, config);
        record_calls(f.rec, f.ids, 3000);
        tw_recorder_collect(f.rec);
        __atomic_store_n(&inject_errno, errors[k], __ATOMIC_RELAXED);
        record_calls(f.rec, f.ids, 2000); /* the program goes on recording */
        tw_recorder_collect(f.rec);
        assert_int_equal(tw_writer_close(f.writer), TW_EIO);
        __atomic_store_n(&inject_errno, 0, __ATOMIC_RELAXED);
        tw_writer_stats_t ws;
        tw_writer_stats(f.writer, &ws);
        assert_int_equal(ws.write_errno, errors[k]);
        /* Every record is accounted for: written or dropped, never silently lost. */
        assert_int_equal(ws.records_written + ws.records_dropped, 5000);
        assert_true(ws.records_dropped >= 2000);
        readback_t r = read_back(f.dir, ".jsonl", getpid());
        assert_int_equal(r.rows, ws.records_written);
        free_fixture(&f);
    }
}

static void a_forked_child_writes_its_own_files(void **state)
{
    if (getenv("TW_UNDER_TSAN") != NULL)
        skip(); /* ThreadSanitizer cannot follow a fork of a threaded process ("dup thread") */
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 3000); /* some in the queue, some in this thread's partial chunk */
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        record_calls(f.rec, f.ids, 1234);
        tw_recorder_collect(f.rec);
        int rc = tw_writer_close(f.writer);
        tw_writer_stats_t ws;
        tw_writer_stats(f.writer, &ws);
        _exit(rc == 0 && ws.records_written == 1234 ? 0 : 1);
    }
    record_calls(f.rec, f.ids, 1000);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close_fixture(&f);
    readback_t mine = read_back(f.dir, ".csv", getpid());
    readback_t theirs = read_back(f.dir, ".csv", child);
    assert_int_equal(mine.pid_rows, 4000);   /* nothing of the parent's written twice */
    assert_int_equal(theirs.pid_rows, 1234);
    assert_int_equal(mine.rows, 5234);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest-%ld.json", f.dir, (long)child);
    assert_int_equal(access(path, F_OK), 0);
    free_fixture(&f);
}

static void ranks_sharing_out_dir_write_their_own_manifests_and_ranked_names(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = 1, .per_process_names = 1};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 10);
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/tw-rank1-%ld-0001.csv", f.dir, (long)getpid());
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    assert_int_equal(access(path, F_OK), -1); /* left to the process that owns out_dir */
    snprintf(path, sizeof path, "%s/summary-%ld.json", f.dir, (long)getpid());
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/manifest-%ld.json", f.dir, (long)getpid());
    cJSON *m = read_json_file(path);
    assert_int_equal(cJSON_GetObjectItem(m, "rank")->valuedouble, 1);
    assert_int_equal(cJSON_GetObjectItem(m, "records_written")->valuedouble, 10);
    cJSON_Delete(m);
    free_fixture(&f);
}

static void a_manifest_key_set_while_writing_is_in_the_final_manifest(void **state)
{
    /* The clock's offset to rank 0's is known only once the process group is up, after the writer
     * started: set then, it joins the caller's keys, and a replaced value replaces the key. */
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1, .manifest_json = "{\"torch\": \"2.x\"}"};
    open_fixture(&f, config);
    record_calls(f.rec, f.ids, 3);
    assert_int_equal(tw_writer_set_manifest_key(f.writer, "clock_sync", "{\"start\": {\"offset_ns\": 5}}"), 0);
    assert_int_equal(tw_writer_set_manifest_key(f.writer, "clock_sync", "{\"start\": {\"offset_ns\": -7}}"), 0);
    assert_int_equal(tw_writer_set_manifest_key(f.writer, "clock_sync", "{not json"), TW_EINVAL);
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    assert_string_equal(cJSON_GetObjectItem(m, "torch")->valuestring, "2.x");
    cJSON *sync = cJSON_GetObjectItem(m, "clock_sync");
    assert_non_null(sync);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(sync, "start"), "offset_ns")->valuedouble, -7);
    assert_int_equal(cJSON_GetObjectItem(m, "records_written")->valuedouble, 3);
    cJSON_Delete(m);
    free_fixture(&f);
}

static uint64_t monotonic_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void an_idle_writer_sleeps_between_flushes(void **state)
{
    /* An idle writer wakes about once per flush interval. A wait on the wrong clock returned at
     * once and spun here hundreds of thousands of times, a third of a core. The bound is computed
     * from the time that really passed (a loaded VM may stretch the 300 ms), with room for a few
     * spurious wake-ups; a spinning writer exceeds it by orders of magnitude. */
    const uint64_t interval_ns = 100000000;
    fixture_t f;
    uint64_t t0 = monotonic_now_ns();
    open_fixture(&f, (tw_writer_config_t){.file_max_size = 1 << 20, .flush_interval_ns = interval_ns, .rank = -1});
    struct timespec pause = {0, 300000000};
    nanosleep(&pause, NULL);
    tw_writer_stats_t stats;
    tw_writer_stats(f.writer, &stats);
    uint64_t elapsed = monotonic_now_ns() - t0;
    close_fixture(&f);
    free_fixture(&f);
    assert_true(stats.wakeups <= elapsed / interval_ns + 10);
}

static void a_world_writable_out_dir_draws_a_warning(void **state)
{
    char dir[] = "/tmp/tw-test-open-XXXXXX";
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0777), 0);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    int saved = dup(2);
    dup2(pipefd[1], 2);
    tw_recorder_t *rec;
    tw_writer_t *w;
    tw_clock_t clock;
    char err[256];
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_clock_init_manual(&clock, TW_CLOCK_MONOTONIC, 0, 0, 1.0);
    tw_writer_config_t c = {.out_dir = dir, .file_max_size = 1 << 20, .rank = -1};
    int rc = tw_writer_create(&c, tw_recorder_queue(rec), &clock, &w, err, sizeof err);
    dup2(saved, 2);
    close(saved);
    close(pipefd[1]);
    char message[512] = "";
    ssize_t n = read(pipefd[0], message, sizeof message - 1);
    close(pipefd[0]);
    assert_int_equal(rc, 0); /* a warning, not an error */
    assert_true(n > 0);
    assert_non_null(strstr(message, "is writable by every user and has no sticky bit"));
    tw_writer_close(w);
    tw_writer_destroy(w);
    tw_recorder_destroy(rec);
    rm_rf(dir);
}

static void bad_configs_name_the_problem(void **state)
{
    tw_recorder_t *rec;
    tw_writer_t *w = NULL;
    tw_clock_t clock;
    char err[512];
    assert_int_equal(tw_recorder_create(&rec), 0);
    tw_clock_init_manual(&clock, TW_CLOCK_MONOTONIC, 0, 0, 1.0);
    tw_writer_config_t c = {.out_dir = "/proc/no/such/dir", .file_max_size = 1 << 20, .rank = -1};
    assert_int_equal(tw_writer_create(&c, tw_recorder_queue(rec), &clock, &w, err, sizeof err), TW_EIO);
    assert_non_null(strstr(err, "/proc/no/such/dir"));
    assert_non_null(strstr(err, "cannot be created"));
    c.out_dir = "/tmp";
    c.file_max_size = 100;
    assert_int_equal(tw_writer_create(&c, tw_recorder_queue(rec), &clock, &w, err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "config key 'file_max_size': 100 is too small"));
    c.file_max_size = 1 << 20;
    c.file_name_spec = "{nope}";
    assert_int_equal(tw_writer_create(&c, tw_recorder_queue(rec), &clock, &w, err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "unknown field {nope}"));
    assert_null(w);
    tw_recorder_destroy(rec);
}

/* ---- extra record streams ---------------------------------------------------------------------- */


typedef struct {
    uint64_t files;
    uint64_t rows;          /* lines after the header */
    uint64_t max_file_size;
    int headers_ok;
    uint64_t manifest_rows; /* the manifest's per-file counts, summed */
} kind_readback_t;

/* Reads back the files of one kind listed in the manifest at manifest_name. With seen (n_threads x
 * per_thread flags), rows "T,S,..." mark seen[T * per_thread + S]. */
static kind_readback_t read_kind(const char *dir, const char *manifest_name, const char *kind, const char *header,
                                 unsigned char *seen, uint64_t per_thread)
{
    kind_readback_t r = {0, 0, 0, 1, 0};
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, manifest_name);
    cJSON *m = read_json_file(path);
    assert_non_null(m);
    cJSON *file;
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(m, "files"))
    {
        const char *k = cJSON_GetStringValue(cJSON_GetObjectItem(file, "kind"));
        assert_non_null(k);
        if (strcmp(k, kind) != 0 || cJSON_IsTrue(cJSON_GetObjectItem(file, "removed_by_max_files")))
            continue;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(file, "name"));
        r.manifest_rows += (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(file, "records"));
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        r.files++;
        char line[TW_STREAM_ROW_MAX + 1];
        uint64_t size = 0, n = 0;
        while (fgets(line, sizeof line, fp) != NULL) {
            size += strlen(line);
            if (n++ == 0 && header != NULL) {
                if (strncmp(line, header, strlen(header)) != 0)
                    r.headers_ok = 0;
                continue;
            }
            assert_true(line[strlen(line) - 1] == '\n'); /* whole lines only */
            r.rows++;
            if (seen != NULL) {
                char *end;
                int json = line[0] == '{'; /* {"t":T,"s":S,... or T,S,... */
                unsigned long t = strtoul(line + (json ? 5 : 0), &end, 10);
                unsigned long q = strtoul(end + (json ? 5 : 1), NULL, 10);
                assert_true(q < per_thread);
                seen[t * per_thread + q]++;
            }
        }
        fclose(fp);
        if (size > r.max_file_size)
            r.max_file_size = size;
    }
    cJSON_Delete(m);
    return r;
}

static size_t gpu_row(tw_format_t format, char *out, size_t size, unsigned thread, uint64_t seq)
{
    int n = format == TW_FORMAT_CSV
                ? snprintf(out, size, "%u,%llu,kernel,\"void gemm<float, 128>(float*, int)\",1,2,0,7,42,1\n", thread,
                           (unsigned long long)seq)
                : snprintf(out, size, "{\"t\":%u,\"s\":%llu,\"kind\":\"kernel\",\"name\":\"gemm\"}\n", thread,
                           (unsigned long long)seq);
    return (size_t)n;
}

static void check_stream_rotation(tw_format_t format, const char *ext)
{
    enum { N = 3000 };
    fixture_t f;
    tw_writer_config_t config = {.format = format, .file_max_size = 8192, .file_name_spec = "serial", .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", format == TW_FORMAT_CSV ? GPU_HEADER : NULL, &s), 0);
    assert_int_equal(tw_writer_stream_format(s), format);
    record_calls(f.rec, f.ids, 500);
    unsigned char *seen = calloc(N, 1);
    char row[256];
    for (uint64_t i = 0; i < N; i++)
        assert_int_equal(tw_writer_stream_write(s, row, gpu_row(format, row, sizeof row, 0, i)), 0);
    close_fixture(&f);
    kind_readback_t r = read_kind(f.dir, "manifest.json", "gpu", format == TW_FORMAT_CSV ? GPU_HEADER : NULL, seen, N);
    assert_int_equal(r.rows, N);
    assert_int_equal(r.manifest_rows, N);
    assert_true(r.headers_ok);
    assert_true(r.files > 10);
    assert_true(r.max_file_size <= 8192);
    for (uint64_t i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
    /* the call records are untouched, listed as "calls", and their files are not the stream's */
    kind_readback_t calls = read_kind(f.dir, "manifest.json", "calls", NULL, NULL, 0);
    assert_int_equal(calls.manifest_rows, 500);
    char path[512];
    snprintf(path, sizeof path, "%s/tw-%ld-0001.gpu%s", f.dir, (long)getpid(), ext);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/tw-%ld-0001%s", f.dir, (long)getpid(), ext);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof path, "%s/manifest.json", f.dir);
    cJSON *m = read_json_file(path);
    cJSON *gpu = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "streams"), "gpu");
    assert_non_null(gpu);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(gpu, "records_written")), N);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(gpu, "records_dropped")), 0);
    assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "records_written")), 500);
    cJSON_Delete(m);
    tw_writer_stream_stats_t ss;
    tw_writer_stream_stats(s, &ss);
    assert_int_equal(ss.records_written, N);
    assert_int_equal(ss.records_dropped, 0);
    free(seen);
    free_fixture(&f);
}

static void csv_stream_files_rotate_under_the_cap_with_their_header(void **state)
{
    check_stream_rotation(TW_FORMAT_CSV, ".csv");
}

static void json_stream_files_rotate_under_the_cap(void **state)
{
    check_stream_rotation(TW_FORMAT_JSON, ".jsonl");
}

static void max_files_keeps_the_newest_of_each_kind(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 4096, .file_name_spec = "serial",
                                 .max_files = 2, .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER "\n", &s), 0);
    char row[256];
    for (uint64_t i = 0; i < 2000; i++)
        assert_int_equal(tw_writer_stream_write(s, row, gpu_row(TW_FORMAT_CSV, row, sizeof row, 0, i)), 0);
    record_calls(f.rec, f.ids, 3000);
    close_fixture(&f);
    kind_readback_t gpu = read_kind(f.dir, "manifest.json", "gpu", GPU_HEADER, NULL, 0);
    kind_readback_t calls = read_kind(f.dir, "manifest.json", "calls", NULL, NULL, 0);
    assert_int_equal(gpu.files, 2);
    assert_int_equal(calls.files, 2);
    /* on disk as well: two files of each kind, the rest removed */
    readback_t all = read_back(f.dir, ".csv", getpid());
    assert_int_equal(all.files, 4);
    free_fixture(&f);
}

#define STREAM_THREADS 4
#define PER_STREAM_THREAD 50000

typedef struct {
    tw_writer_stream_t *stream;
    unsigned thread;
    uint64_t refused;
} stream_producer_t;

static void *produce_rows(void *arg)
{
    stream_producer_t *p = arg;
    char row[256];
    for (uint64_t i = 0; i < PER_STREAM_THREAD; i++) {
        size_t len = gpu_row(TW_FORMAT_JSON, row, sizeof row, p->thread, i);
        int rc;
        while ((rc = tw_writer_stream_write(p->stream, row, len)) == TW_EFULL) {
            p->refused++; /* bounded memory: the writer is behind; try again */
            sched_yield();
        }
        assert_int_equal(rc, 0);
    }
    return NULL;
}

static void concurrent_stream_writers_lose_and_tear_nothing(void **state)
{
    fixture_t f;
    /* Streams take at most half of the budget: the call records keep 2 MiB (16 chunks) whatever
     * the streams do. */
    tw_writer_config_t config = {.format = TW_FORMAT_JSON, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .buffer_bytes = 4 << 20, .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", NULL, &s), 0);
    pthread_t threads[STREAM_THREADS];
    stream_producer_t producers[STREAM_THREADS];
    for (unsigned i = 0; i < STREAM_THREADS; i++) {
        producers[i] = (stream_producer_t){s, i, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, produce_rows, &producers[i]), 0);
    }
    record_calls(f.rec, f.ids, 10000); /* call records meanwhile, on this thread */
    uint64_t refused = 0;
    for (unsigned i = 0; i < STREAM_THREADS; i++) {
        pthread_join(threads[i], NULL);
        refused += producers[i].refused;
    }
    close_fixture(&f);
    unsigned char *seen = calloc((size_t)STREAM_THREADS * PER_STREAM_THREAD, 1);
    kind_readback_t r = read_kind(f.dir, "manifest.json", "gpu", NULL, seen, PER_STREAM_THREAD);
    assert_int_equal(r.rows, (uint64_t)STREAM_THREADS * PER_STREAM_THREAD);
    for (size_t i = 0; i < (size_t)STREAM_THREADS * PER_STREAM_THREAD; i++)
        assert_int_equal(seen[i], 1);
    tw_writer_stream_stats_t ss;
    tw_writer_stream_stats(s, &ss);
    assert_int_equal(ss.records_written, (uint64_t)STREAM_THREADS * PER_STREAM_THREAD);
    assert_int_equal(ss.records_dropped, refused); /* every refusal counted, nothing else lost */
    tw_writer_stats_t ws;
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, 10000);
    free(seen);
    free_fixture(&f);
}

static void gpu_rows_add_to_the_per_api_gpu_totals(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &s), 0);
    record_calls(f.rec, f.ids, 80);
    const char row[] = "1,torch.add,kernel,k,1,2,0,7,42,1";
    for (int i = 0; i < 10; i++) {
        assert_int_equal(tw_writer_stream_write_gpu(s, row, sizeof row - 1, f.ids[0], 1000), 0);
        assert_int_equal(tw_writer_stream_write_gpu(s, row, sizeof row - 1, f.ids[1], 7), 0);
    }
    assert_int_equal(tw_writer_stream_write_gpu(s, row, sizeof row - 1, TW_API_ID_NONE, 5), 0); /* unattributed */
    close_fixture(&f);
    char path[512];
    snprintf(path, sizeof path, "%s/summary.json", f.dir);
    cJSON *summary = read_json_file(path);
    assert_non_null(summary);
    cJSON *api;
    int found = 0;
    cJSON_ArrayForEach(api, cJSON_GetObjectItem(summary, "apis"))
    {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(api, "api"));
        uint64_t gpu = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "gpu_ns"));
        uint64_t calls = (uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(api, "calls"));
        assert_int_equal(calls, 10); /* GPU rows count no calls */
        if (strcmp(name, weird_names[0]) == 0)
            found++, assert_int_equal(gpu, 10000);
        else if (strcmp(name, weird_names[1]) == 0)
            found++, assert_int_equal(gpu, 70);
        else
            assert_int_equal(gpu, 0);
    }
    assert_int_equal(found, 2);
    cJSON_Delete(summary);
    free_fixture(&f);
}

static void stream_rows_are_refused_and_counted_when_bad_or_late(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 4096, .file_name_spec = "serial",
                                 .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s, *other;
    /* kinds: [a-z0-9_], at most 16 bytes, not "calls", each once; a CSV writer needs a header */
    assert_int_equal(tw_writer_add_stream(f.writer, "calls", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "../x", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "a.b", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "GPU", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "a_very_long_kind_name", GPU_HEADER, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", NULL, &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", "a\nb", &other), TW_EINVAL);
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &s), 0);
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &other), TW_EBUSY);
    assert_int_equal(tw_writer_add_stream(f.writer, "trace_2", "a,b", &other), 0);
    /* a row with a line break inside, or too long for a file */
    assert_int_equal(tw_writer_stream_write(s, "a\nb", 3), TW_EINVAL);
    char *big = malloc(5000);
    memset(big, 'x', 5000);
    assert_int_equal(tw_writer_stream_write(s, big, 5000), TW_EINVAL);
    free(big);
    assert_int_equal(tw_writer_stream_write(s, "1,2", 3), 0);
    close_fixture(&f);
    assert_int_equal(tw_writer_stream_write(s, "1,2", 3), TW_ECLOSED);
    assert_int_equal(tw_writer_add_stream(f.writer, "late", "a", &other), TW_ECLOSED);
    tw_writer_stream_add_dropped(s, 5);
    tw_writer_stream_stats_t ss;
    tw_writer_stream_stats(s, &ss);
    assert_int_equal(ss.records_written, 1);
    assert_int_equal(ss.records_lost_upstream, 5);
    assert_int_equal(ss.records_dropped, 3 + 5);
    free_fixture(&f);
}

/* GPU rows know when they were launched, not in which step: the writer says which step that was. */
static void the_step_of_a_moment_is_the_step_in_progress_then(void **state)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.file_max_size = 1 << 20, .rank = -1});
    int64_t before = tw_clock_epoch_ns(&f.clock, tw_clock_ticks(TW_CLOCK_MONOTONIC)) - 1000000;
    int64_t begun[6];
    for (uint64_t step = 1; step <= 5; step++) {
        usleep(2000);
        tw_writer_set_step(f.writer, step);
        begun[step] = tw_clock_epoch_ns(&f.clock, tw_clock_ticks(TW_CLOCK_MONOTONIC));
    }
    assert_int_equal(tw_writer_step(f.writer), 5);
    for (uint64_t step = 1; step <= 4; step++) {
        assert_int_equal(tw_writer_step_at(f.writer, begun[step] + 10), step);
        assert_int_equal(tw_writer_step_at(f.writer, begun[step + 1] - 1000000), step); /* 1 ms before the next */
    }
    assert_int_equal(tw_writer_step_at(f.writer, begun[5] + 1000000000), 5);
    assert_int_equal(tw_writer_step_at(f.writer, before), 0); /* before step 1: step 0, from the start */
    /* Only the last 256 boundaries are remembered: an older moment gets the oldest step known. */
    for (uint64_t step = 6; step <= 300; step++)
        tw_writer_set_step(f.writer, step);
    assert_int_equal(tw_writer_step_at(f.writer, before), 300 - 256 + 1);
    close_fixture(&f);
    free_fixture(&f);
}

static void a_forked_child_writes_its_own_stream_files(void **state)
{
    if (getenv("TW_UNDER_TSAN") != NULL)
        skip(); /* ThreadSanitizer cannot follow a fork of a threaded process ("dup thread") */
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1};
    open_fixture(&f, config);
    tw_writer_stream_t *s;
    assert_int_equal(tw_writer_add_stream(f.writer, "gpu", GPU_HEADER, &s), 0);
    char row[256];
    for (uint64_t i = 0; i < 100; i++) /* queued in the parent at the fork */
        tw_writer_stream_write(s, row, gpu_row(TW_FORMAT_CSV, row, sizeof row, 0, i));
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        for (uint64_t i = 0; i < 10; i++)
            tw_writer_stream_write(s, row, gpu_row(TW_FORMAT_CSV, row, sizeof row, 1, i));
        tw_recorder_collect(f.rec);
        int rc = tw_writer_close(f.writer);
        tw_writer_stream_stats_t ss;
        tw_writer_stream_stats(s, &ss);
        _exit(rc == 0 && ss.records_written == 10 ? 0 : 1);
    }
    for (uint64_t i = 100; i < 200; i++)
        tw_writer_stream_write(s, row, gpu_row(TW_FORMAT_CSV, row, sizeof row, 0, i));
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close_fixture(&f);
    kind_readback_t mine = read_kind(f.dir, "manifest.json", "gpu", GPU_HEADER, NULL, 0);
    char name[64];
    snprintf(name, sizeof name, "manifest-%ld.json", (long)child);
    kind_readback_t theirs = read_kind(f.dir, name, "gpu", GPU_HEADER, NULL, 0);
    assert_int_equal(mine.rows, 200);  /* the parent's queued rows, once */
    assert_int_equal(theirs.rows, 10); /* the child's own only */
    free_fixture(&f);
}

/* ---- compress "gzip" --------------------------------------------------------------------------- */

/* The same records plain and compressed: every compressed file is at most the cap, one whole gzip
 * member on its own (its CSV header first), and the data rows of all of them, in name order, are the
 * plain files' byte for byte; the manifest says "gzip" and lists each file complete. */
static void check_gzip(tw_format_t format, const char *ext, const char *gz_ext)
{
    enum { N = 20000, CAP = 8192 };
    fixture_t plain, packed;
    tw_writer_config_t config = {.format = format, .file_max_size = CAP, .file_name_spec = "serial", .rank = -1};
    open_fixture(&plain, config);
    record_calls(plain.rec, plain.ids, N);
    close_fixture(&plain);
    config.compress = TW_COMPRESS_GZIP;
    open_fixture(&packed, config);
    record_calls(packed.rec, packed.ids, N);
    close_fixture(&packed);
    readback_t p = read_back_data(plain.dir, ext, getpid(), 1);
    readback_t z = read_back_data(packed.dir, gz_ext, getpid(), 1);
    assert_int_equal(z.rows, N);
    assert_true(z.header_ok);
    assert_int_equal(z.unknown, 0);
    assert_int_equal(z.incomplete, 0);
    assert_true(z.max_file_size <= CAP);
    assert_true(z.max_file_size > CAP * 3 / 4); /* filled, not rotated early */
    assert_true(z.files * 3 < p.files);         /* these rows deflate to a third and less */
    assert_int_equal(z.data_len, p.data_len);
    assert_memory_equal(z.data, p.data, p.data_len);
    assert_int_equal(read_back(packed.dir, ext, getpid()).files, 0); /* no plain file beside them */
    tw_writer_stats_t ws;
    tw_writer_stats(packed.writer, &ws);
    assert_int_equal(ws.records_written, N);
    assert_int_equal(ws.records_dropped, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.json", packed.dir);
    cJSON *m = read_json_file(path);
    assert_non_null(m);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "compress")), "gzip");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "files")), z.files);
    uint64_t bytes = 0;
    cJSON *file;
    cJSON_ArrayForEach(file, cJSON_GetObjectItem(m, "files"))
    {
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(file, "complete")));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(file, "name"));
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", packed.dir, name);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal((uint64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(file, "bytes")), (uint64_t)st.st_size);
        bytes += (uint64_t)st.st_size;
    }
    assert_int_equal(ws.bytes_written, bytes); /* compressed bytes: what is on disk */
    cJSON_Delete(m);
    free(p.data);
    free(z.data);
    free_fixture(&plain);
    free_fixture(&packed);
}

static void gzip_csv_files_stay_under_the_cap_and_each_inflates_alone_to_the_plain_rows(void **state)
{
    check_gzip(TW_FORMAT_CSV, ".csv", ".csv.gz");
}

static void gzip_json_files_stay_under_the_cap_and_each_inflates_alone_to_the_plain_rows(void **state)
{
    check_gzip(TW_FORMAT_JSON, ".jsonl", ".jsonl.gz");
}

/* Arguments of random text deflate to most of their size (stored blocks at worst): the cap holds at
 * the smallest file size all the same, with every record whole. */
static void gzip_of_incompressible_arguments_stays_under_the_cap(void **state)
{
    enum { N = 3000 };
    for (int format = 0; format < 2; format++) {
        fixture_t f;
        tw_writer_config_t config = {.format = (tw_format_t)format, .file_max_size = TW_CONFIG_MIN_FILE_SIZE,
                                     .file_name_spec = "serial", .rank = -1, .compress = TW_COMPRESS_GZIP};
        open_fixture(&f, config);
        tw_thread_t *t = tw_recorder_attach(f.rec);
        unsigned seed = 7;
        char args[TW_ARGS_MAX];
        for (uint64_t i = 0; i < N; i++) {
            uint32_t len = (uint32_t)(rand_r(&seed) % (i % 100 == 0 ? TW_ARGS_MAX : 400));
            for (uint32_t k = 0; k < len; k++)
                args[k] = (char)(' ' + rand_r(&seed) % 95); /* printable: a byte of text each */
            tw_frame_t *frame = tw_call_begin(t);
            tw_call_end_args(t, frame, f.ids[i % WEIRD_COUNT], 1000 * i, 1000 * i + 10, 0, args, len);
        }
        close_fixture(&f);
        readback_t r = read_back(f.dir, format == TW_FORMAT_CSV ? ".csv.gz" : ".jsonl.gz", getpid());
        assert_int_equal(r.rows, N);
        assert_int_equal(r.incomplete, 0);
        assert_true(r.max_file_size <= TW_CONFIG_MIN_FILE_SIZE);
        assert_true(r.max_file_size > TW_CONFIG_MIN_FILE_SIZE * 3 / 4);
        tw_writer_stats_t ws;
        tw_writer_stats(f.writer, &ws);
        assert_int_equal(ws.records_written, N);
        assert_int_equal(ws.records_truncated, 0);
        free_fixture(&f);
    }
}

/* A write that fails leaves a hole in its member: the records of that flush are dropped and counted,
 * that file ends there (read to its hole), and the next records go to a new, whole file. */
static void a_failed_gzip_write_drops_its_flush_and_goes_on_in_a_new_file(void **state)
{
    fixture_t f;
    tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 1 << 20, .file_name_spec = "serial",
                                 .rank = -1, .compress = TW_COMPRESS_GZIP, .flush_interval_ns = 5 * 1000 * 1000};
    open_fixture(&f, config);
    tw_writer_stats_t ws;
    record_calls(f.rec, f.ids, 3000);
    tw_recorder_collect(f.rec);
    do { /* written: deflated, and on disk */
        usleep(1000);
        tw_writer_stats(f.writer, &ws);
    } while (ws.records_written < 3000);
    __atomic_store_n(&inject_errno, ENOSPC, __ATOMIC_RELAXED);
    record_calls(f.rec, f.ids, 2000);
    tw_recorder_collect(f.rec);
    do {
        usleep(1000);
        tw_writer_stats(f.writer, &ws);
    } while (ws.records_dropped < 2000);
    __atomic_store_n(&inject_errno, 0, __ATOMIC_RELAXED);
    record_calls(f.rec, f.ids, 1000);
    tw_recorder_collect(f.rec);
    assert_int_equal(tw_writer_close(f.writer), TW_EIO);
    tw_writer_stats(f.writer, &ws);
    assert_int_equal(ws.records_written, 4000);
    assert_int_equal(ws.records_dropped, 2000);
    readback_t r = read_back(f.dir, ".csv.gz", getpid());
    assert_true(r.files >= 2);
    assert_int_equal(r.incomplete, r.files - 1); /* each ends at its hole; the last one is whole */
    assert_int_equal(r.rows, 4000);
    free_fixture(&f);
}

static int count_row(void *ctx, const tw_row_t *row)
{
    (void)ctx;
    (void)row;
    return 0;
}

/* A process killed while writing (SIGKILL: no close, no member's end) leaves files that read, through
 * the library's reader, to its last flush: every record written before the kill. */
static void a_killed_gzip_writer_leaves_files_read_to_its_last_flush(void **state)
{
    if (getenv("TW_UNDER_TSAN") != NULL)
        skip(); /* ThreadSanitizer cannot follow a fork of a threaded process */
    enum { N = 30000 };
    char dir[] = "/tmp/tw-test-killed-XXXXXX";
    assert_non_null(mkdtemp(dir));
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        fixture_t f;
        tw_writer_config_t config = {.format = TW_FORMAT_CSV, .file_max_size = 64 * 1024, .file_name_spec = "serial",
                                     .rank = -1, .compress = TW_COMPRESS_GZIP,
                                     .flush_interval_ns = 5 * 1000 * 1000};
        open_fixture(&f, config);
        record_calls(f.rec, f.ids, N);
        tw_recorder_collect(f.rec);
        tw_writer_stats_t ws;
        do {
            usleep(1000);
            tw_writer_stats(f.writer, &ws);
        } while (ws.records_written < N);
        char to[256];
        snprintf(to, sizeof to, "%s/out", dir); /* where the parent finds them */
        rename(f.dir, to);
        raise(SIGKILL);
    }
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    char out[256], path[512];
    snprintf(out, sizeof out, "%s/out", dir);
    readback_t r = read_back(out, ".csv.gz", child);
    assert_int_equal(r.rows, N);
    assert_int_equal(r.incomplete, 1); /* the last file: no member's end */
    assert_true(r.files > 1);          /* the others rotated, complete */
    /* The reader: every row, no torn line, no error. */
    uint64_t rows = 0;
    DIR *d = opendir(out);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strstr(e->d_name, ".csv.gz") == NULL)
            continue;
        snprintf(path, sizeof path, "%s/%s", out, e->d_name);
        tw_read_stats_t st = {0};
        char err[512];
        assert_int_equal(tw_read_file(path, count_row, NULL, &st, err, sizeof err), 0);
        assert_int_equal(st.truncated + st.malformed, 0);
        rows += st.rows;
    }
    closedir(d);
    assert_int_equal(rows, N);
    rm_rf(out);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(csv_files_never_exceed_the_cap_and_read_back_identical),
        cmocka_unit_test(json_files_never_exceed_the_cap_and_read_back_identical),
        cmocka_unit_test(json_strings_are_escaped_per_rfc8259),
        cmocka_unit_test(json_escape_matches_a_reference_for_every_byte_anywhere_in_a_run),
        cmocka_unit_test(module_paths_are_written_before_the_step_and_site_columns),
        cmocka_unit_test(a_backward_node_names_its_forward_call_in_place_of_arguments),
        cmocka_unit_test(flops_and_memory_are_written_per_call_with_totals_and_self),
        cmocka_unit_test(a_schedule_writes_the_records_of_active_steps_only),
        cmocka_unit_test(summary_only_writes_the_summary_and_no_record_file),
        cmocka_unit_test(a_capture_writes_its_steps_to_a_dir_of_its_own),
        cmocka_unit_test(the_summary_is_rewritten_while_the_program_runs),
        cmocka_unit_test(records_find_their_capture_among_many),
        cmocka_unit_test(a_capture_is_finished_while_the_program_runs_and_counts_late_records),
        cmocka_unit_test(an_existing_name_is_never_overwritten),
        cmocka_unit_test(max_files_keeps_the_newest),
        cmocka_unit_test(eight_producers_lose_nothing),
        cmocka_unit_test(a_writer_starved_of_cpu_loses_nothing),
        cmocka_unit_test(a_writer_starved_of_cpu_loses_nothing_when_producers_wait),
        cmocka_unit_test(a_writer_starved_of_cpu_loses_nothing_where_it_may_not_be_raised),
        cmocka_unit_test(a_full_disk_drops_and_counts_and_goes_on),
        cmocka_unit_test(a_forked_child_writes_its_own_files),
        cmocka_unit_test(ranks_sharing_out_dir_write_their_own_manifests_and_ranked_names),
        cmocka_unit_test(a_manifest_key_set_while_writing_is_in_the_final_manifest),
        cmocka_unit_test(an_idle_writer_sleeps_between_flushes),
        cmocka_unit_test(a_manifest_read_during_rotation_is_always_complete),
        cmocka_unit_test(a_world_writable_out_dir_draws_a_warning),
        cmocka_unit_test(bad_configs_name_the_problem),
        cmocka_unit_test(csv_stream_files_rotate_under_the_cap_with_their_header),
        cmocka_unit_test(json_stream_files_rotate_under_the_cap),
        cmocka_unit_test(max_files_keeps_the_newest_of_each_kind),
        cmocka_unit_test(concurrent_stream_writers_lose_and_tear_nothing),
        cmocka_unit_test(gpu_rows_add_to_the_per_api_gpu_totals),
        cmocka_unit_test(stream_rows_are_refused_and_counted_when_bad_or_late),
        cmocka_unit_test(a_forked_child_writes_its_own_stream_files),
        cmocka_unit_test(gzip_csv_files_stay_under_the_cap_and_each_inflates_alone_to_the_plain_rows),
        cmocka_unit_test(gzip_json_files_stay_under_the_cap_and_each_inflates_alone_to_the_plain_rows),
        cmocka_unit_test(gzip_of_incompressible_arguments_stays_under_the_cap),
        cmocka_unit_test(a_failed_gzip_write_drops_its_flush_and_goes_on_in_a_new_file),
        cmocka_unit_test(a_killed_gzip_writer_leaves_files_read_to_its_last_flush),
        cmocka_unit_test(the_step_of_a_moment_is_the_step_in_progress_then),
    };
    return cmocka_run_group_tests_name("writer", tests, NULL, NULL);
}
