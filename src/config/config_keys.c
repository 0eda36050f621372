/* SPDX-License-Identifier: MIT */
/*
 * The configuration: sizes ("128MB"), and the one validator of every config key, which owns each
 * key's accepted values, messages and defaults (config_keys below: the only place a default is
 * written). File name specs are checked and expanded in names.c.
 */
#include "config.h"
#include "torchwrapper/config_keys.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "config_keys_internal.h"
#include "schedule_check.h"

/* ---- the configuration validator ------------------------------------------------------------- */

#include <cjson/cJSON.h>

typedef enum {
    KEY_STRING,
    KEY_CHOICE,
    KEY_SIZE,
    KEY_LIST,
    KEY_LIST_OR_NULL,
    KEY_COUNT,
    KEY_SECONDS,
    KEY_SPEC,
    KEY_CHOICE_LIST,  /* a list of words among choices (no repeats) */
    KEY_TENSOR_STATS, /* false/null (off), true (the defaults), or an object (see tensor_stats_keys) */
    KEY_SCHEDULE,     /* null, or an object of steps (schedule.c) */
    KEY_ON_DEMAND,    /* false/null (off), true (the defaults), or an object (steps, dir) */
    KEY_BOOL,         /* true or false */
    KEY_RATE,         /* null, or a number > 0 (peak_flops: FLOP/s) */
} key_kind_t;

/*
 * Every key, its kind, its accepted values and its defaults (JSON text), one column per entry point
 * (tw_config_defaults_t): [0] is TorchWrapper's, the original TorchWrapper's defaults; a NULL in the
 * other columns means the same. The defaults that differ do so on purpose: profile() keeps records
 * in memory unless given out_dir, and records no argument summaries unless asked (they cost ~1 us a
 * call); a bare Session, which knows no GPU by itself, times none unless asked.
 */
static const struct config_key {
    const char *name;
    key_kind_t kind;
    const char *fallback[TW_CONFIG_DEFAULTS_COUNT]; /* TORCHWRAPPER, PROFILE, SESSION */
    const char *choices;  /* KEY_CHOICE: accepted values, space-separated */
} config_keys[] = {
    {"out_dir", KEY_STRING, {"\"./output\"", "null", "null"}, NULL},
    {"format", KEY_CHOICE, {"\"json\""}, "json csv"},
    {"file_max_size", KEY_SIZE, {"128000000"}, NULL}, /* "128MB" */
    {"file_name_spec", KEY_SPEC, {"\"timestamp\""}, NULL},
    {"modules", KEY_LIST, {"[\"torch\"]"}, NULL},
    {"include", KEY_LIST, {"[]"}, NULL},
    {"exclude", KEY_LIST_OR_NULL, {"null"}, NULL},
    {"args", KEY_CHOICE, {"\"summary\"", "\"none\"", "\"none\""}, "summary none repr"},
    {"gpu", KEY_CHOICE, {"\"auto\"", NULL, "\"off\""}, "auto on off"},
    {"max_files", KEY_COUNT, {"0"}, NULL},
    /* 10 GB of each kind of record file: a profile left on for days (JSON Lines: ~280 bytes a call,
     * 1.7 GB for 10,000 steps of a small BERT, NEWS) keeps its newest records, not a full disk */
    {"max_total_size", KEY_SIZE, {"10000000000"}, NULL},
    {"flush_interval", KEY_SECONDS, {"1.0"}, NULL},
    {"buffer_size", KEY_SIZE, {"33554432"}, NULL}, /* "32MiB" */
    {"on_full", KEY_CHOICE, {"\"drop\""}, "drop wait"},
    {"tensor_stats", KEY_TENSOR_STATS, {"null"}, NULL},
    {"track", KEY_CHOICE_LIST, {"[]"}, "parameters grads"},
    {"schedule", KEY_SCHEDULE, {"null"}, NULL},
    {"records", KEY_CHOICE, {"\"all\""}, "all summary"},
    {"on_demand", KEY_ON_DEMAND, {"null"}, NULL},
    {"sites", KEY_CHOICE, {"\"boundary\""}, "boundary off all"},
    {"aten", KEY_CHOICE, {"\"backward\""}, "backward off all"},
    {"flops", KEY_BOOL, {"true"}, NULL},
    {"peak_flops", KEY_RATE, {"null"}, NULL},
    /* off: the allocator's reports cost each allocation a locked table update (README, make bench) */
    {"memory", KEY_BOOL, {"false"}, NULL},
    /* none: gzip makes files 5x (CSV) to 10x (JSON) smaller, but deflating costs the writer thread
     * ~0.8 us a record, 4-6% of a small BERT's step on these 2-core machines, taken from the training
     * (NEWS, make bench: bench_compress.py) */
    {"compress", KEY_CHOICE, {"\"none\""}, "none gzip"},
    /* sampled: the costly detail (argument summaries, autograd nodes, FLOPs, memory) in the first
     * TW_DETAIL_FIRST steps, then one in TW_DETAIL_EVERY, so that a profile costs little enough to
     * stay on; all: in every step. Not given: all where args, aten, flops, memory or a schedule is
     * given (what a user sets is kept in every step), else the entry point's (detail_given_by_others) */
    {"detail", KEY_CHOICE, {"\"sampled\"", "\"all\"", "\"all\""}, "sampled all"},
};

