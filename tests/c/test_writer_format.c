/* SPDX-License-Identifier: MIT */
/* What the writer writes in a record: JSON escaping, and the columns of autograd nodes, resources
 * and modules, in CSV and JSON lines. */
#include "writer_fixture.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    char line[4096], want[128];
    FILE *fp = open_first_records(&f, ext);
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
    char line[4096];
    FILE *fp = open_first_records(&f, ext);
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
    FILE *fp = open_first_records(&f, ext);
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

/* The writer keeps a record stream's pid, tid and the leading digits of its start times formatted
 * (format.h's cache): each start is written exactly, whatever the order of the starts (a parent's record
 * follows its children's, with an earlier start), across 0.1 s boundaries of the clock and far from
 * the last one, and when the thread changes (another thread's chunk between this one's). */
static const uint64_t start_ticks[] = {99999999, 100000000, 5, 300000007, 300000007, 0, 99999999999999999ull,
                                       100000000, 7, 4099999999ull, 4100000000ull};
#define START_COUNT (sizeof start_ticks / sizeof start_ticks[0])
static long start_tids[START_COUNT]; /* the thread that recorded each */

typedef struct {
    tw_recorder_t *rec;
    uint32_t api;
    size_t from, to;
} starts_job_t;

static void record_starts(tw_recorder_t *rec, uint32_t api, size_t from, size_t to)
{
    tw_thread_t *t = tw_recorder_attach(rec);
    assert_non_null(t);
    for (size_t i = from; i < to; i++) {
        tw_frame_t *frame = tw_call_begin(t);
        frame->site = (uint32_t)i; /* which start it is, in the file */
        tw_call_end(t, frame, api, start_ticks[i], start_ticks[i] + 10, 0);
        start_tids[i] = (long)syscall(SYS_gettid);
    }
    tw_thread_flush(t);
}

static void *record_starts_thread(void *arg)
{
    starts_job_t *job = arg;
    record_starts(job->rec, job->api, job->from, job->to);
    return NULL;
}

/* Where a number of a record's line begins: CSV column `column` (counted from 0; no field before it
 * holds a comma), or the value after JSON key `key`. */
static const char *record_field(tw_format_t format, const char *line, int column, const char *key)
{
    if (format == TW_FORMAT_CSV) {
        for (int i = 0; i < column; i++) {
            line = strchr(line, ',');
            assert_non_null(line);
            line++;
        }
        return line;
    }
    const char *p = strstr(line, key);
    assert_non_null(p);
    return p + strlen(key);
}

static void check_starts(tw_format_t format, const char *ext)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = format, .file_max_size = 1 << 20, .file_name_spec = "serial", .rank = -1});
    uint32_t api;
    assert_int_equal(tw_api_intern("torch.add", &api), 0);
    record_starts(f.rec, api, 0, 4);
    starts_job_t job = {f.rec, api, 4, 7};
    pthread_t other;
    assert_int_equal(pthread_create(&other, NULL, record_starts_thread, &job), 0);
    assert_int_equal(pthread_join(other, NULL), 0);
    record_starts(f.rec, api, 7, START_COUNT);
    close_fixture(&f);
    FILE *fp = open_first_records(&f, ext);
    char line[4096];
    int seen[START_COUNT] = {0};
    if (format == TW_FORMAT_CSV)
        assert_non_null(fgets(line, sizeof line, fp)); /* the header */
    while (fgets(line, sizeof line, fp) != NULL) {
        /* call_id,api,start_ns,...: "torch.add" needs no quoting, args are empty */
        long long start = strtoll(record_field(format, line, 2, "\"start_ns\":"), NULL, 10);
        long long pid = strtoll(record_field(format, line, 6, "\"pid\":"), NULL, 10);
        long long tid = strtoll(record_field(format, line, 7, "\"tid\":"), NULL, 10);
        long long site = strtoll(record_field(format, line, 14, "\"site\":"), NULL, 10);
        assert_true(site >= 0 && site < (long long)START_COUNT);
        assert_int_equal(start, tw_clock_epoch_ns(&f.clock, start_ticks[site]));
        assert_int_equal(tid, start_tids[site]);
        assert_int_equal(pid, getpid());
        seen[site]++;
    }
    fclose(fp);
    for (size_t i = 0; i < START_COUNT; i++)
        assert_int_equal(seen[i], 1);
    free_fixture(&f);
}

