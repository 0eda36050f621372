/* SPDX-License-Identifier: MIT */
#include "tw_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

/* Rows read back, flattened to text so that tests compare them whole. */
typedef struct collected {
    char text[16][512];
    size_t count;
    tw_file_kind_t kind;
} collected_t;

static int collect(void *ctx, const tw_row_t *r)
{
    collected_t *c = ctx;
    if (c->count < 16) {
        snprintf(c->text[c->count], sizeof c->text[0],
                 "%llu|%.*s|%llu|%llu|%llu|%lld|%llu|%llu|%llu|%d|%.*s|%.*s|%.*s|%llu",
                 (unsigned long long)r->call_id, (int)r->api.len, r->api.ptr, (unsigned long long)r->start_ns,
                 (unsigned long long)r->cost_ns, (unsigned long long)r->self_ns, (long long)r->pid,
                 (unsigned long long)r->tid, (unsigned long long)r->depth, (unsigned long long)r->parent_id, r->error,
                 (int)r->args.len, r->args.ptr, (int)r->gpu_kind.len, r->gpu_kind.ptr, (int)r->name.len, r->name.ptr,
                 (unsigned long long)r->end_ns);
    }
    c->count++;
    c->kind = r->kind;
    return 0;
}

static int read_text(const char *text, collected_t *c, tw_read_stats_t *stats, char *err)
{
    memset(c, 0, sizeof *c);
    memset(stats, 0, sizeof *stats);
    return tw_read_buffer("test.csv", text, strlen(text), collect, c, stats, err, 512);
}

#define HEADER "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args\n"
#define HEADER_MODULE "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module\n"

static void csv_rows_with_quotes_commas_and_newlines_read_back_whole(void **state)
{
    collected_t c;
    tw_read_stats_t st;
    char err[512];
    assert_int_equal(read_text(HEADER "1,torch.add,100,20,20,0,7,8,0,0,0,\"f32[2,3]@cpu, 1\"\n"
                                      "2,torch.Tensor.__repr__,200,30,10,0,7,8,1,5,1,\"say \"\"hi\"\"\nthere\"\r\n"
                                      "3,torch.view,300,5,5,0,7,8,0,0,0,\n",
                               &c, &st, err),
                     0);
    assert_int_equal(c.count, 3);
    assert_int_equal(c.kind, TW_FILE_CALLS);
    assert_string_equal(c.text[0], "1|torch.add|100|20|20|7|8|0|0|0|f32[2,3]@cpu, 1|||0");
    assert_string_equal(c.text[1], "2|torch.Tensor.__repr__|200|30|10|7|8|1|5|1|say \"hi\"\nthere|||0");
    assert_string_equal(c.text[2], "3|torch.view|300|5|5|7|8|0|0|0||||0");
    assert_int_equal(st.truncated + st.malformed, 0);
}

static void json_lines_with_escapes_and_unicode_read_back_whole(void **state)
{
    collected_t c;
    tw_read_stats_t st;
    char err[512];
    const char *text =
        "{\"call_id\":1,\"api\":\"torch.add\",\"start_ns\":100,\"cost_ns\":20,\"self_ns\":20,\"gpu_ns\":0,\"pid\":7,"
        "\"tid\":8,\"depth\":0,\"parent_id\":0,\"error\":false,\"args\":\"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\\t\"}\n"
        "{ \"call_id\" : 2 , \"api\":\"x\",\"start_ns\":-5,\"cost_ns\":1,\"self_ns\":1,\"gpu_ns\":0,\"pid\":7,"
        "\"tid\":8,\"depth\":0,\"parent_id\":0,\"error\":true,\"args\":\"\"}\n";
    assert_int_equal(read_text(text, &c, &st, err), 0);
    assert_int_equal(c.count, 2);
    assert_string_equal(c.text[0], "1|torch.add|100|20|20|7|8|0|0|0|a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80\t|||0");
    /* A start before 1970 is written signed and read back as the same 64 bits. */
    assert_string_equal(c.text[1], "2|x|18446744073709551611|1|1|7|8|0|0|1||||0");
}

