/* SPDX-License-Identifier: MIT */
/* Argument summaries (args.c; not public API), written by the wrappers before a recorded call. */
#ifndef TW_PY_ARGS_H
#define TW_PY_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/config_keys.h"

/* Once, when the extension is executed: the attribute names summaries look up, interned, and the
 * wrappers' vectorcall entry (wrapper.c's), which tells a wrapper among the arguments. 0, or -1 with
 * an exception. */
int tw_args_init(vectorcallfunc wrapper_entry);

/* Writes a summary of a call's arguments (summary or repr mode) into buf; returns its length. */
uint32_t tw_summarize_args(char *buf, size_t size, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                           tw_args_mode_t mode);

#endif
