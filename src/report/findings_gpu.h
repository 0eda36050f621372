/* SPDX-License-Identifier: MIT */
/* The findings' GPU rules and the GPU records they count (findings_gpu.c). */
#ifndef TW_REPORT_FINDINGS_GPU_H
#define TW_REPORT_FINDINGS_GPU_H

#include "findings_state.h"

/* Counts a GPU record (a kernel, copy or fill) into f->gpu. */
void findings_gpu_row(findings_t *f, const tw_row_t *row);

void rule_gpu_idle(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_tiny_kernels(findings_t *f, const rule_t *r, const settle_context_t *c);
void rule_fp32_matmul_gpu(findings_t *f, const rule_t *r, const settle_context_t *c);

#endif