static void columns_of_a_newer_version_are_ignored_in_any_order(void **state)
{
    collected_t c;
    tw_read_stats_t st;
    char err[512];
    assert_int_equal(read_text("api,future,call_id,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,"
                               "later\ntorch.add,\"x,y\",1,100,20,20,0,7,8,0,0,0,,encoder.0\n",
                               &c, &st, err),
                     0);
    assert_int_equal(c.count, 1);
    assert_string_equal(c.text[0], "1|torch.add|100|20|20|7|8|0|0|0||||0");
    assert_int_equal(read_text("{\"call_id\":1,\"nested\":{\"path\":\"a.b\",\"n\":[1,{\"x\":\"}\"}]},\"api\":\"y\","
                               "\"start_ns\":1,\"cost_ns\":2,\"extra\":null,\"self_ns\":2,\"pid\":3,\"tid\":4}\n",
                               &c, &st, err),
                     0);
    assert_int_equal(c.count, 1);
    assert_string_equal(c.text[0], "1|y|1|2|2|3|4|0|0|0||||0");
}

static void a_torn_last_line_is_skipped_and_counted(void **state)
{
    collected_t c;
    tw_read_stats_t st;
    char err[512];
    assert_int_equal(read_text(HEADER "1,a,1,2,2,0,7,8,0,0,0,\n2,b,1,2,2,0,7,8,0,0,0,\"cut in the mi", &c, &st, err),
                     0);
    assert_int_equal(c.count, 1);
    assert_int_equal(st.truncated, 1);
    assert_int_equal(read_text(HEADER "1,a,1,2,2,0,7,8,0,0,0,\n2,b,1,2", &c, &st, err), 0);
    assert_int_equal(c.count, 1);
    assert_int_equal(st.truncated, 1);
    assert_int_equal(read_text("{\"call_id\":1,\"api\":\"a\",\"start_ns\":1,\"cost_ns\":2}\n{\"call_id\":2,\"ap", &c, &st,
                               err),
                     0);
    assert_int_equal(c.count, 1);
    assert_int_equal(st.truncated, 1);
}

static void corrupt_rows_cost_only_themselves(void **state)
{
    collected_t c;
    tw_read_stats_t st;
    char err[512];
    assert_int_equal(read_text(HEADER "1,a,1,2,2,0,7,8,0,0,0,\nx,b,1,2,2,0,7,8,0,0,0,\n3,c,1,2\n4,d,1,\"2\"x,2,0,7,8,0,"
                                      "0,0,\n5,e,1,2,2,0,7,8,0,0,0,\n",
                               &c, &st, err),
                     0);
    assert_int_equal(c.count, 2);
    assert_int_equal(st.malformed, 3);
    assert_string_equal(c.text[1], "5|e|1|2|2|7|8|0|0|0||||0");
}

static void a_file_that_is_not_ours_is_named_in_the_error(void **state)
{
    collected_t c;
    tw_read_stats_t st;
    char err[512];
    assert_int_equal(read_text("name,age\nbob,42\n", &c, &st, err), TW_EINVAL);
    assert_non_null(strstr(err, "test.csv is not a TorchWrapper record file"));
    assert_non_null(strstr(err, "'name,age'"));
    assert_int_equal(read_text("{\"hello\": 1}\n", &c, &st, err), TW_EINVAL);
    assert_non_null(strstr(err, "test.csv is not a TorchWrapper record file"));
    assert_int_equal(read_text("\x7f" "ELF\x02\x01", &c, &st, err), TW_EINVAL);
    /* An empty file is a process that died before writing: no rows, no error. */
    assert_int_equal(read_text("", &c, &st, err), 0);
    assert_int_equal(c.count, 0);
}

