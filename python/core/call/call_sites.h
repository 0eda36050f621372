/* SPDX-License-Identifier: MIT */
/* Call sites of recorded calls (not public API): the per-session cache and its lookups (call_sites.c). */
#ifndef TW_PY_CALL_SITES_H
#define TW_PY_CALL_SITES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "torchwrapper/torchwrapper.h"

#include "active.h"
#include "frame_mirror.h"

/* ---- call sites (call_sites.c) ---- */

extern int tw_site_frames_fast; /* the frame mirror (frame_mirror.h) is used (checked by tw_sites_begin) */

/*
 * The session's cache of call sites by (code object, instruction offset): one probe per call. A
 * code object is a key only while the cache holds a reference to it (its entry with lasti
 * TW_SITE_CODE_ENTRY, made first), so an address cannot be reused under a key. Guarded by the GIL.
 */
#define TW_SITE_CODE_ENTRY UINT32_MAX
#define TW_SITE_IN_TORCH 0x80000000u /* value flag: the caller is no site (torch's own code in "boundary"
                                      * mode, the profiler's own code in every mode) */
#define TW_SITE_PROFILER 0x40000000u /* code entry flag: the code is this package's */

typedef struct {
    uintptr_t code;  /* 0: empty */
    uint32_t lasti;  /* the caller's instruction offset, or TW_SITE_CODE_ENTRY */
    uint32_t value;  /* a site id, or TW_SITE_IN_TORCH; a code entry: TW_SITE_IN_TORCH or 0 */
} tw_site_slot_t;

typedef struct {
    tw_site_slot_t *slots;
    size_t mask;     /* capacity - 1, or 0 with slots NULL */
    size_t used;
} tw_site_cache_t;

extern tw_site_cache_t tw_site_cache;

static inline size_t tw_site_hash(uintptr_t code, uint32_t lasti)
{
    return (size_t)(((code >> 4) ^ ((uint64_t)lasti << 24)) * 0x9E3779B97F4A7C15ull >> 29);
}

/* Slow paths of tw_caller_site (a key's first call, and an outermost call made from torch's code). */
uint32_t tw_site_miss(PyCodeObject *code, int lasti);
uint32_t tw_site_outside_torch(PyFrameObject *frame);

/* Starts (mode != OFF) or ends the sites of the active session: the cache, the torch directory. 0, or
 * -1 with an exception. */
int tw_sites_begin(tw_sites_mode_t mode, tw_sites_t *sites);
void tw_sites_end(void);


/* The cached value of (code, lasti), or the slow path's. */
static inline uint32_t tw_site_value(PyCodeObject *code, int lasti)
{
    size_t mask = tw_site_cache.mask;
    if (mask != 0) {
        for (size_t i = tw_site_hash((uintptr_t)code, (uint32_t)lasti) & mask;; i = (i + 1) & mask) {
            const tw_site_slot_t *slot = &tw_site_cache.slots[i];
            if (slot->code == (uintptr_t)code && slot->lasti == (uint32_t)lasti)
                return slot->value;
            if (slot->code == 0)
                break;
        }
    }
    return tw_site_miss(code, lasti);
}

uint32_t tw_caller_site_public(int outermost);
#ifdef TW_SITE_FRAME_MIRROR
uint32_t tw_site_outside_torch_fast(const tw_iframe_t *frame);
#endif

/*
 * The site of the call the current Python frame is making (sites.h ids): the caller's (code,
 * offset) looked up in the cache. A caller that is no site (torch's own code in "boundary" mode, the
 * profiler's shims) gives TW_SITE_NONE, unless walk is set: then the nearest frame outside torch and
 * the profiler. tstate: the calling thread's state. Never raises.
 */
static inline uint32_t tw_caller_site_in(PyThreadState *tstate, int outermost)
{
#ifdef TW_SITE_FRAME_MIRROR
    if (TW_LIKELY(tw_site_frames_fast)) {
        const tw_iframe_t *frame = tw_iframe_of(tstate);
        if (frame == NULL)
            return TW_SITE_NONE;
        if (TW_UNLIKELY(tw_iframe_incomplete(frame)))
            return tw_caller_site_public(outermost);
        uint32_t value = tw_site_value(frame->f_code, tw_iframe_lasti(frame));
        if (TW_UNLIKELY(value & TW_SITE_IN_TORCH))
            return outermost ? tw_site_outside_torch_fast(frame) : TW_SITE_NONE;
        if (TW_UNLIKELY(value == tw_active.sites_overflow_id) && value != TW_SITE_NONE)
            tw_sites_note_overflow(tw_active.sites, 1);
        return value;
    }
#endif
    (void)tstate;
    return tw_caller_site_public(outermost);
}

/* The same for the calling thread, where its thread state is not at hand. */
static inline uint32_t tw_caller_site(int outermost)
{
    return tw_caller_site_in(_PyThreadState_UncheckedGet(), outermost);
}

#endif
