/* SPDX-License-Identifier: MIT */
/* The library's fork handlers, run in one explicit order (atfork.h). */
#include "config.h"
#include "atfork.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct {
    void (*prepare)(void);
    void (*parent)(void);
    void (*child)(void);
} handlers_t;

/* Written once per slot under slots_lock, before `registered` is set; read by the handlers. */
static handlers_t slots[TW_ATFORK_SLOTS];
static _Atomic int registered[TW_ATFORK_SLOTS];
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void run_prepare(void)
{
    for (int i = 0; i < TW_ATFORK_SLOTS; i++)
        if (atomic_load(&registered[i]) && slots[i].prepare != NULL)
            slots[i].prepare();
}

static void run_parent(void)
{
    for (int i = TW_ATFORK_SLOTS - 1; i >= 0; i--)
        if (atomic_load(&registered[i]) && slots[i].parent != NULL)
            slots[i].parent();
}

static void run_child(void)
{
    for (int i = TW_ATFORK_SLOTS - 1; i >= 0; i--)
        if (atomic_load(&registered[i]) && slots[i].child != NULL)
            slots[i].child();
}

static void install(void)
{
    pthread_atfork(run_prepare, run_parent, run_child);
}

void tw_atfork_register(tw_atfork_slot_t slot, void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    if ((unsigned)slot >= TW_ATFORK_SLOTS)
        return;
    pthread_once(&once, install);
    pthread_mutex_lock(&slots_lock);
    if (!atomic_load(&registered[slot])) {
        slots[slot] = (handlers_t){prepare, parent, child};
        atomic_store(&registered[slot], 1);
    }
    pthread_mutex_unlock(&slots_lock);
}