static void gpu_records_are_read_with_their_duration(void **state)
{
    collected_t c;
    tw_read_stats_t st;
    char err[512];
    assert_int_equal(read_text("call_id,api,kind,name,start_ns,end_ns,device,stream,correlation_id,pid\n"
                               "12,torch.matmul,kernel,\"gemm<float, 128>\",1000,1750,0,7,99,42\n"
                               "0,,memcpy,,2000,0,0,7,100,42\n",
                               &c, &st, err),
                     0);
    assert_int_equal(c.kind, TW_FILE_GPU);
    assert_int_equal(c.count, 2);
    /* cost is end - start; a kernel still running at a forced flush (end 0) costs 0, not 2^64 - 2000. */
    assert_string_equal(c.text[0], "12|torch.matmul|1000|750|0|42|0|0|0|0||kernel|gemm<float, 128>|1750");
    assert_string_equal(c.text[1], "0||2000|0|0|42|0|0|0|0||memcpy||0");
}

static void csv_split_reports_incomplete_and_malformed_records(void **state)
{
    tw_str_t f[8];
    size_t n;
    char scratch[64];
    assert_int_equal(tw_csv_split("a,\"b\"\"c\",d\n", 11, f, 8, &n, scratch, sizeof scratch), 11);
    assert_int_equal(n, 3);
    assert_int_equal(f[1].len, 3);
    assert_memory_equal(f[1].ptr, "b\"c", 3);
    assert_int_equal(tw_csv_split("a,\"b\n", 5, f, 8, &n, scratch, sizeof scratch), 0);   /* quote still open */
    assert_int_equal(tw_csv_split("a,b", 3, f, 8, &n, scratch, sizeof scratch), 0);      /* no line end yet */
    assert_int_equal(tw_csv_split("a,b\"c\n", 6, f, 8, &n, scratch, sizeof scratch), -1); /* quote in a field */
    assert_int_equal(tw_csv_split("\"a\"b\n", 5, f, 8, &n, scratch, sizeof scratch), -1); /* text after a quote */
    assert_int_equal(tw_csv_split("a,b,c\n", 6, f, 2, &n, scratch, sizeof scratch), -1);  /* too many fields */
    assert_int_equal(tw_csv_split("\n", 1, f, 8, &n, scratch, sizeof scratch), 1);
    assert_int_equal(n, 1);
    assert_int_equal(f[0].len, 0);
}

static void files_are_read_across_buffer_refills(void **state)
{
    /* 3 MiB of rows: more than the 1 MiB read block, with a row straddling each refill. */
    char path[] = "/tmp/tw-test-reader-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(HEADER, f);
    size_t rows = 0;
    for (long bytes = 0; bytes < 3 << 20; rows++)
        bytes += fprintf(f, "%zu,torch.add,%zu,%zu,1,0,7,8,0,0,0,\"f32[%zu]@cpu, %s\"\n", rows + 1, rows, rows % 1000,
                         rows, rows % 7 ? "x" : "a \"\"quoted\"\" arg");
    fclose(f);
    collected_t c;
    memset(&c, 0, sizeof c);
    tw_read_stats_t st = {0};
    char err[512];
    assert_int_equal(tw_read_file(path, collect, &c, &st, err, sizeof err), 0);
    assert_int_equal(c.count, rows);
    assert_int_equal(st.rows, rows);
    assert_int_equal(st.malformed + st.truncated, 0);
    tw_file_kind_t kind;
    assert_int_equal(tw_read_kind(path, &kind, err, sizeof err), 0);
    assert_int_equal(kind, TW_FILE_CALLS);
    unlink(path);
    assert_int_equal(tw_read_file(path, collect, &c, &st, err, sizeof err), TW_EIO);
    assert_non_null(strstr(err, path));
}

static int collect_module(void *ctx, const tw_row_t *r)
{
    char *out = ctx;
    snprintf(out + strlen(out), 64, "[%.*s]", (int)r->module.len, r->module.ptr);
    return 0;
}