/* The default of key for an entry point (JSON text). */
static const char *fallback_of(const struct config_key *key, tw_config_defaults_t defaults)
{
    return key->fallback[defaults] != NULL ? key->fallback[defaults] : key->fallback[0];
}

const char *tw_config_default(const char *key, tw_config_defaults_t defaults)
{
    if (key == NULL || (unsigned)defaults >= TW_CONFIG_DEFAULTS_COUNT)
        return NULL;
    for (size_t i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++)
        if (strcmp(config_keys[i].name, key) == 0)
            return fallback_of(&config_keys[i], defaults);
    return NULL;
}
#define CONFIG_KEY_COUNT (sizeof config_keys / sizeof config_keys[0])

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 63 || lb >= 63)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diagonal + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diagonal = up;
        }
    }
    return row[lb];
}

static void accepted_keys(char *out, size_t size)
{
    size_t n = 0;
    for (size_t i = 0; i < CONFIG_KEY_COUNT && n < size; i++)
        n += (size_t)snprintf(out + n, size - n, "%s%s", i ? ", " : "", config_keys[i].name);
}

/* The value as JSON text for messages (truncated). */
static void describe(const cJSON *value, char *out, size_t size)
{
    char *text = cJSON_PrintUnformatted(value);
    snprintf(out, size, "%s", text ? text : "?");
    if (text && strlen(text) >= size && size > 4)
        strcpy(out + size - 4, "...");
    free(text);
}

