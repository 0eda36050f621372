/* SPDX-License-Identifier: MIT */
/*
 * The configuration as C takes it (config_keys.h, tw_config_t): the validator's normalized JSON read once
 * into enums, sizes, the schedule and on_demand, so that the session and the writer never parse
 * configuration text again. The words of each choice and their enum values are in one table here.
 */
#include "config.h"
#include "config_typed.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "torchwrapper/config_keys.h"

#include "config_keys_internal.h"

typedef struct {
    const char *word;
    int value;
} choice_t;

static const choice_t format_choices[] = {{"json", TW_FORMAT_JSON}, {"csv", TW_FORMAT_CSV}, {NULL, 0}};
static const choice_t args_choices[] = {
    {"summary", TW_ARGS_SUMMARY}, {"none", TW_ARGS_NONE}, {"repr", TW_ARGS_REPR}, {NULL, 0}};
static const choice_t gpu_choices[] = {{"auto", TW_GPU_AUTO}, {"on", TW_GPU_ON}, {"off", TW_GPU_OFF}, {NULL, 0}};
static const choice_t sites_choices[] = {
    {"boundary", TW_SITES_BOUNDARY}, {"all", TW_SITES_ALL}, {"off", TW_SITES_OFF}, {NULL, 0}};
static const choice_t aten_choices[] = {
    {"off", TW_ATEN_OFF}, {"backward", TW_ATEN_BACKWARD}, {"all", TW_ATEN_ALL}, {NULL, 0}};
static const choice_t on_full_choices[] = {{"drop", 0}, {"wait", 1}, {NULL, 0}};
static const choice_t compress_choices[] = {
    {"none", TW_COMPRESS_NONE}, {"gzip", TW_COMPRESS_GZIP}, {NULL, 0}};
static const choice_t records_choices[] = {{"all", 0}, {"summary", 1}, {NULL, 0}};
static const choice_t detail_choices[] = {{"sampled", 0}, {"all", 1}, {NULL, 0}};

/* The value of a validated choice (the validator accepted nothing else: an unknown word is a bug in
 * the tables, and is -1). */
static int choice(const cJSON *root, const char *key, const choice_t *choices)
{
    const char *word = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, key));
    for (const choice_t *c = choices; word != NULL && c->word != NULL; c++)
        if (strcmp(c->word, word) == 0)
            return c->value;
    return -1;
}

static uint64_t number(const cJSON *root, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (item == NULL)
        return 0;
    if (cJSON_IsRaw(item)) /* sizes: exact integers */
        return strtoull(item->valuestring, NULL, 10);
    double v = cJSON_GetNumberValue(item);
    return v > 0 ? (uint64_t)v : 0;
}

/* A copy of a string value, or NULL (and *failed set when out of memory). */
static char *string(const cJSON *root, const char *key, int *failed)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, key));
    if (s == NULL)
        return NULL;
    char *copy = strdup(s);
    *failed |= copy == NULL;
    return copy;
}

/* Fills out from the normalized configuration (every key present, every value checked). */
static int typed(const cJSON *root, tw_config_t *out)
{
    memset(out, 0, sizeof *out);
    int failed = 0;
    out->out_dir = string(root, "out_dir", &failed);
    out->format = (tw_format_t)choice(root, "format", format_choices);
    out->compress = (tw_compress_t)choice(root, "compress", compress_choices);
    out->file_max_size = number(root, "file_max_size");
    out->file_name_spec = string(root, "file_name_spec", &failed);
    out->max_files = (unsigned)number(root, "max_files");
    out->max_total_size = number(root, "max_total_size");
    out->flush_interval_ns =
        (uint64_t)(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(root, "flush_interval")) * 1e9);
    out->buffer_bytes = number(root, "buffer_size");
    out->block_when_full = choice(root, "on_full", on_full_choices) == 1;
    out->args = (tw_args_mode_t)choice(root, "args", args_choices);
    out->gpu = (tw_gpu_mode_t)choice(root, "gpu", gpu_choices);
    out->summary_only = choice(root, "records", records_choices) == 1;
    out->sites = (tw_sites_mode_t)choice(root, "sites", sites_choices);
    out->aten = (tw_aten_mode_t)choice(root, "aten", aten_choices);
    out->flops = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "flops"));
    const cJSON *peak = cJSON_GetObjectItemCaseSensitive(root, "peak_flops");
    out->peak_flops = cJSON_IsNumber(peak) ? peak->valuedouble : 0;
    out->memory = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "memory"));
    out->detail_sampled = choice(root, "detail", detail_choices) == 0;
    char *schedule = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(root, "schedule"));
    failed |= schedule == NULL || tw_schedule_from_json(schedule, &out->schedule) != 0;
    free(schedule);
    const cJSON *on_demand = cJSON_GetObjectItemCaseSensitive(root, "on_demand");
    if (cJSON_IsObject(on_demand)) {
        out->on_demand_steps = number(on_demand, "steps");
        out->on_demand_dir = string(on_demand, "dir", &failed);
    }
    if (failed || (int)out->format < 0 || (int)out->compress < 0 || (int)out->args < 0 || (int)out->gpu < 0 ||
        (int)out->sites < 0 || (int)out->aten < 0) {
        tw_config_free(out);
        return TW_ENOMEM; /* (an unknown word cannot come out of the validator) */
    }
    return 0;
}

int tw_config_load(tw_config_defaults_t defaults, const char *json_in, int from_strings, tw_config_t *out,
                   char **json_out, char *err, size_t err_size)
{
    cJSON *tree;
    int rc = tw_config_normalize_tree(defaults, json_in, from_strings, &tree, err, err_size);
    if (rc != 0)
        return rc;
    rc = typed(tree, out); /* from the validator's tree: no text printed and parsed back */
    if (rc == 0 && json_out != NULL && (*json_out = cJSON_PrintUnformatted(tree)) == NULL) {
        tw_config_free(out);
        rc = TW_ENOMEM;
    }
    cJSON_Delete(tree);
    if (rc != 0)
        snprintf(err, err_size, "out of memory");
    return rc;
}

void tw_config_free(tw_config_t *config)
{
    free(config->out_dir);
    free(config->file_name_spec);
    free(config->on_demand_dir);
    config->out_dir = config->file_name_spec = config->on_demand_dir = NULL;
}

static tw_config_t defaults_of[TW_CONFIG_DEFAULTS_COUNT];
static int defaults_loaded[TW_CONFIG_DEFAULTS_COUNT];
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;

static void load_defaults(void)
{
    char err[256];
    /* The table of defaults passes its own validator (test_config checks it): only memory can fail. */
    for (int d = 0; d < TW_CONFIG_DEFAULTS_COUNT; d++)
        defaults_loaded[d] = tw_config_load((tw_config_defaults_t)d, "{}", 0, &defaults_of[d], NULL, err,
                                            sizeof err) == 0;
}

const tw_config_t *tw_config_defaults(tw_config_defaults_t defaults)
{
    pthread_once(&defaults_once, load_defaults);
    unsigned d = (unsigned)defaults < TW_CONFIG_DEFAULTS_COUNT ? defaults : 0;
    return defaults_loaded[d] ? &defaults_of[d] : NULL;
}
