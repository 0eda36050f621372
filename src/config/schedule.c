/* SPDX-License-Identifier: MIT */
/* The schedule of recorded steps (torch.profiler.schedule's meaning) and its config check. See
 * schedule.h. */
#include "config.h"
#include "torchwrapper/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_check.h"

tw_step_state_t tw_schedule_state(const tw_schedule_t *s, uint64_t step)
{
    if (s == NULL || !s->enabled)
        return TW_STEP_ACTIVE;
    if (step < s->skip_first)
        return TW_STEP_IDLE;
    step -= s->skip_first;
    uint64_t cycle = (uint64_t)s->wait + s->warmup + s->active;
    if (cycle == 0 || (s->repeat > 0 && step / cycle >= s->repeat))
        return TW_STEP_IDLE;
    uint64_t at = step % cycle;
    if (at < s->wait)
        return TW_STEP_IDLE;
    return at < (uint64_t)s->wait + s->warmup ? TW_STEP_WARMUP : TW_STEP_ACTIVE;
}

unsigned tw_schedule_keeps(const tw_schedule_t *s, int summary_only, uint64_t step)
{
    int active = tw_schedule_state(s, step) == TW_STEP_ACTIVE;
    unsigned keep = active && !summary_only ? TW_KEEP_RECORD : 0;
    if (active || s == NULL || !s->summary_active)
        keep |= TW_KEEP_SUMMARY;
    return keep;
}

#define SCHEDULE_KEYS "skip_first, wait, warmup, active, repeat, summary"
static const char *const count_keys[] = {"skip_first", "wait", "warmup", "active", "repeat"};
#define COUNT_KEYS 5

int tw_schedule_from_json(const char *json, tw_schedule_t *out)
{
    memset(out, 0, sizeof *out);
    cJSON *v = cJSON_Parse(json != NULL ? json : "null");
    int rc = v != NULL && (cJSON_IsNull(v) || cJSON_IsObject(v)) ? 0 : TW_EINVAL;
    if (rc == 0 && cJSON_IsObject(v)) {
        uint32_t *fields[COUNT_KEYS] = {&out->skip_first, &out->wait, &out->warmup, &out->active, &out->repeat};
        for (int i = 0; i < COUNT_KEYS; i++) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, count_keys[i]);
            if (!cJSON_IsNumber(n) || n->valuedouble < 0 || n->valuedouble > 4294967295.0)
                rc = TW_EINVAL;
            else
                *fields[i] = (uint32_t)n->valuedouble;
        }
        const cJSON *summary = cJSON_GetObjectItemCaseSensitive(v, "summary");
        out->summary_active = cJSON_IsString(summary) && strcmp(summary->valuestring, "active") == 0;
        out->enabled = rc == 0 && out->active > 0;
        if (out->active == 0)
            rc = TW_EINVAL;
    }
    cJSON_Delete(v);
    return rc;
}

/* A whole number of steps: a JSON number, or (from_strings) its text. -1 when it is not one. */
static double steps_of(const cJSON *n, int from_strings)
{
    double v = -1;
    if (cJSON_IsNumber(n)) {
        v = n->valuedouble;
    } else if (from_strings && cJSON_IsString(n)) {
        char *end;
        v = strtod(n->valuestring, &end);
        if (end == n->valuestring || *end != '\0')
            return -1;
    }
    return v >= 0 && v <= 4294967295.0 && v == (double)(uint64_t)v ? v : -1;
}

cJSON *tw_schedule_check(const cJSON *value, int from_strings, char *err, size_t err_size)
{
    cJSON *parsed = NULL, *out = NULL;
    char given[160];
    char *text = cJSON_PrintUnformatted(value);
    snprintf(given, sizeof given, "%s", text != NULL ? text : "?");
    free(text);
    if (from_strings && cJSON_IsString(value)) /* an environment variable: JSON text */
        value = parsed = cJSON_Parse(value->valuestring);
    if (value != NULL && cJSON_IsNull(value)) {
        out = cJSON_CreateNull();
        goto done;
    }
    if (!cJSON_IsObject(value)) {
        snprintf(err, err_size, "config key 'schedule': %s is not accepted: give null (every step recorded) or an "
                                "object with keys " SCHEDULE_KEYS ", e.g. {\"wait\": 5, \"warmup\": 2, \"active\": 3, "
                                "\"repeat\": 2}", given);
        goto done;
    }
    const cJSON *entry;
    cJSON_ArrayForEach(entry, value)
    {
        int known = strcmp(entry->string, "summary") == 0;
        for (int i = 0; i < COUNT_KEYS && !known; i++)
            known = strcmp(entry->string, count_keys[i]) == 0;
        if (!known) {
            snprintf(err, err_size, "config key 'schedule': unknown key '%s' (accepted: " SCHEDULE_KEYS ")",
                     entry->string);
            goto done;
        }
    }
    out = cJSON_CreateObject();
    for (int i = 0; i < COUNT_KEYS; i++) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(value, count_keys[i]);
        int is_active = strcmp(count_keys[i], "active") == 0;
        double v = n != NULL ? steps_of(n, from_strings) : is_active ? -2 : 0;
        if (v == -2 || v < 0 || (is_active && v < 1)) {
            char bad[64] = "nothing";
            char *t = n != NULL ? cJSON_PrintUnformatted(n) : NULL;
            if (t != NULL)
                snprintf(bad, sizeof bad, "%s", t);
            free(t);
            snprintf(err, err_size, "config key 'schedule', key '%s': %s is not accepted: give a whole number of "
                                    "steps, %s", count_keys[i], bad,
                     is_active ? "1 or more (the steps recorded in each cycle)"
                     : strcmp(count_keys[i], "repeat") == 0 ? "0 or more (0: cycles without end)" : "0 or more");
            cJSON_Delete(out);
            out = NULL;
            goto done;
        }
        char number[24];
        snprintf(number, sizeof number, "%llu", (unsigned long long)v);
        cJSON_AddItemToObject(out, count_keys[i], cJSON_CreateRaw(number));
    }
    const cJSON *summary = cJSON_GetObjectItemCaseSensitive(value, "summary");
    if (summary != NULL && !(cJSON_IsString(summary) && (strcmp(summary->valuestring, "all") == 0 ||
                                                         strcmp(summary->valuestring, "active") == 0))) {
        char *t = cJSON_PrintUnformatted(summary);
        snprintf(err, err_size, "config key 'schedule', key 'summary': %s is not accepted: give \"all\" (summary.json "
                                "counts every call) or \"active\" (the calls of active steps only)", t ? t : "?");
        free(t);
        cJSON_Delete(out);
        out = NULL;
        goto done;
    }
    cJSON_AddItemToObject(out, "summary", cJSON_CreateString(summary != NULL ? summary->valuestring : "all"));
done:
    cJSON_Delete(parsed);
    return out;
}