static void cached_digits_write_every_start_exactly(void **state)
{
    (void)state;
    check_starts(TW_FORMAT_CSV, ".csv");
    check_starts(TW_FORMAT_JSON, ".jsonl");
}

/*
 * A record's cost and self time are written exactly at every length of their digits, whether they are
 * equal (a call with no recorded call inside: the writer writes the cost's digits again) or not (a
 * parent: self is the cost less its child's), from 1 digit to a cost of 2^64 - 1 ticks.
 */
static const uint64_t cost_ticks[] = {1, 9, 10, 99999999, 100000000, 999999999999999ull, 1000000000000000ull,
                                      9999999999999999ull, 10000000000000000ull, 99999999999999999ull,
                                      12345678901234567890ull, UINT64_MAX};
#define COST_COUNT (sizeof cost_ticks / sizeof cost_ticks[0])

static void check_costs(tw_format_t format, const char *ext)
{
    fixture_t f;
    open_fixture(&f, (tw_writer_config_t){.format = format, .file_max_size = 1 << 20, .file_name_spec = "serial", .rank = -1});
    uint32_t api;
    assert_int_equal(tw_api_intern("torch.add", &api), 0);
    tw_thread_t *t = tw_recorder_attach(f.rec);
    assert_non_null(t);
    for (uint32_t i = 0; i < COST_COUNT; i++) {
        /* a leaf (site 2i), then a parent (site 2i + 1) around a child of 1 tick (site 1000) */
        tw_frame_t *leaf = tw_call_begin(t);
        leaf->site = 2 * i;
        tw_call_end(t, leaf, api, 0, cost_ticks[i], 0);
        tw_frame_t *parent = tw_call_begin(t);
        parent->site = 2 * i + 1;
        tw_frame_t *child = tw_call_begin(t);
        child->site = 1000;
        tw_call_end(t, child, api, 0, 1, 0);
        tw_call_end(t, parent, api, 0, cost_ticks[i], 0);
    }
    tw_thread_flush(t);
    close_fixture(&f);
    FILE *fp = open_first_records(&f, ext);
    char line[4096];
    unsigned seen[2 * COST_COUNT] = {0};
    if (format == TW_FORMAT_CSV)
        assert_non_null(fgets(line, sizeof line, fp)); /* the header */
    while (fgets(line, sizeof line, fp) != NULL) {
        /* unsigned: a cost of 2^64 - 1 ticks may pass 2^63 ns */
        unsigned long long cost = strtoull(record_field(format, line, 3, "\"cost_ns\":"), NULL, 10);
        unsigned long long self = strtoull(record_field(format, line, 4, "\"self_ns\":"), NULL, 10);
        unsigned long long site = strtoull(record_field(format, line, 14, "\"site\":"), NULL, 10);
        if (site == 1000) {
            assert_int_equal(cost, tw_clock_duration_ns(&f.clock, 1));
            continue;
        }
        assert_true(site < 2 * COST_COUNT);
        uint64_t ticks = cost_ticks[site / 2];
        assert_int_equal(cost, tw_clock_duration_ns(&f.clock, ticks));
        assert_int_equal(self, tw_clock_duration_ns(&f.clock, site % 2 == 0 ? ticks : ticks - 1));
        seen[site]++;
    }
    fclose(fp);
    for (size_t i = 0; i < 2 * COST_COUNT; i++)
        assert_int_equal(seen[i], 1);
    free_fixture(&f);
}

static void cost_and_self_are_written_exactly_equal_or_not(void **state)
{
    (void)state;
    check_costs(TW_FORMAT_CSV, ".csv");
    check_costs(TW_FORMAT_JSON, ".jsonl");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_strings_are_escaped_per_rfc8259),
        cmocka_unit_test(cached_digits_write_every_start_exactly),
        cmocka_unit_test(cost_and_self_are_written_exactly_equal_or_not),
        cmocka_unit_test(json_escape_matches_a_reference_for_every_byte_anywhere_in_a_run),
        cmocka_unit_test(module_paths_are_written_before_the_step_and_site_columns),
        cmocka_unit_test(a_backward_node_names_its_forward_call_in_place_of_arguments),
        cmocka_unit_test(flops_and_memory_are_written_per_call_with_totals_and_self),
    };
    return cmocka_run_group_tests_name("writer_format", tests, NULL, NULL);
}
