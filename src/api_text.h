/* SPDX-License-Identifier: MIT */
/*
 * An interned API name as records write it (not public API): the name, its JSON string and its CSV
 * field, rendered once by the name table (api.c) and copied by the writer (format.c).
 */
#ifndef TW_API_TEXT_H
#define TW_API_TEXT_H

#include <stdint.h>

typedef struct {
    const char *name;  /* NUL-terminated */
    uint32_t len;      /* strlen(name) */
    const char *json;  /* the JSON string, quotes included (not NUL-terminated) */
    uint32_t json_len;
    const char *csv;   /* the CSV field: as is, or quoted (RFC 4180); not NUL-terminated */
    uint32_t csv_len;
} tw_api_text_t;

/* Each rendering (json, csv) is followed by at least this many readable bytes, its allocation's or a
 * static's: the writer copies that many at once, a few moves instead of a call to memcpy for a length
 * it does not know (format.c put_text; most API names are shorter). */
#define TW_API_TEXT_PAD 32

/* id's name and renderings, or NULL for an id never interned. Lock-free; thread-safe. */
const tw_api_text_t *tw_api_text(uint32_t id);

/* A record's module path as written (recorder.c, beside tw_module_path, which reads its name): NULL
 * for no module (TW_MODULE_NONE), the root's "" (quoted in CSV too, to tell it from no module). */
const tw_api_text_t *tw_module_text(uint32_t module_id);

#endif
