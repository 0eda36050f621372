/* SPDX-License-Identifier: MIT */
#include "tw_test.h"
#include <stdlib.h>
#include <string.h>

static void sizes_with_units_parse_to_bytes(void **state)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {
        {"1048576", 1048576},  {"10MB", 10000000},      {"128MB", 128000000},       {"1.5GB", 1500000000},
        {"512KiB", 524288},    {"2GiB", 2147483648ull}, {"10mb", 10000000},         {"4 KB", 4000},
        {" 64kib ", 65536},    {"1B", 1},               {"0.5KiB", 512},            {"1TB", 1000000000000ull},
        {"1TiB", 1099511627776ull}, {"9223372036854775808", 9223372036854775808ull}, {".5MB", 500000},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t bytes = 0;
        assert_int_equal(tw_parse_size(good[i].text, &bytes), 0);
        assert_int_equal(bytes, good[i].bytes);
    }
}

static void bad_sizes_are_refused(void **state)
{
    static const char *invalid[] = {"", "MB", "ten", "10XB", "10 M B", "-5", "+5", "1e6", "inf", "nan", "10MBs", ".",
                                    "1.2.3MB", "0x10"};
    static const char *out_of_range[] = {"0", "0MB", "0.1B", "99999999999999999999", "9223372036854775809",
                                         "10000000TB"};
    uint64_t bytes = 42;
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++)
        assert_int_equal(tw_parse_size(invalid[i], &bytes), TW_EINVAL);
    for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; i++)
        assert_int_equal(tw_parse_size(out_of_range[i], &bytes), TW_ERANGE);
    assert_int_equal(tw_parse_size(NULL, &bytes), TW_EINVAL);
    assert_int_equal(bytes, 42);
}

static const tw_name_fields_t fields = {1795363668205914587LL, 4242, 4243, 3, 7, "node-1.example"};

static void name_specs_expand(void **state)
{
    char out[256];
    assert_true(tw_name_expand("timestamp", &fields, ".csv", out, sizeof out) > 0);
    assert_string_equal(out, "tw-20261122-160748.205914587-rank3-4242-0007.csv");
    assert_true(tw_name_expand("serial", &fields, ".jsonl", out, sizeof out) > 0);
    assert_string_equal(out, "tw-rank3-4242-0007.jsonl");
    assert_true(tw_name_expand("run_{rank}_{host}_{tid}_{index}", &fields, ".csv", out, sizeof out) > 0);
    assert_string_equal(out, "run_3_node-1.example_4243_0007.csv");
    assert_true(tw_name_expand("a{{b}}{index}.csv", &fields, ".csv", out, sizeof out) > 0);
    assert_string_equal(out, "a{b}0007.csv");
    tw_name_fields_t norank = fields;
    norank.rank = -1;
    norank.host = "evil/../host";
    assert_true(tw_name_expand("{rank}-{host}-{index}", &norank, ".csv", out, sizeof out) > 0);
    assert_string_equal(out, "norank-evil__._host-0007.csv");
    assert_true(tw_name_expand("timestamp", &norank, ".csv", out, sizeof out) > 0);
    assert_string_equal(out, "tw-20261122-160748.205914587-4242-0007.csv"); /* no rank: none in the name */
    assert_true(tw_name_expand("serial", &norank, ".jsonl", out, sizeof out) > 0);
    assert_string_equal(out, "tw-4242-0007.jsonl");
    assert_null(strchr(out, '/'));
    char small[8];
    assert_int_equal(tw_name_expand("timestamp", &fields, ".csv", small, sizeof small), TW_ERANGE);
}

static void bad_name_specs_say_why(void **state)
{
    char err[512];
    assert_int_equal(tw_name_spec_check("run_{epoch}", err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "unknown field {epoch}"));
    assert_int_equal(tw_name_spec_check("../escape_{index}", err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "would leave out_dir"));
    assert_int_equal(tw_name_spec_check("sub/dir", err, sizeof err), TW_EINVAL);
    assert_int_equal(tw_name_spec_check("..", err, sizeof err), TW_EINVAL);
    assert_int_equal(tw_name_spec_check("x{index", err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "unmatched '{'"));
    assert_int_equal(tw_name_spec_check("x}", err, sizeof err), TW_EINVAL);
    assert_int_equal(tw_name_spec_check("", err, sizeof err), TW_EINVAL);
    assert_non_null(strstr(err, "accepted"));
    assert_int_equal(tw_name_spec_check("timestamp", err, sizeof err), 0);
    assert_int_equal(tw_name_spec_check("serial", err, sizeof err), 0);
    assert_int_equal(tw_name_spec_check("{pid}-{index}", err, sizeof err), 0);
}

