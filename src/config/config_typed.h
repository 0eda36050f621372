/* SPDX-License-Identifier: MIT */
/* The configuration typed (config_typed.c): what the library shares of it beyond the public
 * tw_config_load() (not public API). */
#ifndef TW_CONFIG_TYPED_H
#define TW_CONFIG_TYPED_H

#include "torchwrapper/config_keys.h"

/* An entry point's defaults, typed (static; every call gives the same values), or NULL when there
 * was no memory to make them at the first call. */
const tw_config_t *tw_config_defaults(tw_config_defaults_t defaults);

#endif
