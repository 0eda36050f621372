/* SPDX-License-Identifier: MIT */
/*
 * Kernel names as CUPTI gives them are mangled C++ names ("_ZN2at6native29vectorized_elementwise_
 * kernelILi4E..."); torch.profiler shows them demangled ("void at::native::vectorized_elementwise_
 * kernel<4, ...>(...)"), and so do we, so that the two can be read side by side.
 *
 * The demangler is libstdc++'s __cxa_demangle, found at run time: this library is C and links no C++
 * runtime. It is not always in the global scope: Python loads torch's extension modules with
 * RTLD_LOCAL, so the libstdc++ they bring in is invisible to dlsym(RTLD_DEFAULT) (what happened on an
 * H200 with torch 2.11: every kernel name stayed mangled). So libstdc++ is looked up by soname too.
 *
 * Demangling costs microseconds and a training step launches the same few hundred kernels again and
 * again: results are kept in a small table keyed by the mangled name.
 */
#include "config.h"
#include "demangle.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

#define CACHE_SLOTS 512 /* a power of two */

typedef struct {
    char *mangled;   /* NULL: empty */
    char *demangled; /* NULL: cannot be demangled */
} cache_slot_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cache_slot_t cache[CACHE_SLOTS];
static demangle_fn demangler;
static int looked_up;

static demangle_fn find_demangler(void)
{
    if (!looked_up) {
        looked_up = 1;
        demangler = (demangle_fn)(void (*)(void))dlsym(RTLD_DEFAULT, "__cxa_demangle");
        if (demangler == NULL) {
            /* loaded RTLD_LOCAL by a library that needs it (torch), or not loaded: the handle keeps
             * it for the process, which is what it would be anyway in a torch process */
            void *h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
            if (h == NULL)
                h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
            if (h != NULL)
                demangler = (demangle_fn)(void (*)(void))dlsym(h, "__cxa_demangle");
        }
    }
    return demangler;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void copy_out(const char *text, char *out, size_t size)
{
    size_t n = strlen(text);
    if (n >= size)
        n = size - 1;
    memcpy(out, text, n);
    out[n] = '\0';
}

int tw_demangle(const char *name, char *out, size_t size)
{
    if (name == NULL || name[0] != '_' || name[1] != 'Z' || size == 0)
        return 0;
    pthread_mutex_lock(&lock);
    cache_slot_t *slot = &cache[hash_name(name) & (CACHE_SLOTS - 1)];
    if (slot->mangled == NULL || strcmp(slot->mangled, name) != 0) {
        demangle_fn fn = find_demangler();
        int status = -1;
        char *text = fn != NULL ? fn(name, NULL, NULL, &status) : NULL;
        if (status != 0) {
            free(text);
            text = NULL;
        }
        char *key = strdup(name);
        if (key == NULL) { /* out of memory: no cache, this name only */
            int ok = text != NULL;
            if (ok)
                copy_out(text, out, size);
            free(text);
            pthread_mutex_unlock(&lock);
            return ok;
        }
        free(slot->mangled);
        free(slot->demangled);
        slot->mangled = key;
        slot->demangled = text;
    }
    int ok = slot->demangled != NULL;
    if (ok)
        copy_out(slot->demangled, out, size);
    pthread_mutex_unlock(&lock);
    return ok;
}
