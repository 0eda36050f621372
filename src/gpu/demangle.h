/* SPDX-License-Identifier: MIT */
/* C++ symbol names (kernels' names as CUPTI gives them) made readable: see demangle.c. */
#ifndef TW_DEMANGLE_H
#define TW_DEMANGLE_H

#include <stddef.h>

/* Writes the demangled form of name (an Itanium C++ ABI name, "_Z...") into out (size bytes, always
 * terminated; cut at size - 1) and returns 1; returns 0 and writes nothing when name is not a mangled
 * name or cannot be demangled here. Thread-safe. */
int tw_demangle(const char *name, char *out, size_t size);

#endif