static void percentiles_are_within_one_percent(void **state)
{
    tw_stats_t stats;
    tw_stats_init(&stats);
    /* 1..100000 ns once each: p50 = 50000, p95 = 95000, p99 = 99000 (nearest rank). */
    for (uint64_t v = 1; v <= 100000; v++)
        tw_stats_add(&stats, 3, v, v / 2, 0, v % 1000 == 0);
    const tw_api_stats_t *a = &stats.apis[3];
    assert_int_equal(a->calls, 100000);
    assert_int_equal(a->errors, 100);
    assert_int_equal(a->total_ns, 100000ull * 100001 / 2);
    assert_int_equal(a->min_ns, 1);
    assert_int_equal(a->max_ns, 100000);
    const double qs[] = {0.5, 0.95, 0.99};
    for (int i = 0; i < 3; i++) {
        double expect = qs[i] * 100000, got = (double)tw_stats_percentile(a, qs[i]);
        assert_true(got >= expect * 0.99 && got <= expect * 1.01);
    }
    assert_int_equal(tw_stats_percentile(a, 0), 1);
    assert_int_equal(tw_stats_percentile(a, 1), 100000);
    /* small values are exact */
    tw_stats_add(&stats, 5, 42, 42, 0, 0);
    assert_int_equal(tw_stats_percentile(&stats.apis[5], 0.5), 42);
    assert_int_equal(tw_stats_percentile(&stats.apis[4], 0.5), 0); /* never called */
    /* huge values land in the last bucket, clamped to max */
    tw_stats_add(&stats, 6, UINT64_MAX / 2, 0, 0, 0);
    assert_int_equal(tw_stats_percentile(&stats.apis[6], 0.5), UINT64_MAX / 2);
    /* two ranges far apart (the reading scans from min's bucket to max's), added in either order:
     * 10 calls of 10..19 ns and 30 of about 1 ms */
    for (uint32_t api = 7; api <= 8; api++) {
        for (int part = 0; part < 2; part++) {
            if ((part == 0) == (api == 7))
                for (uint64_t v = 10; v < 20; v++)
                    tw_stats_add(&stats, api, v, v, 0, 0);
            else
                for (uint64_t v = 0; v < 30; v++)
                    tw_stats_add(&stats, api, 1000000 + v * 1000, 0, 0, 0);
        }
        const tw_api_stats_t *both = &stats.apis[api];
        assert_int_equal(tw_stats_percentile(both, 0.2), 17); /* rank 8 of 40: exact below 128 */
        uint64_t p50 = tw_stats_percentile(both, 0.5);      /* rank 20: the 10th slow call, 1.009 ms */
        assert_true(p50 >= 1009000 * 0.99 && p50 <= 1009000 * 1.01);
        assert_int_equal(tw_stats_percentile(both, 0), 10);
        assert_int_equal(tw_stats_percentile(both, 1), 1029000);
    }
    tw_stats_free(&stats);
}

static void expect_config_error(const char *json, int from_strings, const char *needle)
{
    char *out = NULL, err[512] = "";
    assert_int_equal(tw_config_normalize(json, from_strings, &out, err, sizeof err), TW_EINVAL);
    assert_null(out);
    if (strstr(err, needle) == NULL)
        fail_msg("error '%s' lacks '%s'", err, needle);
}

