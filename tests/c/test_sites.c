/* SPDX-License-Identifier: MIT */
/* The call-site table (sites.h): interning, the cap and its overflow, the JSON file. */
#include "tw_test.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <sys/wait.h>

static void the_same_site_gets_the_same_id(void **state)
{
    tw_sites_t *s;
    assert_int_equal(tw_sites_create(0, &s), 0);
    uint32_t a = tw_sites_intern(s, "/w/train.py", 42, "train_step", "train.py:42 train_step");
    uint32_t b = tw_sites_intern(s, "/w/train.py", 43, "train_step", NULL);
    uint32_t c = tw_sites_intern(s, "/w/other.py", 42, "train_step", NULL);
    uint32_t d = tw_sites_intern(s, "/w/train.py", 42, "evaluate", NULL);
    assert_int_equal(a, 1);
    assert_int_equal(b, 2);
    assert_int_equal(c, 3);
    assert_int_equal(d, 4);
    assert_int_equal(tw_sites_intern(s, "/w/train.py", 42, "train_step", "ignored"), a);
    assert_int_equal(tw_sites_intern(s, "/w/train.py", 43, "train_step", NULL), b);
    char file[TW_SITE_TEXT_MAX + 1], function[TW_SITE_TEXT_MAX + 1], text[TW_SITE_TEXT_MAX + 1];
    uint32_t line = 0;
    assert_true(tw_sites_get(s, a, file, &line, function, text));
    assert_string_equal(file, "/w/train.py");
    assert_int_equal(line, 42);
    assert_string_equal(function, "train_step");
    assert_string_equal(text, "train.py:42 train_step");
    assert_true(tw_sites_get(s, b, NULL, NULL, NULL, text));
    assert_string_equal(text, "/w/train.py:43 train_step"); /* the default short form */
    assert_false(tw_sites_get(s, TW_SITE_NONE, file, &line, function, text));
    assert_false(tw_sites_get(s, 5, file, &line, function, text));
    tw_sites_stats_t st;
    tw_sites_stats(s, &st);
    assert_int_equal(st.count, 4);
    assert_int_equal(st.cap, TW_SITES_CAP_DEFAULT);
    assert_int_equal(st.overflow, 0);
    tw_sites_destroy(s);
}

static void sites_past_the_cap_share_the_overflow_id(void **state)
{
    tw_sites_t *s;
    assert_int_equal(tw_sites_create(100, &s), 0);
    assert_int_equal(tw_sites_overflow_id(s), 101);
    for (uint32_t line = 1; line <= 1000; line++) {
        uint32_t id = tw_sites_intern(s, "gen.py", line, "f", NULL);
        assert_int_equal(id, line <= 100 ? line : 101);
    }
    assert_int_equal(tw_sites_intern(s, "gen.py", 50, "f", NULL), 50); /* known sites keep their id */
    tw_sites_note_overflow(s, 900);
    tw_sites_stats_t st;
    tw_sites_stats(s, &st);
    assert_int_equal(st.count, 100);
    assert_int_equal(st.overflow, 900);
    char text[TW_SITE_TEXT_MAX + 1];
    assert_false(tw_sites_get(s, 101, NULL, NULL, NULL, text)); /* the overflow id names no site */
    tw_sites_destroy(s);
}

static void bad_arguments_are_refused(void **state)
{
    tw_sites_t *s = NULL;
    assert_int_equal(tw_sites_create(UINT32_MAX, &s), TW_EINVAL);
    assert_int_equal(tw_sites_create(0, NULL), TW_EINVAL);
    assert_int_equal(tw_sites_create(0, &s), 0);
    assert_int_equal(tw_sites_intern(s, NULL, 1, "f", NULL), TW_SITE_NONE);
    assert_int_equal(tw_sites_intern(s, "a.py", 1, NULL, NULL), TW_SITE_NONE);
    assert_int_equal(tw_sites_intern(NULL, "a.py", 1, "f", NULL), TW_SITE_NONE);
    tw_sites_destroy(s);
    tw_sites_destroy(NULL);
}

