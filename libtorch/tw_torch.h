/* SPDX-License-Identifier: MIT */
/*
 * The libtorch layer: what torchwrapper sees below torch's Python surface, through libtorch's C++
 * API (at::RecordFunction callbacks), behind C functions. Built against the headers of the torch
 * found at configure time into a shared object of its own (torchwrapper/_torch.so), which the
 * extension loads with dlopen only after checking that the running torch is that one
 * (tw_torch_built_with()), so that another torch is refused with one line and nothing else breaks.
 *
 * Threading: the hooks run on whatever thread runs an operator or an autograd node, with or without
 * the GIL (autograd's device threads never hold it). They must not touch Python objects.
 */
#ifndef TORCHWRAPPER_TORCH_LAYER_H
#define TORCHWRAPPER_TORCH_LAYER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The layer is compiled with hidden visibility: these are its only exported symbols. */
#define TW_TORCH_API __attribute__((visibility("default")))

typedef struct tw_torch_hooks {
    /* An autograd node starts on this thread: its name (AddmmBackward0; valid during the call), the
     * sequence number of the forward operator that created it (-1: none, as AccumulateGrad) and
     * torch's id of the thread that ran that operator. */
    void (*node_begin)(const char *name, int64_t seq, uint64_t forward_thread);
    /* The node begun last on this thread ends. */
    void (*node_end)(void);
    /* An operator starts on this thread (aten::mm; valid during the call): only when started with
     * operators (config aten "all"). */
    void (*op_begin)(const char *name);
    /* The operator begun last on this thread ends. */
    void (*op_end)(void);
} tw_torch_hooks_t;

/* This thread's autograd sequence number: the one the next node created here will carry
 * (at::sequence_number::peek; a thread-local counter, so nodes created between two reads have the
 * numbers in between). */
TW_TORCH_API uint64_t tw_torch_sequence_peek(void);

/* torch's id of this thread, as backward nodes name the thread that created them
 * (RecordFunction::currentThreadId). */
TW_TORCH_API uint64_t tw_torch_thread_id(void);

/* The argument summary of a tensor (an instance of torch.Tensor or a subclass: a THPVariable), as
 * the extension's Python path writes it from torch's getters ("f32[4,8]@cpu", "bf16[2]@cuda:0"),
 * into out (size bytes, no NUL; it may write bytes past the text's end, never past size). Returns the
 * length; -2 when it is longer than size (nothing meaningful written); -1 when the Python path must
 * do it (a dtype without a short name, symbolic or nested sizes). Never raises; with the GIL held
 * (it keeps a cache of device names). */
struct _object;
TW_TORCH_API int tw_torch_tensor_summary(struct _object *tensor, char *out, size_t size);

/* The torch version the layer was compiled against ("2.13.0+cpu"), as torch.__version__ says it. */
TW_TORCH_API const char *tw_torch_built_with(void);

/* Registers the callbacks (global: every thread): autograd nodes, and with operators nonzero every
 * operator too (a FUNCTION-scope callback: torch then builds a RecordFunction for each operator, which
 * costs about 1 us an operator). hooks must stay valid for the life of the process (a node begun
 * before a stop ends after it), and be the same at every start. Returns 0, or -EBUSY when already
 * started (or with other hooks), or -ENOMEM. */
TW_TORCH_API int tw_torch_start(const tw_torch_hooks_t *hooks, int operators);

/* Removes the callbacks. A hook already running on another thread may still run after this returns
 * (an end callback of a node begun before): the caller makes its hooks inert before (see
 * python/core/backward.c). */
TW_TORCH_API void tw_torch_stop(void);

#ifdef __cplusplus
}
#endif
#endif