static void flops_and_peak_flops_are_validated_and_typed(void **state)
{
    (void)state;
    expect_config_error("{\"peak_flops\": -1}", 0, "config key 'peak_flops': -1 is not accepted: give the device's "
                                                  "peak in FLOP/s, a number more than 0");
    expect_config_error("{\"peak_flops\": 0}", 0, "config key 'peak_flops': 0 is not accepted");
    expect_config_error("{\"peak_flops\": \"fast\"}", 0, "config key 'peak_flops': \"fast\" is not accepted");
    expect_config_error("{\"peak_flops\": \"1e400\"}", 1, "config key 'peak_flops': \"1e400\" is not accepted");
    expect_config_error("{\"flops\": \"yes\"}", 0, "config key 'flops': \"yes\" is not accepted: give true or false");
    expect_config_error("{\"flops\": 1}", 0, "config key 'flops': 1 is not accepted: give true or false");
    expect_config_error("{\"flops\": \"maybe\"}", 1, "config key 'flops': \"maybe\" is not accepted");
    tw_config_t c;
    char err[512] = "";
    assert_int_equal(tw_config_load(TW_CONFIG_DEFAULTS_PROFILE, "{}", 0, &c, NULL, err, sizeof err), 0);
    assert_int_equal(c.flops, 1); /* on by default */
    assert_true(c.peak_flops == 0);
    tw_config_free(&c);
    /* from environment variables: switches and numbers as text */
    assert_int_equal(tw_config_load(TW_CONFIG_DEFAULTS_PROFILE, "{\"flops\": \"off\", \"peak_flops\": \"989e12\"}", 1,
                                    &c, NULL, err, sizeof err), 0);
    assert_int_equal(c.flops, 0);
    assert_true(c.peak_flops == 989e12);
    tw_config_free(&c);
}

static void memory_is_off_by_default_and_takes_booleans_only(void **state)
{
    (void)state;
    expect_config_error("{\"memory\": \"yes\"}", 0, "config key 'memory': \"yes\" is not accepted: give true or false");
    expect_config_error("{\"memory\": 1}", 0, "config key 'memory': 1 is not accepted: give true or false");
    expect_config_error("{\"memory\": null}", 0, "config key 'memory': null is not accepted: give true or false");
    expect_config_error("{\"memory\": \"sometimes\"}", 1, "config key 'memory': \"sometimes\" is not accepted");
    tw_config_t c;
    char err[512] = "";
    for (int d = 0; d < TW_CONFIG_DEFAULTS_COUNT; d++) {
        assert_int_equal(tw_config_load((tw_config_defaults_t)d, "{}", 0, &c, NULL, err, sizeof err), 0);
        assert_int_equal(c.memory, 0); /* off for every entry point */
        tw_config_free(&c);
    }
    assert_int_equal(tw_config_load(TW_CONFIG_DEFAULTS_PROFILE, "{\"memory\": true}", 0, &c, NULL, err, sizeof err), 0);
    assert_int_equal(c.memory, 1);
    tw_config_free(&c);
    /* from environment variables: switches as text */
    assert_int_equal(tw_config_load(TW_CONFIG_DEFAULTS_PROFILE, "{\"memory\": \"on\"}", 1, &c, NULL, err, sizeof err), 0);
    assert_int_equal(c.memory, 1);
    tw_config_free(&c);
}

static void compress_is_none_by_default_and_gzip_for_the_writer(void **state)
{
    (void)state;
    expect_config_error("{\"compress\": \"zip\"}", 0, "config key 'compress': \"zip\" is not accepted");
    expect_config_error("{\"compress\": true}", 0, "config key 'compress': true is not accepted");
    tw_config_t c;
    tw_writer_config_t w;
    char err[512] = "";
    for (int d = 0; d < TW_CONFIG_DEFAULTS_COUNT; d++) {
        assert_int_equal(tw_config_load((tw_config_defaults_t)d, "{}", 0, &c, NULL, err, sizeof err), 0);
        assert_int_equal(c.compress, TW_COMPRESS_NONE); /* plain files for every entry point */
        tw_config_free(&c);
    }
    assert_int_equal(tw_config_load(TW_CONFIG_DEFAULTS_PROFILE, "{\"compress\": \"gzip\"}", 1, &c, NULL, err,
                                    sizeof err), 0);
    assert_int_equal(c.compress, TW_COMPRESS_GZIP);
    memset(&w, 0, sizeof w);
    tw_config_writer(&c, &w);
    assert_int_equal(w.compress, TW_COMPRESS_GZIP); /* the writer takes it */
    tw_config_free(&c);
    assert_string_equal(tw_config_default("compress", TW_CONFIG_DEFAULTS_TORCHWRAPPER), "\"none\"");
}