static void long_names_are_cut_at_a_character_boundary(void **state)
{
    tw_sites_t *s;
    assert_int_equal(tw_sites_create(0, &s), 0);
    char file[3000];
    memset(file, 'a', sizeof file);
    memcpy(file + TW_SITE_TEXT_MAX - 1, "\xc3\xa9", 2); /* é across the cut */
    file[sizeof file - 1] = '\0';
    uint32_t id = tw_sites_intern(s, file, 7, "f", NULL);
    assert_int_equal(tw_sites_intern(s, file, 7, "f", NULL), id);
    char out[TW_SITE_TEXT_MAX + 1];
    assert_true(tw_sites_get(s, id, out, NULL, NULL, NULL));
    assert_int_equal(strlen(out), TW_SITE_TEXT_MAX - 1);
    tw_sites_destroy(s);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int collect_site(void *ctx, uint32_t id, const char *file, uint32_t line, const char *function,
                        const char *text)
{
    char *out = ctx;
    snprintf(out + strlen(out), 128, "[%u %s %u %s %s]", id, file, line, function, text);
    return 0;
}

static void the_sites_file_is_json_with_escaped_names(void **state)
{
    char dir[] = "/tmp/tw-test-sites-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/sites.json", dir);
    tw_sites_t *s;
    assert_int_equal(tw_sites_create(2, &s), 0);
    tw_sites_intern(s, "/w/train \"v2\".py", 42, "Trainer.step", "train \"v2\".py:42 Trainer.step");
    tw_sites_intern(s, "<string>", 3, "<lambda>", NULL);
    tw_sites_intern(s, "x.py", 1, "f", NULL); /* past the cap */
    tw_sites_note_overflow(s, 3);
    assert_int_equal(tw_sites_write_json(s, path, 4242), 0);
    cJSON *root = cJSON_Parse(read_all(path));
    assert_non_null(root);
    assert_int_equal(cJSON_GetObjectItem(root, "pid")->valueint, 4242);
    assert_int_equal(cJSON_GetObjectItem(root, "count")->valueint, 2);
    assert_int_equal(cJSON_GetObjectItem(root, "cap")->valueint, 2);
    assert_int_equal(cJSON_GetObjectItem(root, "overflow")->valueint, 3);
    assert_int_equal(cJSON_GetObjectItem(root, "overflow_id")->valueint, 3);
    cJSON *sites = cJSON_GetObjectItem(root, "sites");
    assert_int_equal(cJSON_GetArraySize(sites), 2);
    cJSON *one = cJSON_GetObjectItem(sites, "1");
    assert_string_equal(cJSON_GetObjectItem(one, "file")->valuestring, "/w/train \"v2\".py");
    assert_int_equal(cJSON_GetObjectItem(one, "line")->valueint, 42);
    assert_string_equal(cJSON_GetObjectItem(one, "function")->valuestring, "Trainer.step");
    assert_string_equal(cJSON_GetObjectItem(one, "text")->valuestring, "train \"v2\".py:42 Trainer.step");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(sites, "2"), "text")->valuestring,
                        "<string>:3 <lambda>");
    cJSON_Delete(root);
    /* read back by the readers' parser: the same sites, in id order */
    char got[512] = "", err[512];
    int64_t pid;
    assert_int_equal(tw_sites_read_json(path, collect_site, got, &pid, err, sizeof err), 0);
    assert_int_equal(pid, 4242);
    assert_string_equal(got, "[1 /w/train \"v2\".py 42 Trainer.step train \"v2\".py:42 Trainer.step]"
                             "[2 <string> 3 <lambda> <string>:3 <lambda>]");
    FILE *f = fopen(path, "w");
    fputs("{\"sites\": {\"1\": {\"file\": 3}}}", f);
    fclose(f);
    assert_int_equal(tw_sites_read_json(path, collect_site, got, &pid, err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, path));
    unlink(path);
    assert_int_equal(tw_sites_read_json(path, collect_site, got, &pid, err, sizeof err), TW_EIO);
    tw_sites_destroy(s);
    rm_rf(dir);
}

static void a_forked_child_interns_into_its_own_copy(void **state)
{
    /* The fork handlers take and give back the table's lock: the child's copy works, apart. */
    tw_sites_t *s;
    assert_int_equal(tw_sites_create(0, &s), 0);
    tw_sites_intern(s, "a.py", 1, "f", NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(tw_sites_intern(s, "b.py", 2, "g", NULL) == 2 ? 0 : 1);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(tw_sites_intern(s, "c.py", 3, "h", NULL), 2);
    tw_sites_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_same_site_gets_the_same_id),
        cmocka_unit_test(sites_past_the_cap_share_the_overflow_id),
        cmocka_unit_test(bad_arguments_are_refused),
        cmocka_unit_test(long_names_are_cut_at_a_character_boundary),
        cmocka_unit_test(the_sites_file_is_json_with_escaped_names),
        cmocka_unit_test(a_forked_child_interns_into_its_own_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
