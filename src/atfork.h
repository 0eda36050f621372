/* SPDX-License-Identifier: MIT */
/*
 * The library's fork handlers in one registry (not public API), in one explicit order instead of the
 * order in which pthread_atfork() happened to be called first by each part.
 *
 * Before fork(), the prepare handlers run in slot order, which is the library's lock order: the
 * recorder registry, then the queues (each queue, its consumer the writer, its streams, then the
 * chunk pool), then the call-site tables. After fork(), the parent and child handlers run in the
 * reverse order, so that each part releases what it took after the parts it nests in (the queues'
 * child handler drops their chunks before the recorders' drops the threads' partial ones). The
 * extension's parts (GPU timing, backward nodes) take no lock: their child handlers forget what a
 * forked child must not use, first.
 */
#ifndef TW_ATFORK_H
#define TW_ATFORK_H

typedef enum {
    TW_ATFORK_RECORDERS = 0, /* recorder.c */
    TW_ATFORK_QUEUES,        /* queue.c, and through it each queue's consumer (writer.c) */
    TW_ATFORK_SITES,         /* sites.c */
    TW_ATFORK_GPU,           /* the extension's GPU session (python/core/session/session.c) */
    TW_ATFORK_BACKWARD,      /* the extension's backward nodes (python/core/below/backward.c) */
    TW_ATFORK_SLOTS
} tw_atfork_slot_t;

/* Registers one part's handlers in its slot (once; a second registration of a slot is ignored).
 * Any handler may be NULL. Thread-safe. */
void tw_atfork_register(tw_atfork_slot_t slot, void (*prepare)(void), void (*parent)(void), void (*child)(void));

#endif