static void module_paths_are_read_and_null_is_no_path(void **state)
{
    char modules[256] = "", err[512];
    const char *csv = HEADER_MODULE "1,a,1,2,2,0,7,8,1,3,0,,features.0\n2,b,1,2,2,0,7,8,0,0,0,,\n";
    assert_int_equal(tw_read_buffer("m.csv", csv, strlen(csv), collect_module, modules, NULL, err, sizeof err), 0);
    assert_string_equal(modules, "[features.0][]");
    modules[0] = '\0';
    const char *json = "{\"call_id\":1,\"api\":\"a\",\"start_ns\":1,\"cost_ns\":2,\"module\":\"encoder.layers.3\"}\n"
                       "{\"call_id\":2,\"api\":\"b\",\"start_ns\":1,\"cost_ns\":2,\"module\":null}\n";
    assert_int_equal(tw_read_buffer("m.jsonl", json, strlen(json), collect_module, modules, NULL, err, sizeof err), 0);
    assert_string_equal(modules, "[encoder.layers.3][]");
}

static int collect_has_module(void *ctx, const tw_row_t *r)
{
    char *out = ctx;
    snprintf(out + strlen(out), 64, "[%d:%.*s]", r->has_module, (int)r->module.len, r->module.ptr);
    return 0;
}

static void the_root_module_is_told_from_no_module(void **state)
{
    /* CSV: the root module is written "" and no module an empty field; JSON: "" and null; a file
     * older than the column: -1. */
    char modules[256] = "", err[512];
    const char *csv = HEADER_MODULE "1,a,1,2,2,0,7,8,1,3,0,,\"\"\n2,b,1,2,2,0,7,8,0,0,0,,\n3,c,1,2,2,0,7,8,0,0,0,,x\n";
    assert_int_equal(tw_read_buffer("m.csv", csv, strlen(csv), collect_has_module, modules, NULL, err, sizeof err), 0);
    assert_string_equal(modules, "[1:][0:][1:x]");
    modules[0] = '\0';
    const char *json = "{\"call_id\":1,\"api\":\"a\",\"start_ns\":1,\"cost_ns\":2,\"module\":\"\"}\n"
                       "{\"call_id\":2,\"api\":\"b\",\"start_ns\":1,\"cost_ns\":2,\"module\":null}\n"
                       "{\"call_id\":3,\"api\":\"c\",\"start_ns\":1,\"cost_ns\":2}\n";
    assert_int_equal(tw_read_buffer("m.jsonl", json, strlen(json), collect_has_module, modules, NULL, err, sizeof err),
                     0);
    assert_string_equal(modules, "[1:][0:][-1:]");
    modules[0] = '\0';
    const char *old = HEADER "1,a,1,2,2,0,7,8,1,3,0,\"\"\n";
    assert_int_equal(tw_read_buffer("o.csv", old, strlen(old), collect_has_module, modules, NULL, err, sizeof err), 0);
    assert_string_equal(modules, "[-1:]");
}

