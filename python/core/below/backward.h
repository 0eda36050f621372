/* SPDX-License-Identifier: MIT */
/* Backward nodes as records: see backward.c. Called with the GIL held. */
#ifndef TORCHWRAPPER_BACKWARD_H
#define TORCHWRAPPER_BACKWARD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/clock.h"
#include "torchwrapper/gpu.h"
#include "torchwrapper/recorder.h"

#include "libtorch/tw_torch.h"

/* Loads the libtorch layer (layer.h; layer_path NULL: not built) and starts: backward nodes go to
 * recorder from now on (gen: the session's generation, not 0), and with operators nonzero every
 * operator too (config aten "all"); with gpu (CUPTI's hooks while GPU timing is on, else NULL), the
 * kernels a node launches are attributed to its record. 0, or -1 with the reason in why. */
int tw_backward_session_start(const char *layer_path, const char *torch_version, tw_recorder_t *recorder,
                              tw_clock_source_t clock, const tw_gpu_hooks_t *gpu, uint64_t gen, int operators,
                              char *why, size_t why_size);

/* The current step's detail (config detail "sampled", active.c): without it, libtorch stops calling
 * the hooks (no node is recorded, and torch makes no RecordFunction for one); with the GIL held. */
void tw_backward_set_detail(int on);

/* The node hooks' own cost in session gen (the profiler's own cost): the nodes recorded, and the ticks
 * of the hooks' own work measured around one node in 64 (samples of them). Read after
 * tw_backward_stop(), when no hook runs. */
typedef struct {
    uint64_t nodes;
    uint64_t samples;
    uint64_t ticks;
    uint64_t outliers; /* measured nodes whose hooks took longer than the bound: left out */
} tw_backward_own_t;
void tw_backward_own_cost(uint64_t gen, tw_backward_own_t *out);

/* Measured nodes whose hooks take longer than max_ticks are outliers (a preempted thread); set before
 * a session records (own_cost.h's TW_OWN_SAMPLE_MAX_NS). */
void tw_backward_own_bound(uint64_t max_ticks);

/* Ends recording: when it returns, no hook touches the recorder; the callbacks are removed from
 * libtorch. Returns the nodes whose forward call was not found (overwritten in its ring). */
uint64_t tw_backward_stop(void);

/* Whether the current step records nothing (tw_active.idle, mirrored for threads without the GIL):
 * then no node is recorded either. */
void tw_backward_set_idle(int idle);

/* The wrappers' side of the links (GIL held; only while tw_active.seq_peek is set, to the layer's
 * sequence number reader that tw_backward_peek_function() gives): seq_peek() when a call begins,
 * into frame->seq_begin; tw_backward_link_call() when it ends, before its record is appended: the
 * nodes created during the call are noted as its own, those in flops (n_flops of them, in the order
 * of their sequence numbers; flops.h) with their backward FLOPs, which each run of the node's record
 * then carries. */
uint64_t (*tw_backward_peek_function(void))(void);
void tw_backward_link_call(const tw_thread_t *t, const tw_frame_t *frame, const tw_torch_flops_node_t *flops,
                           unsigned n_flops);

/* GPU timing: the CUPTI hooks with which the last node that ended on this thread left its external
 * id pushed, or NULL; tw_backward_gpu_settle() pops it. The wrappers call it when a call ends on a
 * thread where it is set (see backward.c, gpu_nodes). */
extern _Thread_local const tw_gpu_hooks_t *tw_backward_gpu_ended;
void tw_backward_gpu_settle(void);

/* Hooks run while no session recorded (see backward.c), for tests. */
uint64_t tw_backward_stray_hooks(void);

/* How many of the layer's callbacks torch holds now, -1 when the libtorch layer is not loaded; for
 * tests: a step without detail and a stop leave none. */
int tw_backward_torch_callbacks(void);

#endif
