/* SPDX-License-Identifier: MIT */
/* The validator's result as a tree (not public API): what config_keys.c prints for
 * tw_config_normalize_for() and config_typed.c types for tw_config_load(), built once for both. */
#ifndef TW_CONFIG_TREE_H
#define TW_CONFIG_TREE_H

#include <cjson/cJSON.h>

#include "torchwrapper/config_keys.h"

/* tw_config_normalize_for() without the printing: *tree (cJSON_Delete() it) holds every key, checked
 * and with the defaults filled in. Returns 0, or TW_EINVAL / TW_ENOMEM with the message in err. */
int tw_config_normalize_tree(tw_config_defaults_t defaults, const char *json_in, int from_strings, cJSON **tree,
                             char *err, size_t err_size);

#endif
