/* SPDX-License-Identifier: MIT */
/* A sites file read back (reader.h, tw_sites_read_json): the readers' one parser of sites.json, for
 * tw-report and torchwrapper.load_sites(). The writer writes it (write/manifest.c). */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "torchwrapper/reader.h"

/* The whole of a small file (a sites file: at most cap sites of 3 KiB), NUL-terminated; NULL with
 * errno set. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t capacity = 1 << 16, n = 0;
    char *text = malloc(capacity);
    while (text != NULL) {
        n += fread(text + n, 1, capacity - 1 - n, f);
        if (n < capacity - 1)
            break;
        char *bigger = realloc(text, capacity * 2);
        if (bigger == NULL) {
            free(text);
            text = NULL;
            errno = ENOMEM;
            break;
        }
        text = bigger;
        capacity *= 2;
    }
    if (text != NULL && ferror(f)) {
        free(text);
        text = NULL;
        errno = EIO;
    }
    fclose(f);
    if (text != NULL) {
        text[n] = '\0';
        *len = n;
    }
    return text;
}

int tw_sites_read_json(const char *path, tw_site_fn fn, void *ctx, int64_t *pid, char *err, size_t err_size)
{
    *pid = -1;
    size_t len = 0;
    char *text = slurp(path, &len);
    if (text == NULL) {
        int saved = errno;
        snprintf(err, err_size, "cannot read the sites file %s: %s", path, strerror(saved));
        errno = saved;
        return saved == ENOMEM ? TW_ENOMEM : TW_EIO;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *sites = cJSON_GetObjectItemCaseSensitive(root, "sites");
    if (!cJSON_IsObject(root) || (sites != NULL && !cJSON_IsObject(sites))) {
        snprintf(err, err_size, "%s is not a TorchWrapper sites file: not a JSON object with an object \"sites\"", path);
        cJSON_Delete(root);
        return TW_EINVAL;
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pid");
    if (cJSON_IsNumber(p))
        *pid = (int64_t)p->valuedouble;
    const cJSON *site;
    int rc = 0;
    cJSON_ArrayForEach(site, sites)
    {
        char *end;
        errno = 0;
        unsigned long long id = strtoull(site->string, &end, 10);
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(site, "file");
        const cJSON *line = cJSON_GetObjectItemCaseSensitive(site, "line");
        const cJSON *function = cJSON_GetObjectItemCaseSensitive(site, "function");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(site, "text");
        if (*site->string == '\0' || *end != '\0' || errno != 0 || id > UINT32_MAX || !cJSON_IsString(file) ||
            !cJSON_IsNumber(line) || line->valuedouble < 0 || line->valuedouble > UINT32_MAX ||
            !cJSON_IsString(function) || !cJSON_IsString(t)) {
            snprintf(err, err_size, "%s: site '%.40s' is not {\"file\": text, \"line\": number, \"function\": text, "
                     "\"text\": text}", path, site->string);
            rc = TW_EINVAL;
            break;
        }
        if ((rc = fn(ctx, (uint32_t)id, file->valuestring, (uint32_t)line->valuedouble, function->valuestring,
                     t->valuestring)) != 0)
            break;
    }
    cJSON_Delete(root);
    return rc;
}
