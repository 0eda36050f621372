/* SPDX-License-Identifier: MIT */
/* Session's arguments (session_config.c; not public API): its config keywords through the library's
 * validator, and the copies of its arguments that outlive the Python objects. */
#ifndef TW_PY_SESSION_CONFIG_H
#define TW_PY_SESSION_CONFIG_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "torchwrapper/config_keys.h"

/* The config keys Session takes as keyword arguments, in its keyword order. */
#define TW_SESSION_CONFIG_KEYWORDS 21
extern const char *const tw_session_config_keywords[TW_SESSION_CONFIG_KEYWORDS];

/* The given config arguments (values[i] for tw_session_config_keywords[i], NULL when not given)
 * through the library's validator with a bare Session's defaults, typed into *out (tw_config_free()
 * it). Returns 0, or -1 with ValueError naming the key, the value and what is accepted. */
int tw_session_config(PyObject *const *values, tw_config_t *out);

/* Copies that outlive the Python objects (PyMem_Raw; NULL with MemoryError). */
char *tw_dup_cstr(const char *s);
char *tw_dup_utf8(PyObject *text);

/* cupti_paths (a sequence of str) as a NULL-terminated array (PyMem_Raw), or NULL with an exception;
 * freed by tw_free_paths. */
char **tw_cupti_paths_of(PyObject *paths);
void tw_free_paths(char **paths);

#endif
