/* SPDX-License-Identifier: MIT */
/*
 * The process-wide table of API names ("torch.add", "torch.Tensor.__add__"). Records carry a
 * 32-bit API id instead of a string; the writer turns ids back into names without any lock and
 * without Python. Names are interned once and live until the process exits (there are a few
 * thousand of them), so a wrapper's id stays valid across profiling sessions.
 */
#ifndef TORCHWRAPPER_API_H
#define TORCHWRAPPER_API_H

#include "torchwrapper/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TW_API_ID_NONE UINT32_MAX
#define TW_API_NAME_MAX 1024 /* bytes, without the NUL */

/*
 * Returns the id of name (interning it on first use) in *id, and 0; TW_EINVAL for NULL, an empty
 * name or one longer than TW_API_NAME_MAX; TW_ENOMEM; TW_EFULL past 2^20 distinct names.
 * Thread-safe.
 */
TW_API int tw_api_intern(const char *name, uint32_t *id);

/* The name of id, or NULL for an id never returned by tw_api_intern. Lock-free; thread-safe. */
TW_API const char *tw_api_name(uint32_t id);

/* How many distinct names are interned. */
TW_API uint32_t tw_api_count(void);

#ifdef __cplusplus
}
#endif
#endif
