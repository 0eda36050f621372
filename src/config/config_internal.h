/* SPDX-License-Identifier: MIT */
/* The configuration's parts the writer shares with the validator (config_keys.c; not public API). */
#ifndef TW_CONFIG_INTERNAL_H
#define TW_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/config_keys.h"

/* An entry point's defaults, typed (static; every call gives the same values), or NULL when there
 * was no memory to make them at the first call. */
const tw_config_t *tw_config_defaults(tw_config_defaults_t defaults);

/* Checks file_max_size: 0, or TW_EINVAL with the message in err (the validator's and the writer's). */
int tw_config_check_file_max_size(uint64_t bytes, const char *given, char *err, size_t err_size);

#endif
