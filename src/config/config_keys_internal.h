/* SPDX-License-Identifier: MIT */
/* The validator's parts (config_keys.c) that the rest of the library shares (not public API): its
 * result as a tree, which config_keys.c prints for tw_config_normalize_for() and config_typed.c types
 * for tw_config_load(), built once for both; and file_max_size's check, the writer's too. */
#ifndef TW_CONFIG_KEYS_INTERNAL_H
#define TW_CONFIG_KEYS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "torchwrapper/config_keys.h"

/* tw_config_normalize_for() without the printing: *tree (cJSON_Delete() it) holds every key, checked
 * and with the defaults filled in. Returns 0, or TW_EINVAL / TW_ENOMEM with the message in err. */
int tw_config_normalize_tree(tw_config_defaults_t defaults, const char *json_in, int from_strings, cJSON **tree,
                             char *err, size_t err_size);

/* Checks file_max_size: 0, or TW_EINVAL with the message in err (the validator's and the writer's). */
int tw_config_check_file_max_size(uint64_t bytes, const char *given, char *err, size_t err_size);

#endif