/* A string list from a comma-separated string ("a" is ["a"]). New reference or NULL. */
static cJSON *split_list(const char *text)
{
    cJSON *list = cJSON_CreateArray();
    const char *p = text;
    while (list != NULL && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len > 0 && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            len--;
        if (len > 0) {
            char *item = strndup(p, len);
            cJSON_AddItemToArray(list, cJSON_CreateString(item ? item : ""));
            free(item);
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return list;
}

/* Whether word (len bytes) is one of the space-separated choices. */
static int is_choice(const char *choices, const char *word, size_t len)
{
    for (const char *c = choices; *c;) {
        size_t n = strcspn(c, " ");
        if (n == len && strncmp(c, word, len) == 0)
            return 1;
        c += n + (c[n] == ' ');
    }
    return 0;
}

/* A list of words among choices, from a JSON list or comma-separated text. */
static cJSON *check_choice_list(const char *what, const char *choices, const cJSON *value, int allow_empty, char *err,
                                size_t err_size)
{
    char given[160];
    describe(value, given, sizeof given);
    const char *text = cJSON_IsString(value) ? value->valuestring : NULL;
    cJSON *list = text != NULL ? split_list(text) : cJSON_IsArray(value) ? cJSON_Duplicate(value, 1) : NULL;
    const cJSON *item;
    const char *bad = NULL;
    int ok = list != NULL && (allow_empty || cJSON_GetArraySize(list) > 0);
    cJSON_ArrayForEach(item, list)
    {
        if (!cJSON_IsString(item) || !is_choice(choices, item->valuestring, strlen(item->valuestring))) {
            ok = 0;
            bad = cJSON_IsString(item) ? item->valuestring : NULL;
            break;
        }
        for (const cJSON *other = list->child; other != item; other = other->next)
            if (strcmp(other->valuestring, item->valuestring) == 0) {
                ok = 0;
                bad = item->valuestring;
            }
    }
    if (ok)
        return list;
    if (bad != NULL)
        snprintf(err, err_size, "%s: %s is not accepted: '%s' is not one of: %s (each at most once)", what, given, bad,
                 choices);
    else
        snprintf(err, err_size, "%s: %s is not accepted: give a list%s of: %s", what, given,
                 allow_empty ? "" : " (not empty)", choices);
    cJSON_Delete(list);
    return NULL;
}

/* An environment variable's text for a key that is a switch or an object: true for 1/true/on/yes,
 * false for 0/false/off/no or nothing (any case), else the JSON text parsed (NULL when it is not). */
static cJSON *switch_or_json(const char *t)
{
    if (strcasecmp(t, "1") == 0 || strcasecmp(t, "true") == 0 || strcasecmp(t, "on") == 0 || strcasecmp(t, "yes") == 0)
        return cJSON_CreateTrue();
    if (strcasecmp(t, "0") == 0 || strcasecmp(t, "false") == 0 || strcasecmp(t, "off") == 0 ||
        strcasecmp(t, "no") == 0 || t[0] == '\0')
        return cJSON_CreateFalse();
    return cJSON_Parse(t);
}

#define ON_DEMAND_STEPS 5 /* steps of a capture asked without a number (kill -USR2) */

/*
 * on_demand: false or null (off); true (captures of 5 steps into out_dir/capture-N); or an object
 * with steps (N >= 1, what a request that names none captures) and dir (where such a capture goes;
 * null: out_dir/capture-N). Normalized to null or to the complete object.
 */
static cJSON *check_on_demand(const cJSON *value, int from_strings, char *err, size_t err_size)
{
    char given[160];
    describe(value, given, sizeof given);
    cJSON *parsed = NULL, *out = NULL;
    if (from_strings && cJSON_IsString(value) && (parsed = switch_or_json(value->valuestring)) != NULL)
        value = parsed;
    if (value == NULL || cJSON_IsNull(value) || cJSON_IsFalse(value)) {
        out = value != NULL ? cJSON_CreateNull() : NULL;
        goto done;
    }
    const cJSON *steps = cJSON_IsObject(value) ? cJSON_GetObjectItemCaseSensitive(value, "steps") : NULL;
    const cJSON *dir = cJSON_IsObject(value) ? cJSON_GetObjectItemCaseSensitive(value, "dir") : NULL;
    const cJSON *entry;
    const cJSON *object = cJSON_IsObject(value) ? value : NULL;
    cJSON_ArrayForEach(entry, object)
        if (strcmp(entry->string, "steps") != 0 && strcmp(entry->string, "dir") != 0) {
            snprintf(err, err_size, "config key 'on_demand': unknown key '%s' (accepted: steps, dir)", entry->string);
            goto done;
        }
    double n = steps == NULL || cJSON_IsNull(steps) ? ON_DEMAND_STEPS
               : cJSON_IsNumber(steps)              ? steps->valuedouble
               : from_strings && cJSON_IsString(steps) ? strtod(steps->valuestring, NULL)
                                                       : -1;
    if (!cJSON_IsTrue(value) && !cJSON_IsObject(value)) {
        snprintf(err, err_size, "config key 'on_demand': %s is not accepted: give true (captures of %d steps on "
                                "request), false, or an object with keys steps, dir", given, ON_DEMAND_STEPS);
    } else if (n < 1 || n > 1e9 || n != (double)(uint64_t)n) {
        char bad[64] = "?";
        char *t = cJSON_PrintUnformatted(steps);
        snprintf(bad, sizeof bad, "%s", t != NULL ? t : "?");
        free(t);
        snprintf(err, err_size, "config key 'on_demand', key 'steps': %s is not accepted: give a whole number of "
                                "steps from 1 to 1000000000", bad);
    } else if (dir != NULL && !cJSON_IsNull(dir) && !(cJSON_IsString(dir) && dir->valuestring[0] != '\0')) {
        snprintf(err, err_size, "config key 'on_demand', key 'dir': %s is not accepted: give a directory path, or "
                                "null for out_dir/capture-N", cJSON_IsString(dir) ? "\"\"" : "a non-string");
    } else {
        out = cJSON_CreateObject();
        char number[24];
        snprintf(number, sizeof number, "%llu", (unsigned long long)n);
        cJSON_AddItemToObject(out, "steps", cJSON_CreateRaw(number));
        cJSON_AddItemToObject(out, "dir", cJSON_IsString(dir) ? cJSON_CreateString(dir->valuestring)
                                                              : cJSON_CreateNull());
    }
done:
    cJSON_Delete(parsed);
    return out;
}

#define STATS_TENSORS "input output weight grad"
#define STATS_METRICS "shape dtype mean std min max zeros nan inf"

/*
 * tensor_stats: false or null (off); true (the defaults); or an object with
 *   tensors ["input", "output"] (of input output weight grad), metrics [all built-in ones] (built-in
 *   names, or names of registered functions, checked when profiling starts), modules ["*"] (globs on
 *   API names or instance paths), every 1 (N >= 1: one step in N) or sample (0 < p <= 1: each step
 *   with probability p; not with every).
 * Normalized to null or to the complete object.
 */
static cJSON *check_tensor_stats(const cJSON *value, int from_strings, char *err, size_t err_size)
{
    char given[160];
    describe(value, given, sizeof given);
    cJSON *parsed = NULL;
    if (from_strings && cJSON_IsString(value)) {
        parsed = switch_or_json(value->valuestring);
        if (parsed == NULL) {
            snprintf(err, err_size, "config key 'tensor_stats': %s is not accepted: give true, false, or a JSON "
                                    "object such as {\"tensors\": [\"output\"], \"every\": 10}", given);
            return NULL;
        }
        value = parsed;
    }
    cJSON *out = NULL;
    if (cJSON_IsNull(value) || cJSON_IsFalse(value)) {
        out = cJSON_CreateNull();
        goto done;
    }
    if (!cJSON_IsTrue(value) && !cJSON_IsObject(value)) {
        snprintf(err, err_size, "config key 'tensor_stats': %s is not accepted: give true (inputs and outputs of "
                                "every module, every step), false, or an object with keys tensors, metrics, modules, "
                                "every, sample", given);
        goto done;
    }
    static const char *const keys[] = {"tensors", "metrics", "modules", "every", "sample"};
    const cJSON *entry;
    const cJSON *object = cJSON_IsObject(value) ? value : NULL;
    cJSON_ArrayForEach(entry, object)
    {
        size_t k = 0, best = 0, best_distance = 99;
        while (k < 5 && strcmp(keys[k], entry->string) != 0)
            k++;
        if (k < 5)
            continue;
        for (size_t i = 0; i < 5; i++) {
            size_t d = edit_distance(entry->string, keys[i]);
            if (d < best_distance) {
                best_distance = d;
                best = i;
            }
        }
        if (best_distance <= 2)
            snprintf(err, err_size, "config key 'tensor_stats': unknown key '%s': did you mean '%s'? (accepted: "
                                    "tensors, metrics, modules, every, sample)", entry->string, keys[best]);
        else
            snprintf(err, err_size, "config key 'tensor_stats': unknown key '%s' (accepted: tensors, metrics, "
                                    "modules, every, sample)", entry->string);
        goto done;
    }
    const cJSON *obj = cJSON_IsObject(value) ? value : NULL;
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(obj, "tensors");
    const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(obj, "metrics");
    const cJSON *modules = cJSON_GetObjectItemCaseSensitive(obj, "modules");
    const cJSON *every = cJSON_GetObjectItemCaseSensitive(obj, "every");
    const cJSON *sample = cJSON_GetObjectItemCaseSensitive(obj, "sample");
    if (cJSON_IsNull(every)) /* as normalized: null means not given */
        every = NULL;
    if (cJSON_IsNull(sample))
        sample = NULL;
    out = cJSON_CreateObject();
    cJSON *item = tensors != NULL ? check_choice_list("config key 'tensor_stats', key 'tensors'", STATS_TENSORS,
                                                      tensors, 0, err, err_size)
                                  : cJSON_Parse("[\"input\", \"output\"]");
    if (item == NULL)
        goto fail;
    cJSON_AddItemToObject(out, "tensors", item);
    if (metrics != NULL) {
        const cJSON *m;
        int ok = cJSON_IsArray(metrics) && cJSON_GetArraySize(metrics) > 0;
        cJSON_ArrayForEach(m, metrics) ok = ok && cJSON_IsString(m) && m->valuestring[0] != '\0';
        if (!ok) {
            char text[160];
            describe(metrics, text, sizeof text);
            snprintf(err, err_size, "config key 'tensor_stats', key 'metrics': %s is not accepted: give a non-empty "
                                    "list of metric names (built in: %s; or names of functions registered with "
                                    "register_metric)", text, STATS_METRICS);
            goto fail;
        }
        item = cJSON_Duplicate(metrics, 1);
    } else {
        item = cJSON_Parse("[\"shape\", \"dtype\", \"mean\", \"std\", \"min\", \"max\", \"zeros\", \"nan\", \"inf\"]");
    }
    cJSON_AddItemToObject(out, "metrics", item);
    if (modules != NULL) {
        const cJSON *m;
        int ok = cJSON_IsArray(modules) && cJSON_GetArraySize(modules) > 0;
        cJSON_ArrayForEach(m, modules) ok = ok && cJSON_IsString(m) && m->valuestring[0] != '\0';
        if (!ok) {
            char text[160];
            describe(modules, text, sizeof text);
            snprintf(err, err_size, "config key 'tensor_stats', key 'modules': %s is not accepted: give a non-empty "
                                    "list of globs on module paths (\"features.*\") or API names "
                                    "(\"torch.nn.Conv2d*\")", text);
            goto fail;
        }
        item = cJSON_Duplicate(modules, 1);
    } else {
        item = cJSON_Parse("[\"*\"]");
    }
    cJSON_AddItemToObject(out, "modules", item);
    if (every != NULL && sample != NULL) {
        snprintf(err, err_size, "config key 'tensor_stats': give either 'every' (one step in N) or 'sample' (a "
                                "probability per step), not both");
        goto fail;
    }
    if (every != NULL && !(cJSON_IsNumber(every) && every->valuedouble >= 1 && every->valuedouble <= 4294967295.0 &&
                           every->valuedouble == (double)(uint64_t)every->valuedouble)) {
        char text[64];
        describe(every, text, sizeof text);
        snprintf(err, err_size, "config key 'tensor_stats', key 'every': %s is not accepted: give a whole number of "
                                "steps, 1 or more (1: every step)", text);
        goto fail;
    }
    if (sample != NULL && !(cJSON_IsNumber(sample) && sample->valuedouble > 0 && sample->valuedouble <= 1)) {
        char text[64];
        describe(sample, text, sizeof text);
        snprintf(err, err_size, "config key 'tensor_stats', key 'sample': %s is not accepted: give a probability per "
                                "step, more than 0 and at most 1", text);
        goto fail;
    }
    char number[24];
    snprintf(number, sizeof number, "%llu", every != NULL ? (unsigned long long)every->valuedouble : 1ull);
    cJSON_AddItemToObject(out, "every", cJSON_CreateRaw(number));
    cJSON_AddItemToObject(out, "sample", sample != NULL ? cJSON_CreateNumber(sample->valuedouble) : cJSON_CreateNull());
    goto done;
fail:
    cJSON_Delete(out);
    out = NULL;
done:
    cJSON_Delete(parsed);
    return out;
}

/* Checks one value; returns the normalized value (new) or NULL with err written. */
static cJSON *check_value(const struct config_key *key, const cJSON *value, int from_strings,
                          tw_config_defaults_t defaults, char *err, size_t err_size)
{
    char given[160];
    describe(value, given, sizeof given);
    const char *text = cJSON_IsString(value) ? value->valuestring : NULL;
    switch (key->kind) {
    case KEY_CHOICE_LIST: {
        char what[64];
        snprintf(what, sizeof what, "config key '%s'", key->name);
        return check_choice_list(what, key->choices, value, 1, err, err_size);
    }
    case KEY_TENSOR_STATS:
        return check_tensor_stats(value, from_strings, err, err_size);
    case KEY_SCHEDULE:
        return tw_schedule_check(value, from_strings, err, err_size);
    case KEY_ON_DEMAND:
        return check_on_demand(value, from_strings, err, err_size);
    case KEY_BOOL: {
        cJSON *parsed = from_strings && text != NULL ? switch_or_json(text) : NULL;
        const cJSON *v = parsed != NULL ? parsed : value;
        cJSON *out = cJSON_IsBool(v) ? cJSON_CreateBool(cJSON_IsTrue(v)) : NULL;
        cJSON_Delete(parsed);
        if (out == NULL)
            snprintf(err, err_size, "config key '%s': %s is not accepted: give true or false", key->name, given);
        return out;
    }
    case KEY_RATE: {
        double v = 0;
        int ok = cJSON_IsNumber(value);
        if (ok)
            v = value->valuedouble;
        else if (from_strings && text != NULL) {
            char *end;
            v = strtod(text, &end);
            ok = end != text && *end == '\0';
        }
        if (cJSON_IsNull(value) || (from_strings && text != NULL && (text[0] == '\0' || strcmp(text, "null") == 0)))
            return cJSON_CreateNull();
        if (ok && v > 0 && isfinite(v))
            return cJSON_CreateNumber(v);
        snprintf(err, err_size, "config key '%s': %s is not accepted: give the device's peak in FLOP/s, a number "
                                "more than 0 (e.g. 989e12 for an H100's dense bf16), or null for the known GPUs' table",
                 key->name, given);
        return NULL;
    }
    case KEY_STRING: {
        /* null where it is the default: records in memory (profile(), Session). */
        int null_ok = strcmp(fallback_of(key, defaults), "null") == 0;
        if (text != NULL && text[0] != '\0')
            return cJSON_CreateString(text);
        if (null_ok && cJSON_IsNull(value))
            return cJSON_CreateNull();
        snprintf(err, err_size, "config key '%s': %s is not accepted: give a non-empty path string%s", key->name, given,
                 null_ok ? ", or null to keep the records in memory" : "");
        return NULL;
    }
    case KEY_SPEC: {
        if (text != NULL && tw_name_spec_check(text, err, err_size) == 0)
            return cJSON_CreateString(text);
        if (text == NULL)
            snprintf(err, err_size, "config key 'file_name_spec': %s is not accepted: give \"timestamp\", \"serial\" "
                                    "or a template string", given);
        return NULL;
    }
    case KEY_CHOICE:
        if (text != NULL && is_choice(key->choices, text, strlen(text)))
            return cJSON_CreateString(text);
        snprintf(err, err_size, "config key '%s': %s is not accepted: give one of: %s", key->name, given,
                 key->choices);
        return NULL;
    case KEY_SIZE: {
        uint64_t bytes = 0;
        int ok = 0;
        /* max_total_size 0: every file kept */
        double least = strcmp(key->name, "max_total_size") == 0 ? 0 : 1;
        if (cJSON_IsNumber(value) && value->valuedouble >= least &&
            value->valuedouble == (double)(uint64_t)value->valuedouble) {
            bytes = (uint64_t)value->valuedouble;
            ok = 1;
        } else if (text != NULL) {
            ok = tw_parse_size(text, &bytes) == 0;
            if (!ok && least == 0 && strspn(text, "0 ") == strlen(text) && strchr(text, '0') != NULL)
                ok = 1, bytes = 0; /* "0" */
        }
        /* Sizes travel as JSON numbers, exact only up to 2^53: larger ones (8 PiB) are refused
         * rather than silently rounded when the normalized config is read back. */
        if (ok && bytes > (1ull << 53)) {
            snprintf(err, err_size, "config key '%s': %s is too large: at most 9007199254740992 bytes (8 PiB)",
                     key->name, given);
            return NULL;
        }
        if (ok && strcmp(key->name, "file_max_size") == 0 && tw_config_check_file_max_size(bytes, given, err, err_size))
            return NULL;
        if (ok && least == 0 && bytes != 0 && bytes < 2 * TW_CONFIG_MIN_FILE_SIZE) {
            snprintf(err, err_size, "config key '%s': %s is too small: give 0 (every file kept) or at least %d bytes "
                     "(two files of the smallest size)", key->name, given, 2 * TW_CONFIG_MIN_FILE_SIZE);
            return NULL;
        }
        if (ok) {
            char number[24];
            snprintf(number, sizeof number, "%llu", (unsigned long long)bytes);
            return cJSON_CreateRaw(number);
        }
        snprintf(err, err_size, "config key '%s': %s is not a size: give a number of bytes or a number with a unit, "
                                "e.g. 1048576, \"10MB\", \"1.5GB\", \"512KiB\", \"2GiB\" (B, KB, MB, GB, TB are powers of "
                                "1000; KiB, MiB, GiB, TiB of 1024)", key->name, given);
        return NULL;
    }
    case KEY_LIST:
    case KEY_LIST_OR_NULL: {
        if (key->kind == KEY_LIST_OR_NULL && cJSON_IsNull(value))
            return cJSON_CreateNull();
        /* A string is a list from every entry point, as in environment variables: "a" is ["a"],
         * "a, b" is ["a", "b"] (--set exclude=torch.Tensor.* was refused: "give a list"). */
        cJSON *list = text != NULL ? split_list(text) : cJSON_IsArray(value) ? cJSON_Duplicate(value, 1) : NULL;
        const cJSON *item;
        int ok = list != NULL, added = 0, plain = 0;
        cJSON_ArrayForEach(item, list)
        {
            ok = ok && cJSON_IsString(item) && item->valuestring[0] != '\0';
            if (ok && item->valuestring[0] == '+')
                added++;
            else if (ok)
                plain++;
            if (ok && strcmp(item->valuestring, "+") == 0 && strcmp(key->name, "exclude") == 0)
                ok = 0; /* "+" and no glob */
        }
        if (ok && strcmp(key->name, "modules") == 0 && cJSON_GetArraySize(list) == 0)
            ok = 0;
        /* exclude: "+glob" entries are added to the default list, plain ones replace it; a list of
         * both would leave it unclear whether the defaults stay. */
        if (ok && added && plain && strcmp(key->name, "exclude") == 0) {
            cJSON_Delete(list);
            snprintf(err, err_size, "config key 'exclude': %s is not accepted: give globs that all start with '+' "
                     "(added to the default list) or none that does (replacing it), not both", given);
            return NULL;
        }
        if (ok)
            return list;
        cJSON_Delete(list);
        snprintf(err, err_size, "config key '%s': %s is not accepted: give a list of non-empty strings%s%s", key->name,
                 given, strcmp(key->name, "modules") == 0 ? " (at least one module name, e.g. [\"torch\"])" : "",
                 key->kind == KEY_LIST_OR_NULL ? " (API-name globs; \"+glob\" adds to the default list), or null for "
                                                 "the default list" : "");
        return NULL;
    }
    case KEY_COUNT:
    case KEY_SECONDS: {
        double v = 0;
        int ok = 0;
        if (cJSON_IsNumber(value)) {
            v = value->valuedouble;
            ok = 1;
        } else if (from_strings && text != NULL) {
            char *end;
            v = strtod(text, &end);
            ok = end != text && *end == '\0';
        }
        if (key->kind == KEY_COUNT && ok && v >= 0 && v <= 4294967295.0 && v == (double)(uint64_t)v) {
            char number[24];
            snprintf(number, sizeof number, "%llu", (unsigned long long)v);
            return cJSON_CreateRaw(number);
        }
        if (key->kind == KEY_SECONDS && ok && v > 0 && v <= 3600)
            return cJSON_CreateNumber(v);
        snprintf(err, err_size, "config key '%s': %s is not accepted: give %s", key->name, given,
                 key->kind == KEY_COUNT ? "a whole number, 0 or more (0 keeps every file)"
                                        : "a number of seconds, more than 0 and at most 3600");
        return NULL;
    }
    }
    return NULL;
}

int tw_config_normalize(const char *json_in, int from_strings, char **json_out, char *err, size_t err_size)
{
    return tw_config_normalize_for(TW_CONFIG_DEFAULTS_TORCHWRAPPER, json_in, from_strings, json_out, err, err_size);
}

/* Whether the configuration in sets one of the keys the detail is made of (args, aten, flops,
 * memory), or a schedule (whose few recorded steps are the ones asked for): then "detail", when not
 * given, is "all". The normalized configuration always has "detail", so that normalizing it again
 * keeps it. */
static int detail_given_by_others(const cJSON *in)
{
    static const char *const keys[] = {"args", "aten", "flops", "memory", "schedule"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(in, keys[i]) != NULL)
            return 1;
    return 0;
}

int tw_config_normalize_tree(tw_config_defaults_t defaults, const char *json_in, int from_strings, cJSON **tree,
                             char *err, size_t err_size)
{
    *tree = NULL;
    if ((unsigned)defaults >= TW_CONFIG_DEFAULTS_COUNT) {
        snprintf(err, err_size, "unknown set of defaults %d", (int)defaults);
        return TW_EINVAL;
    }
    cJSON *in = cJSON_Parse(json_in ? json_in : "{}");
    if (in == NULL || !cJSON_IsObject(in)) {
        snprintf(err, err_size, "the configuration must be a JSON object (a dict), not %s",
                 in == NULL ? "invalid JSON" : "another kind of value");
        cJSON_Delete(in);
        return TW_EINVAL;
    }
    const cJSON *entry;
    cJSON_ArrayForEach(entry, in)
    {
        /* JSON allows a key twice and cJSON keeps both; only the first would be checked and used. */
        for (const cJSON *earlier = in->child; earlier != entry; earlier = earlier->next) {
            if (strcmp(earlier->string, entry->string) == 0) {
                snprintf(err, err_size, "config key '%s' is given twice: give each key once", entry->string);
                cJSON_Delete(in);
                return TW_EINVAL;
            }
        }
        size_t k = 0;
        while (k < CONFIG_KEY_COUNT && strcmp(config_keys[k].name, entry->string) != 0)
            k++;
        if (k < CONFIG_KEY_COUNT)
            continue;
        size_t best = 0, best_distance = 99;
        for (size_t i = 0; i < CONFIG_KEY_COUNT; i++) {
            size_t d = edit_distance(entry->string, config_keys[i].name);
            if (d < best_distance) {
                best_distance = d;
                best = i;
            }
        }
        char keys[512];
        accepted_keys(keys, sizeof keys);
        if (best_distance <= 2 && best_distance <= strlen(entry->string) / 3)
            snprintf(err, err_size, "unknown config key '%s': did you mean '%s'? (accepted: %s)", entry->string,
                     config_keys[best].name, keys);
        else
            snprintf(err, err_size, "unknown config key '%s' (accepted: %s)", entry->string, keys);
        cJSON_Delete(in);
        return TW_EINVAL;
    }
    cJSON *out = cJSON_CreateObject();
    for (size_t i = 0; out != NULL && i < CONFIG_KEY_COUNT; i++) {
        const cJSON *given = cJSON_GetObjectItemCaseSensitive(in, config_keys[i].name);
        cJSON *value;
        if (given == NULL && strcmp(config_keys[i].name, "detail") == 0 && detail_given_by_others(in)) {
            value = cJSON_CreateString("all"); /* what the user set is kept in every step */
        } else if (given != NULL) {
            value = check_value(&config_keys[i], given, from_strings, defaults, err, err_size);
        } else {
            value = cJSON_Parse(fallback_of(&config_keys[i], defaults));
            if (value != NULL && config_keys[i].kind == KEY_SIZE) { /* keep sizes as exact raw integers */
                char *text = cJSON_PrintUnformatted(value);
                cJSON_Delete(value);
                value = text ? cJSON_CreateRaw(text) : NULL;
                free(text);
            }
        }
        if (value == NULL) {
            cJSON_Delete(out);
            cJSON_Delete(in);
            return TW_EINVAL;
        }
        cJSON_AddItemToObject(out, config_keys[i].name, value);
    }
    cJSON_Delete(in);
    if (out == NULL) {
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    *tree = out;
    return 0;
}

int tw_config_normalize_for(tw_config_defaults_t defaults, const char *json_in, int from_strings, char **json_out,
                            char *err, size_t err_size)
{
    cJSON *tree;
    *json_out = NULL;
    int rc = tw_config_normalize_tree(defaults, json_in, from_strings, &tree, err, err_size);
    if (rc != 0)
        return rc;
    *json_out = cJSON_PrintUnformatted(tree);
    cJSON_Delete(tree);
    if (*json_out == NULL) {
        snprintf(err, err_size, "out of memory");
        return TW_ENOMEM;
    }
    return 0;
}

const char *tw_config_tensor_stats_metrics(void)
{
    return STATS_METRICS;
}

int tw_config_check_file_max_size(uint64_t bytes, const char *given, char *err, size_t err_size)
{
    if (bytes >= TW_CONFIG_MIN_FILE_SIZE)
        return 0;
    snprintf(err, err_size, "config key 'file_max_size': %s is too small: at least %d bytes are needed for a header "
                            "and any record", given, TW_CONFIG_MIN_FILE_SIZE);
    return TW_EINVAL;
}