static void tensor_stats_and_track_are_validated_and_completed(void **state)
{
    char *out = NULL, err[512] = "";
    assert_int_equal(tw_config_normalize("{\"tensor_stats\": {\"every\": 4}, \"track\": [\"parameters\"]}", 0, &out,
                                         err, sizeof err), 0);
    assert_non_null(strstr(out, "\"tensor_stats\":{\"tensors\":[\"input\",\"output\"],\"metrics\":[\"shape\",\"dtype\","
                                "\"mean\",\"std\",\"min\",\"max\",\"zeros\",\"nan\",\"inf\"],\"modules\":[\"*\"],\"every\":4,"
                                "\"sample\":null}"));
    assert_non_null(strstr(out, "\"track\":[\"parameters\"]"));
    free(out);
    assert_int_equal(tw_config_normalize("{}", 0, &out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"tensor_stats\":null,\"track\":[]"));
    free(out);
    /* from environment variables: words and JSON text */
    assert_int_equal(tw_config_normalize("{\"tensor_stats\": \"on\", \"track\": \"parameters, grads\"}", 1, &out,
                                         err, sizeof err), 0);
    assert_non_null(strstr(out, "\"every\":1"));
    assert_non_null(strstr(out, "\"track\":[\"parameters\",\"grads\"]"));
    free(out);
    assert_int_equal(tw_config_normalize("{\"tensor_stats\": \"{\\\"sample\\\": 0.25}\"}", 1, &out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"sample\":0.25"));
    free(out);
    expect_config_error("{\"tensor_stats\": {\"tensors\": [\"outputs\"]}}", 0,
                        "'outputs' is not one of: input output weight grad");
    expect_config_error("{\"tensor_stats\": {\"tensors\": [\"input\", \"input\"]}}", 0, "each at most once");
    expect_config_error("{\"tensor_stats\": {\"evry\": 2}}", 0, "did you mean 'every'?");
    expect_config_error("{\"tensor_stats\": {\"every\": 0}}", 0, "1 or more");
    expect_config_error("{\"tensor_stats\": {\"every\": 2, \"sample\": 0.5}}", 0, "not both");
    expect_config_error("{\"tensor_stats\": {\"sample\": 1.5}}", 0, "at most 1");
    /* its own output is accepted again (null stands for "not given") */
    assert_int_equal(tw_config_normalize("{\"tensor_stats\": {\"every\": 2, \"sample\": null}}", 0, &out, err,
                                         sizeof err), 0);
    free(out);
    expect_config_error("{\"tensor_stats\": {\"modules\": []}}", 0, "non-empty list of globs");
    expect_config_error("{\"tensor_stats\": 7}", 0, "give true");
    expect_config_error("{\"tensor_stats\": \"maybe\"}", 1, "give true, false, or a JSON object");
    expect_config_error("{\"track\": [\"weights\"]}", 0, "'weights' is not one of: parameters grads");
}