static char *write_temp(const char *text)
{
    static char path[64];
    strcpy(path, "/tmp/tw-test-reader-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void a_reader_pauses_every_n_rows_and_resumes_where_it_stopped(void **state)
{
    /* 3 MiB of rows (refills inside batches) and a torn last line, read 1000 rows at a time: the
     * same rows and counters as tw_read_file. */
    char path[] = "/tmp/tw-test-reader-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(HEADER, f);
    size_t rows = 0;
    for (long bytes = 0; bytes < 3 << 20; rows++)
        bytes += fprintf(f, "%zu,torch.add,%zu,%zu,1,0,7,8,0,0,0,\"f32[%zu]@cpu\"\n", rows + 1, rows, rows % 1000, rows);
    fputs("99,torch.a", f);
    fclose(f);
    collected_t c;
    memset(&c, 0, sizeof c);
    tw_read_stats_t st = {0};
    char err[512];
    tw_reader_t *reader;
    assert_int_equal(tw_reader_open(path, &st, &reader, err, sizeof err), 0);
    assert_int_equal(tw_reader_kind(reader), 0);
    size_t batches = 0;
    for (int more = 1; more; batches++) {
        size_t before = c.count;
        assert_int_equal(tw_reader_next(reader, collect, &c, 1000, &more, err, sizeof err), 0);
        assert_true(c.count - before == 1000 || !more);
        assert_int_equal(tw_reader_kind(reader), TW_FILE_CALLS);
    }
    assert_int_equal(c.count, rows);
    assert_int_equal(batches, rows / 1000 + 1);
    assert_ptr_equal(tw_reader_stats(reader), &st);
    tw_reader_close(reader);
    tw_read_stats_t whole = {0};
    collected_t all;
    memset(&all, 0, sizeof all);
    assert_int_equal(tw_read_file(path, collect, &all, &whole, err, sizeof err), 0);
    assert_memory_equal(&st, &whole, sizeof st);
    assert_int_equal(st.truncated, 1);
    assert_memory_equal(c.text, all.text, sizeof c.text);
    unlink(path);
    assert_int_equal(tw_reader_open(path, NULL, &reader, err, sizeof err), TW_EIO);
    assert_non_null(strstr(err, path));
    /* A file that is not ours fails on the first batch, and on every later call. */
    char *bad = write_temp("time,value\n1,2\n");
    assert_int_equal(tw_reader_open(bad, NULL, &reader, err, sizeof err), 0);
    int more;
    assert_int_equal(tw_reader_next(reader, collect, &c, 10, &more, err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "is not a TorchWrapper record file"));
    assert_int_equal(tw_reader_next(reader, collect, &c, 10, &more, err, sizeof err), TW_EINVAL);
    tw_reader_close(reader);
    unlink(bad);
}

/* Rows counted and their call ids summed: what a range reading must give whole. */
typedef struct tally {
    uint64_t rows, ids;
} tally_t;

static int tally(void *ctx, const tw_row_t *r)
{
    tally_t *t = ctx;
    t->rows++;
    t->ids += r->call_id;
    return 0;
}

/* Reads text as ranges of size bytes; 1 when every range began where the one before ended (then
 * *t and *st are the ranges' sums), 0 when one did not (a cut inside a quoted line end). */
static int read_ranges(const char *path, size_t len, size_t size, tally_t *t, tw_read_stats_t *st)
{
    char err[512];
    uint64_t last_end = 0;
    int chained = 1;
    memset(t, 0, sizeof *t);
    memset(st, 0, sizeof *st);
    for (size_t offset = 0; offset < len; offset += size) {
        tw_reader_t *reader;
        int more;
        uint64_t first, end;
        assert_int_equal(tw_reader_open_range(path, offset, size, st, &reader, err, sizeof err), 0);
        int rc = tw_reader_next(reader, tally, t, 0, &more, err, sizeof err);
        tw_reader_range(reader, &first, &end);
        tw_reader_close(reader);
        if (rc != 0 || first != last_end)
            chained = 0;
        last_end = end;
    }
    return chained && last_end == len;
}

static void ranges_of_a_file_read_each_record_once(void **state)
{
    /* Every range size from 1 byte on, over CSV (a quoted line end, CRLF, a malformed row, a torn
     * last line) and JSON lines: where the ranges chain, the rows and counters are the whole file's;
     * only a cut inside the quoted line end breaks the chain, and it is seen. */
    static const char *const texts[] = {
        HEADER "1,torch.add,100,20,20,0,7,8,0,0,0,\"f32[2,3]@cpu, 1\"\n"
               "2,torch.x,200,30,10,0,7,8,1,5,1,\"say \"\"hi\"\"\nthere\"\r\n"
               "3,torch.view,300,5,5,0,7,8,0,0,0,\n"
               "4,torch.bad,3\"00,5,5,0,7,8,0,0,0,\n"
               "5,torch.mm,400,5,5,0,7,8,0,0,0,\n"
               "6,torch.t",
        "{\"call_id\":1,\"api\":\"torch.add\",\"start_ns\":1,\"cost_ns\":2}\n"
        "{\"call_id\":2,\"api\":\"torch.mm\",\"start_ns\":1,\"cost_ns\":2}\n"
        "{\"call_id\":4,\"api\":\"torch.mm\",\"start_ns\":1,\"cost_ns\":2}\n"
        "{\"call_id\":8,\"api\":\"torch.m",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char *path = write_temp(texts[i]);
        size_t len = strlen(texts[i]);
        char err[512];
        tally_t whole = {0}, t;
        tw_read_stats_t whole_st = {0}, st;
        assert_int_equal(tw_read_file(path, tally, &whole, &whole_st, err, sizeof err), 0);
        assert_int_equal(whole_st.truncated, 1);
        size_t broken = 0;
        for (size_t size = 1; size <= len + 1; size++) {
            if (!read_ranges(path, len, size, &t, &st)) {
                broken++;
                continue;
            }
            assert_int_equal(t.rows, whole.rows);
            assert_int_equal(t.ids, whole.ids);
            assert_memory_equal(&st, &whole_st, sizeof st);
        }
        /* CSV: the sizes with a cut in the quoted record before its line end; JSON: none. */
        if (i == 0)
            assert_true(broken > 0 && broken < len);
        else
            assert_int_equal(broken, 0);
        unlink(path);
    }
}

static void the_watch_streams_have_kinds_of_their_own(void **state)
{
    static const struct {
        const char *text;
        tw_file_kind_t kind;
    } cases[] = {
        {"call_id,step,module,class,tensor,index,name\n1,1,,M,input,0,\n", TW_FILE_STATS},
        {"{\"call_id\": 1, \"step\": 1, \"module\": \"\", \"tensor\": \"input\", \"shape\": [2, 3]}\n", TW_FILE_STATS},
        {"call_id,api,outer_call_id,parameter,tensor,version,attribute,site\n", TW_FILE_UPDATES},
        {"{\"call_id\": 4, \"api\": \"torch.add_\", \"parameter\": \"w\", \"version\": 2", TW_FILE_UPDATES},
        {HEADER, TW_FILE_CALLS},
        {"", 0},
    };
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = write_temp(cases[i].text);
        tw_file_kind_t kind = 99;
        assert_int_equal(tw_read_any_kind(path, &kind, err, sizeof err), 0);
        assert_int_equal(kind, cases[i].kind);
        /* tw_read_kind (tw-report's) still refuses the streams (a torn line: empty, as ever) */
        int whole = cases[i].text[0] != '\0' && cases[i].text[strlen(cases[i].text) - 1] == '\n';
        int rc = tw_read_kind(path, &kind, err, sizeof err);
        assert_int_equal(rc, cases[i].kind >= TW_FILE_STATS && whole ? TW_EINVAL : 0);
        unlink(path);
    }
    char *path = write_temp("{\"time\": 1, \"tensor\": 2}\n");
    tw_file_kind_t kind;
    assert_int_equal(tw_read_any_kind(path, &kind, err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, path));
    unlink(path);
}

/* ---- gzip files ---------------------------------------------------------------------------------- */

/* data as gzip into a new temporary file: split into members (1 or more), a sync point every
 * sync_every input bytes (0: none), the last member finished unless open (a killed writer's), then
 * cut bytes cut off its end. Returns the path (static: one at a time) and the bytes written. */
static char *write_gzip(const char *data, size_t len, int members, size_t sync_every, int open, size_t cut,
                        size_t *written)
{
    static char path[64];
    strcpy(path, "/tmp/tw-test-reader-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t cap = len + len / 8 + 4096 * (size_t)members, used = 0;
    unsigned char *out = malloc(cap);
    size_t per = len / (size_t)members + 1;
    for (int m = 0; m < members; m++) {
        size_t from = (size_t)m * per, to = from + per < len ? from + per : len;
        z_stream z;
        memset(&z, 0, sizeof z);
        assert_int_equal(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
        for (size_t at = from; at < to || at == from;) {
            size_t step = sync_every && to - at > sync_every ? sync_every : to - at;
            int last = at + step >= to;
            z.next_in = (unsigned char *)data + at;
            z.avail_in = (uInt)step;
            z.next_out = out + used;
            z.avail_out = (uInt)(cap - used);
            int flush = last && !(open && m == members - 1) ? Z_FINISH : Z_SYNC_FLUSH;
            int rc = deflate(&z, flush);
            assert_true(rc == (flush == Z_FINISH ? Z_STREAM_END : Z_OK));
            used = cap - z.avail_out;
            at += step;
            if (last)
                break;
        }
        deflateEnd(&z);
    }
    assert_true(cut <= used);
    used -= cut;
    assert_int_equal(write(fd, out, used), (ssize_t)used);
    close(fd);
    free(out);
    *written = used;
    return path;
}

/* 3 MiB of rows: a plain file's header, rows and a torn last line. *len receives its length. */
static char *many_rows(size_t *len, size_t *rows)
{
    size_t cap = 4 << 20, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text, cap, "%s", HEADER);
    for (*rows = 0; n < 3 << 20; ++*rows)
        n += (size_t)snprintf(text + n, cap - n, "%zu,torch.add,%zu,%zu,1,0,7,8,0,0,0,\"f32[%zu]@cpu, %s\"\n",
                              *rows + 1, *rows, *rows % 1000, *rows, *rows % 7 ? "x" : "a \"\"quoted\"\" arg");
    n += (size_t)snprintf(text + n, cap - n, "99,torch.a");
    *len = n;
    return text;
}

static void gzip_files_read_as_what_they_inflate_to_member_after_member(void **state)
{
    size_t len, rows, written;
    char *text = many_rows(&len, &rows);
    char err[512];
    char *plain = write_temp(text);
    collected_t want, got;
    tw_read_stats_t want_st = {0}, st;
    memset(&want, 0, sizeof want);
    assert_int_equal(tw_read_file(plain, collect, &want, &want_st, err, sizeof err), 0);
    assert_int_equal(want.count, rows);
    assert_int_equal(want_st.truncated, 1);
    unlink(plain);
    for (int members = 1; members <= 3; members++) {
        char *path = write_gzip(text, len, members, members == 1 ? 0 : 100000, 0, 0, &written);
        assert_true(written < len / 3);
        memset(&got, 0, sizeof got);
        memset(&st, 0, sizeof st);
        assert_int_equal(tw_read_file(path, collect, &got, &st, err, sizeof err), 0);
        assert_memory_equal(&st, &want_st, sizeof st); /* bytes: what they inflate to */
        assert_memory_equal(got.text, want.text, sizeof got.text);
        assert_int_equal(got.count, want.count);
        tw_file_kind_t kind;
        assert_int_equal(tw_read_kind(path, &kind, err, sizeof err), 0);
        assert_int_equal(kind, TW_FILE_CALLS);
        /* a compressed file is read whole, never by byte ranges */
        tw_reader_t *reader;
        assert_int_equal(tw_reader_open_range(path, 1000, 1000, NULL, &reader, err, sizeof err), TW_EINVAL);
        assert_non_null(strstr(err, "compressed"));
        unlink(path);
    }
    free(text);
}

/* A member cut short, as a killed writer leaves its last file (sync points at its flushes): read up to
 * where its data ends, wherever the cut; whole lines only, a line cut in two a torn last record. */
static void a_gzip_file_cut_short_reads_to_where_its_data_ends(void **state)
{
    size_t len, rows, written;
    char *text = many_rows(&len, &rows);
    char err[512];
    size_t full;
    char *whole = write_gzip(text, len, 1, 65536, 1, 0, &full);
    unsigned char *bytes = malloc(full);
    FILE *f = fopen(whole, "rb");
    assert_int_equal(fread(bytes, 1, full, f), full);
    fclose(f);
    unlink(whole);
    uint64_t last_rows = 0;
    /* (one byte is not gzip's magic yet: from two on) */
    for (size_t keep = full; keep > 1; keep = keep > 4096 ? keep - keep / 5 - 1 : keep > 64 ? keep - 37 : keep - 1) {
        char path[] = "/tmp/tw-test-reader-XXXXXX";
        int fd = mkstemp(path);
        assert_int_equal(write(fd, bytes, keep), (ssize_t)keep);
        close(fd);
        tw_read_stats_t st = {0};
        collected_t got;
        memset(&got, 0, sizeof got);
        int rc = tw_read_file(path, collect, &got, &st, err, sizeof err);
        if (rc != 0)
            fprintf(stderr, "keeping %zu of %zu bytes: %s\n", keep, full, err);
        assert_int_equal(rc, 0);
        assert_true(st.truncated <= 1);
        assert_int_equal(st.malformed, 0);
        assert_true(st.rows <= rows);
        assert_true(last_rows == 0 || st.rows <= last_rows); /* less of the file, fewer rows */
        last_rows = st.rows ? st.rows : 1;
        unlink(path);
    }
    free(bytes);
    /* at a sync point: every row before it, nothing torn */
    char *path = write_gzip(text, 65536 * 3, 1, 65536, 1, 0, &written);
    tw_read_stats_t st = {0};
    collected_t got;
    memset(&got, 0, sizeof got);
    assert_int_equal(tw_read_file(path, collect, &got, &st, err, sizeof err), 0);
    size_t lines = 0;
    for (size_t i = 0; i < 65536 * 3; i++)
        lines += text[i] == '\n';
    assert_int_equal(st.rows, lines - 1); /* the header is no row */
    assert_int_equal(st.truncated, text[65536 * 3 - 1] != '\n'); /* what follows the last line end */
    unlink(path);
    free(text);
}

static void corrupt_gzip_data_is_an_error_that_names_the_file(void **state)
{
    size_t len, rows, written;
    char *text = many_rows(&len, &rows);
    char *path = write_gzip(text, len, 1, 0, 0, 0, &written);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, (long)written / 2, SEEK_SET);
    for (int i = 0; i < 64; i++)
        fputc(0x55 ^ i, f);
    fclose(f);
    collected_t got;
    memset(&got, 0, sizeof got);
    tw_read_stats_t st = {0};
    char err[512];
    assert_int_equal(tw_read_file(path, collect, &got, &st, err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "gzip data is corrupt"));
    unlink(path);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(csv_rows_with_quotes_commas_and_newlines_read_back_whole),
        cmocka_unit_test(json_lines_with_escapes_and_unicode_read_back_whole),
        cmocka_unit_test(columns_of_a_newer_version_are_ignored_in_any_order),
        cmocka_unit_test(a_torn_last_line_is_skipped_and_counted),
        cmocka_unit_test(corrupt_rows_cost_only_themselves),
        cmocka_unit_test(a_file_that_is_not_ours_is_named_in_the_error),
        cmocka_unit_test(gpu_records_are_read_with_their_duration),
        cmocka_unit_test(csv_split_reports_incomplete_and_malformed_records),
        cmocka_unit_test(files_are_read_across_buffer_refills),
        cmocka_unit_test(module_paths_are_read_and_null_is_no_path),
        cmocka_unit_test(the_root_module_is_told_from_no_module),
        cmocka_unit_test(a_reader_pauses_every_n_rows_and_resumes_where_it_stopped),
        cmocka_unit_test(the_watch_streams_have_kinds_of_their_own),
        cmocka_unit_test(ranges_of_a_file_read_each_record_once),
        cmocka_unit_test(gzip_files_read_as_what_they_inflate_to_member_after_member),
        cmocka_unit_test(a_gzip_file_cut_short_reads_to_where_its_data_ends),
        cmocka_unit_test(corrupt_gzip_data_is_an_error_that_names_the_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
