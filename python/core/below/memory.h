/* SPDX-License-Identifier: MIT */
/* Memory per call (config memory): see memory.c. Called with the GIL held unless said. */
#ifndef TORCHWRAPPER_MEMORY_H
#define TORCHWRAPPER_MEMORY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#include "torchwrapper/recorder.h"

/* Loads the libtorch layer (layer_path NULL: not built) and puts the reporter on this thread, so
 * that the threads attached from now on count the allocator's reports. 0, or -1 with the reason in
 * why (one line for the user: another profiler holds the reports, the layer is missing, ...). */
int tw_memory_start(const char *layer_path, const char *torch_version, char *why, size_t why_size);

/* Ends measuring: threads attached later count nothing, the reporter is inert and off this thread.
 * 0, or -1 with what was left behind in note (the reporter could not be popped here). */
int tw_memory_stop(char *note, size_t note_size);

/* Whether a session measures memory now. */
int tw_memory_measuring(void);

/* Points t (attached on this thread, with the GIL or from a libtorch hook) at this OS thread's
 * counters while a session measures memory, else NULL. */
void tw_memory_attach(tw_thread_t *t);

/* memory_step_aside(), memory_resume(), memory_owner() and memory_counters() for the Python layer. */
int tw_memory_add_functions(PyObject *core);

#endif