static void schedules_are_validated_and_completed(void **state)
{
    char *out = NULL, err[512] = "";
    assert_int_equal(tw_config_normalize("{\"schedule\": {\"wait\": 5, \"warmup\": 2, \"active\": 3, \"repeat\": 2}}",
                                         0, &out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"schedule\":{\"skip_first\":0,\"wait\":5,\"warmup\":2,\"active\":3,\"repeat\":2,"
                                "\"summary\":\"all\"},\"records\":\"all\""));
    /* the normalized value reads back as a schedule, and again through the validator */
    const char *value = strstr(out, "{\"skip_first\"");
    char text[256];
    snprintf(text, sizeof text, "%.*s", (int)(strchr(value, '}') - value + 1), value);
    tw_schedule_t schedule;
    assert_int_equal(tw_schedule_from_json(text, &schedule), 0);
    assert_true(schedule.enabled);
    assert_int_equal(schedule.wait, 5);
    assert_int_equal(schedule.active, 3);
    assert_false(schedule.summary_active);
    char *again = NULL;
    assert_int_equal(tw_config_normalize(out, 0, &again, err, sizeof err), 0);
    assert_string_equal(out, again);
    free(again);
    free(out);
    assert_int_equal(tw_config_normalize("{}", 0, &out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"schedule\":null,\"records\":\"all\""));
    free(out);
    /* from environment variables (and `run --set`): JSON text, and numbers as text inside */
    assert_int_equal(tw_config_normalize("{\"schedule\": \"{\\\"active\\\": 4, \\\"summary\\\": \\\"active\\\"}\", "
                                         "\"records\": \"summary\"}", 1, &out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"active\":4,\"repeat\":0,\"summary\":\"active\"}"));
    assert_non_null(strstr(out, "\"records\":\"summary\""));
    free(out);
    assert_int_equal(tw_config_normalize("{\"schedule\": {\"active\": \"5\"}}", 1, &out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"active\":5"));
    free(out);
    expect_config_error("{\"schedule\": {\"wait\": 5}}", 0,
                        "config key 'schedule', key 'active': nothing is not accepted: give a whole number of steps, 1 or more");
    expect_config_error("{\"schedule\": {\"active\": 0}}", 0, "key 'active': 0 is not accepted");
    expect_config_error("{\"schedule\": {\"active\": 2, \"wait\": -1}}", 0, "key 'wait': -1 is not accepted");
    expect_config_error("{\"schedule\": {\"active\": 2.5}}", 0, "key 'active': 2.5 is not accepted");
    expect_config_error("{\"schedule\": {\"active\": \"5\"}}", 0, "key 'active': \"5\" is not accepted");
    expect_config_error("{\"schedule\": {\"active\": 1, \"wiat\": 2}}", 0,
                        "config key 'schedule': unknown key 'wiat' (accepted: skip_first, wait, warmup, active, repeat, "
                        "summary)");
    expect_config_error("{\"schedule\": {\"active\": 1, \"summary\": \"some\"}}", 0,
                        "key 'summary': \"some\" is not accepted: give \"all\"");
    expect_config_error("{\"schedule\": 5}", 0, "config key 'schedule': 5 is not accepted: give null");
    expect_config_error("{\"schedule\": \"often\"}", 1, "config key 'schedule': \"often\" is not accepted");
    expect_config_error("{\"records\": \"none\"}", 0, "config key 'records': \"none\" is not accepted: give one of: "
                                                         "all summary");
}

