/* SPDX-License-Identifier: MIT */
/* The config validator's check of "schedule" (not public API: config_keys.c calls it). */
#ifndef TW_SCHEDULE_CHECK_H
#define TW_SCHEDULE_CHECK_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Checks a "schedule" value: null, or an object of skip_first, wait, warmup, active (>= 1), repeat
 * (whole numbers) and summary ("all" or "active"); with from_strings, JSON text of one. Returns the
 * normalized value (null, or the complete object), or NULL with a message naming the key, the value
 * and what is accepted in err. */
cJSON *tw_schedule_check(const cJSON *value, int from_strings, char *err, size_t err_size);

#endif
