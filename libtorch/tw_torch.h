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

/*
 * FLOPs (tw_torch_flops.cpp): the formula a wrapped API takes, chosen once when its wrapper is made
 * (python/core/below/flops.c, by API name). Each counts what torch.utils.flop_counter.FlopCounterMode
 * counts for the aten operators the call dispatches to.
 */
typedef enum {
    TW_FLOPS_NONE = 0,
    TW_FLOPS_LINEAR,         /* linear(input, weight, bias) */
    TW_FLOPS_MATMUL,         /* matmul(input, other), Tensor.matmul, @ */
    TW_FLOPS_RMATMUL,        /* Tensor.__rmatmul__(self, other): matmul(other, self) */
    TW_FLOPS_MM,             /* mm(input, mat2) */
    TW_FLOPS_ADDMM,          /* addmm(input, mat1, mat2) */
    TW_FLOPS_BMM,            /* bmm(input, mat2) */
    TW_FLOPS_BADDBMM,        /* baddbmm(input, batch1, batch2) */
    TW_FLOPS_EINSUM,         /* einsum(equation, a, b): two operands */
    TW_FLOPS_CONV,           /* conv1d/2d/3d(input, weight, ...) */
    TW_FLOPS_CONV_TRANSPOSE, /* conv_transpose1d/2d/3d(input, weight, ...) */
    TW_FLOPS_SDPA,           /* scaled_dot_product_attention(query, key, value, ...) */
    TW_FLOPS_RNN,            /* gru, lstm, rnn_tanh, rnn_relu(input, hx, params, ...) or (data, batch_sizes, ...) */
    TW_FLOPS_RNN_CELL,       /* gru_cell, lstm_cell, rnn_tanh_cell, rnn_relu_cell(input, hx, w_ih, w_hh, ...) */
    TW_FLOPS_KINDS
} tw_flops_kind_t;

/* The backward FLOPs of one autograd node a call created, by its sequence number. */
typedef struct tw_torch_flops_node {
    uint64_t seq;
    uint64_t flops;
} tw_torch_flops_node_t;

/*
 * The forward FLOPs of a call of a kind's API that returned result (args, nargs, kwnames as the
 * wrapper got them; nargs without PY_VECTORCALL_ARGUMENTS_OFFSET). With seq_end > seq_begin (the
 * autograd sequence numbers of this thread before and after the call), also the backward FLOPs of
 * the compute nodes the call created (MmBackward0, ConvolutionBackward0, ...), found from result's
 * grad_fn (from each tensor of a tuple result): *nodes points to them, in the order of their
 * sequence numbers, in the layer's own array for this thread (valid until its next call on this
 * thread), and *n_nodes says how many (a handful; one per matrix product of a recurrent network's
 * steps). 0 for a call it cannot read (not tensors, symbolic sizes). Never raises; with the GIL
 * held.
 */
TW_TORCH_API uint64_t tw_torch_flops(int kind, struct _object *const *args, size_t nargs, struct _object *kwnames,
                                     struct _object *result, uint64_t seq_begin, uint64_t seq_end,
                                     const tw_torch_flops_node_t **nodes, unsigned *n_nodes);

/* The version of the table of entry points below (their names and signatures): the extension loads
 * a layer only when it is the one it was built with (python/core/below/layer.c). Raised at each change. */
#define TW_TORCH_LAYER_VERSION 3u
TW_TORCH_API unsigned tw_torch_layer_version(void);

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
 * python/core/below/backward.c). */
TW_TORCH_API void tw_torch_stop(void);

/* Whether libtorch calls the started callbacks (nonzero) or not, from now on: off removes them (a
 * disabled callback still costs torch a little on every thread switch, tw_torch.cpp), on adds them
 * again. For the steps without detail (config detail "sampled"). No-op when not started. */
TW_TORCH_API void tw_torch_observe(int on);

/* How many callbacks of this layer torch holds now (registered, not removed; at::hasGlobalCallbacks()
 * does not count disabled ones): what the tests check a step without detail and a stop leave. */
TW_TORCH_API int tw_torch_callbacks_held(void);

/* ---- memory (tw_torch_memory.cpp) ----------------------------------------------------------------
 * The allocators' own reports (c10::reportMemoryUsageToProfiler, what torch.profiler's profile_memory
 * takes): a reporter in this thread's c10::ThreadLocalDebugInfo slot PROFILER_STATE, which torch
 * copies into the threads that work for this one (autograd's engine threads). Functions other than
 * the report are called with the GIL held. */

/* A report, on the thread that allocated or freed, with or without the GIL: bytes > 0 allocated,
 * < 0 freed; total the allocator's allocated total for that device afterwards (the CPU allocator's
 * counts only the blocks it saw allocated while reports were on); device as c10::DeviceType and
 * index (-1: none). Must not call back into torch. */
typedef void (*tw_torch_memory_report_t)(int64_t bytes, uint64_t total, int device_type, int device_index);

enum {
    TW_TORCH_MEMORY_FREE = 0,  /* no profiler holds this thread's reports */
    TW_TORCH_MEMORY_OURS = 1,  /* our reporter, live */
    TW_TORCH_MEMORY_INERT = 2, /* our reporter of a stopped session, left in place (see stop) */
    TW_TORCH_MEMORY_OTHER = 3, /* another's: torch.profiler (profile_memory or not), emit_nvtx, ... */
};

/* Who holds this thread's reports (TW_TORCH_MEMORY_*). */
TW_TORCH_API int tw_torch_memory_owner(void);

/* Pushes a reporter on this thread that calls report (the same function at every start). 0; -EBUSY
 * when another profiler holds the slot on this thread (or a session already measures); -ENOMEM.
 * While it is live, c10's log threshold is raised from WARNING to ERROR (see the .cpp: the CPU
 * allocator's warning about blocks allocated before the start). */
TW_TORCH_API int tw_torch_memory_start(tw_torch_memory_report_t report);

/* Takes the reporter off this thread while another profiler starts here (then starting it does not
 * fail with "Profiler is already enabled on this thread"): 0, or -ESRCH when it is not on top here. */
TW_TORCH_API int tw_torch_memory_step_aside(void);

/* Puts it back on this thread once the other profiler left: 0; -ESRCH when stopped; -EBUSY when
 * the slot is held. */
TW_TORCH_API int tw_torch_memory_resume(void);

/* Makes the reporter inert (no report from now on, on any thread) and, with pushed_here nonzero (it
 * was not stepped aside), pops it from this thread: 0; -EBUSY when it is not on top of this thread's
 * state (stop on another thread than start, or another profiler above it): then it stays there,
 * inert, until the next start on that thread pops it. */
TW_TORCH_API int tw_torch_memory_stop(int pushed_here);

#ifdef __cplusplus
}
#endif
#endif