static void schedule_states_follow_torch_profiler_schedule(void **state)
{
    /* torch.profiler.schedule(skip_first=1, wait=2, warmup=1, active=2, repeat=2) */
    tw_schedule_t s = {1, 1, 2, 1, 2, 2, 0};
    static const tw_step_state_t expected[] = {
        TW_STEP_IDLE, /* skipped */
        TW_STEP_IDLE, TW_STEP_IDLE, TW_STEP_WARMUP, TW_STEP_ACTIVE, TW_STEP_ACTIVE,
        TW_STEP_IDLE, TW_STEP_IDLE, TW_STEP_WARMUP, TW_STEP_ACTIVE, TW_STEP_ACTIVE,
        TW_STEP_IDLE, TW_STEP_IDLE, TW_STEP_IDLE, /* after repeat cycles */
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        assert_int_equal(tw_schedule_state(&s, i), expected[i]);
    s.repeat = 0; /* cycles without end */
    assert_int_equal(tw_schedule_state(&s, 1 + 6 * 1000 + 3), TW_STEP_ACTIVE);
    assert_int_equal(tw_schedule_state(&s, 1 + 6 * 1000 + 2), TW_STEP_WARMUP);
    assert_int_equal(tw_schedule_state(&s, 1 + 6 * 1000), TW_STEP_IDLE);
    assert_int_equal(tw_schedule_state(NULL, 7), TW_STEP_ACTIVE);
    s.enabled = 0;
    assert_int_equal(tw_schedule_state(&s, 0), TW_STEP_ACTIVE);
    assert_int_equal(tw_schedule_from_json("null", &s), 0);
    assert_false(s.enabled);
    assert_int_equal(tw_schedule_from_json("[1]", &s), TW_EINVAL);
    assert_int_equal(tw_schedule_from_json("{\"wait\": 1}", &s), TW_EINVAL);
}

static void normalized_configs_read_back_unchanged(void **state)
{
    char *out = NULL, *again = NULL, err[1024] = "";
    assert_int_equal(tw_config_normalize("{\"file_max_size\": \"9007199254740992\", \"buffer_size\": \"1MiB\"}", 0, &out,
                                         err, sizeof err),
                     0);
    assert_int_equal(tw_config_normalize(out, 0, &again, err, sizeof err), 0);
    assert_string_equal(out, again);
    assert_non_null(strstr(out, "\"file_max_size\":9007199254740992"));
    free(out);
    free(again);
}

static void configs_the_fuzzer_found_are_refused_with_a_reason(void **state)
{
    char *out = NULL, err[1024] = "";
    /* A key given twice: only the first was checked, the second silently ignored. */
    assert_int_equal(tw_config_normalize("{\"format\": \"csv\", \"format\": \"xml\"}", 0, &out, err, sizeof err),
                     TW_EINVAL);
    assert_string_equal(err, "config key 'format' is given twice: give each key once");
    /* A size beyond 2^53 would come back rounded from the normalized JSON. */
    assert_int_equal(tw_config_normalize("{\"file_max_size\": \"55555015555555555\"}", 0, &out, err, sizeof err),
                     TW_EINVAL);
    assert_non_null(strstr(err, "'file_max_size': \"55555015555555555\" is too large: at most 9007199254740992"));
    assert_null(out);
}

/* The entry points' defaults differ on purpose, in out_dir, args, gpu and detail only, and come from one table. */
static void each_entry_point_fills_in_its_own_defaults(void **state)
{
    char *tw = NULL, *prof = NULL, *session = NULL, err[512] = "";
    assert_int_equal(tw_config_normalize_for(TW_CONFIG_DEFAULTS_TORCHWRAPPER, "{}", 0, &tw, err, sizeof err), 0);
    assert_int_equal(tw_config_normalize_for(TW_CONFIG_DEFAULTS_PROFILE, "{}", 0, &prof, err, sizeof err), 0);
    assert_int_equal(tw_config_normalize_for(TW_CONFIG_DEFAULTS_SESSION, "{}", 0, &session, err, sizeof err), 0);
    assert_non_null(strstr(tw, "\"out_dir\":\"./output\""));
    assert_non_null(strstr(tw, "\"args\":\"summary\",\"gpu\":\"auto\""));
    assert_non_null(strstr(prof, "\"out_dir\":null"));
    assert_non_null(strstr(prof, "\"args\":\"none\",\"gpu\":\"auto\""));
    assert_non_null(strstr(session, "\"out_dir\":null"));
    assert_non_null(strstr(session, "\"args\":\"none\",\"gpu\":\"off\""));
    /* TorchWrapper's (and run's) sample the costly detail, to cost little enough to leave on */
    assert_non_null(strstr(tw, "\"detail\":\"sampled\"}"));
    assert_non_null(strstr(prof, "\"detail\":\"all\"}"));
    assert_non_null(strstr(session, "\"detail\":\"all\"}"));
    /* what the user sets of the detail keeps every step; an explicit detail wins; normalizing again keeps it */
    char *given = NULL, *again = NULL;
    assert_int_equal(tw_config_normalize_for(TW_CONFIG_DEFAULTS_TORCHWRAPPER, "{\"args\": \"none\"}", 0, &given, err,
                                             sizeof err), 0);
    assert_non_null(strstr(given, "\"detail\":\"all\"}"));
    free(given);
    assert_int_equal(tw_config_normalize_for(TW_CONFIG_DEFAULTS_TORCHWRAPPER,
                                             "{\"args\": \"summary\", \"detail\": \"sampled\"}", 0, &given, err,
                                             sizeof err), 0);
    assert_non_null(strstr(given, "\"detail\":\"sampled\"}"));
    assert_int_equal(tw_config_normalize_for(TW_CONFIG_DEFAULTS_PROFILE, tw, 0, &again, err, sizeof err), 0);
    assert_non_null(strstr(again, "\"detail\":\"sampled\"}"));
    free(given);
    free(again);
    /* everything else is the same (detail, last, left out) */
    const char *from = strstr(tw, "\"max_files\""), *to = strstr(tw, ",\"detail\"");
    assert_memory_equal(from, strstr(prof, "\"max_files\""), (size_t)(to - from));
    assert_memory_equal(from, strstr(session, "\"max_files\""), (size_t)(to - from));
    assert_memory_equal(strstr(tw, "\"format\""), strstr(prof, "\"format\""),
                        (size_t)(strstr(tw, "\"args\"") - strstr(tw, "\"format\"")));
    free(tw);
    free(prof);
    free(session);
    /* out_dir null (in memory) is accepted only where it is the default */
    char *out = NULL;
    assert_int_equal(tw_config_normalize_for(TW_CONFIG_DEFAULTS_PROFILE, "{\"out_dir\": null}", 0, &out, err, sizeof err),
                     0);
    free(out);
    out = NULL;
    assert_int_equal(tw_config_normalize("{\"out_dir\": null}", 0, &out, err, sizeof err), TW_EINVAL);
    assert_null(out);
    assert_int_equal(tw_config_normalize_for(TW_CONFIG_DEFAULTS_COUNT, "{}", 0, &out, err, sizeof err), TW_EINVAL);
}

/* #26: --set exclude=torch.Tensor.* was refused ("give a list"); environment variables split at commas. */
static void a_string_for_a_list_key_is_a_comma_separated_list_from_every_source(void **state)
{
    char *out = NULL, err[512] = "";
    assert_int_equal(tw_config_normalize("{\"exclude\": \"torch.Tensor.*\", \"modules\": \"torch, torchvision\", "
                                         "\"track\": \"grads\"}", 0, &out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"modules\":[\"torch\",\"torchvision\"]"));
    assert_non_null(strstr(out, "\"exclude\":[\"torch.Tensor.*\"]"));
    assert_non_null(strstr(out, "\"track\":[\"grads\"]"));
    free(out);
    expect_config_error("{\"modules\": \" , \"}", 0, "at least one module name");
}

static void plus_globs_add_to_the_default_exclude_list_and_may_not_mix_with_plain_ones(void **state)
{
    char *out = NULL, err[512] = "";
    assert_int_equal(tw_config_normalize("{\"exclude\": \"+torch.add,+torch.mul\"}", 1, &out, err, sizeof err), 0);
    assert_non_null(strstr(out, "\"exclude\":[\"+torch.add\",\"+torch.mul\"]"));
    free(out);
    expect_config_error("{\"exclude\": [\"+torch.add\", \"torch.mul\"]}", 0, "not both");
    expect_config_error("{\"exclude\": [\"+\"]}", 0, "\"+glob\" adds to the default list");
    /* include knows no "+": it has no default list to add to, and "+x" is just a glob there */
    assert_int_equal(tw_config_normalize("{\"include\": [\"+x\", \"y\"]}", 0, &out, err, sizeof err), 0);
    free(out);
}

static void the_default_of_a_key_is_its_json_text(void **state)
{
    assert_string_equal(tw_config_default("file_max_size", TW_CONFIG_DEFAULTS_TORCHWRAPPER), "128000000");
    assert_string_equal(tw_config_default("file_name_spec", TW_CONFIG_DEFAULTS_PROFILE), "\"timestamp\"");
    assert_string_equal(tw_config_default("args", TW_CONFIG_DEFAULTS_PROFILE), "\"none\"");
    assert_null(tw_config_default("no_such_key", TW_CONFIG_DEFAULTS_TORCHWRAPPER));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_with_units_parse_to_bytes),
        cmocka_unit_test(bad_sizes_are_refused),
        cmocka_unit_test(name_specs_expand),
        cmocka_unit_test(bad_name_specs_say_why),
        cmocka_unit_test(percentiles_are_within_one_percent),
        cmocka_unit_test(tensor_stats_and_track_are_validated_and_completed),
        cmocka_unit_test(flops_and_peak_flops_are_validated_and_typed),
        cmocka_unit_test(memory_is_off_by_default_and_takes_booleans_only),
        cmocka_unit_test(compress_is_none_by_default_and_gzip_for_the_writer),
        cmocka_unit_test(schedules_are_validated_and_completed),
        cmocka_unit_test(schedule_states_follow_torch_profiler_schedule),
        cmocka_unit_test(normalized_configs_read_back_unchanged),
        cmocka_unit_test(configs_the_fuzzer_found_are_refused_with_a_reason),
        cmocka_unit_test(a_string_for_a_list_key_is_a_comma_separated_list_from_every_source),
        cmocka_unit_test(plus_globs_add_to_the_default_exclude_list_and_may_not_mix_with_plain_ones),
        cmocka_unit_test(each_entry_point_fills_in_its_own_defaults),
        cmocka_unit_test(the_default_of_a_key_is_its_json_text),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
