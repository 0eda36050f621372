/* SPDX-License-Identifier: MIT */
/*
 * FLOPs per call (config flops): which wrapped APIs have a formula (decided once, when a wrapper is
 * made: the other APIs pay nothing), and the measure taken when a call of one of them ends, by the
 * libtorch layer (libtorch/tw_torch_flops.cpp). Private to the extension module; GIL held.
 */
#ifndef TW_CORE_FLOPS_H
#define TW_CORE_FLOPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "torchwrapper/recorder.h"

#include "libtorch/tw_torch.h"

/* The formula of the API named api_name (tw_flops_kind_t; TW_FLOPS_NONE: none). */
uint32_t tw_flops_kind_of(const char *api_name);

/*
 * A call of a wrapper with formula kind returned result (not NULL): its own FLOPs into frame->flops,
 * and the backward FLOPs of the compute nodes it created (when backward nodes are recorded: seq_peek,
 * the autograd sequence number's reader, is then the session's, else NULL): *nodes
 * points to them, by sequence number, in the layer's array for this thread (valid until the next
 * measure on this thread); returns how many. Nothing when a recorded call inside it counted FLOPs
 * already (Tensor.__rmatmul__ calling torch.matmul): those are its FLOPs, in flops_total.
 */
unsigned tw_flops_measure(uint32_t kind, tw_frame_t *frame, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                          PyObject *result, uint64_t (*seq_peek)(void), const tw_torch_flops_node_t **nodes);

#endif
