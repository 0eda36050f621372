/* SPDX-License-Identifier: MIT */
/*
 * The findings' GPU rules (findings_state.h): from the GPU files' records (CUPTI's kernels, copies
 * and fills, read before the calls) how busy the device was during the steps, how many of its kernels
 * were tiny; from the calls' argument summaries, matrix products on float32 CUDA tensors. The busy
 * time is kept in buckets of time that double in width as the run grows (memory flat in the run's
 * length); overlapping work of several streams counts a bucket busy once.
 */
#include "config.h"
#include "findings_gpu.h"
#include "findings_output.h"
#include "findings_tally.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define GPU_BUCKETS 4096
#define TINY_KERNEL_NS 10000 /* a kernel under 10 us: its launch costs about what it runs */

static void gpu_widen(gpu_time_t *g)
{
    for (size_t b = 0; b < GPU_BUCKETS / 2; b++)
        g->busy[b] = g->busy[2 * b] + g->busy[2 * b + 1];
    memset(g->busy + GPU_BUCKETS / 2, 0, GPU_BUCKETS / 2 * sizeof *g->busy);
    g->width *= 2;
}

void findings_gpu_row(findings_t *f, const tw_row_t *row)
{
    gpu_time_t *g = &f->gpu;
    if (row->end_ns <= row->start_ns)
        return;
    if (g->busy == NULL) {
        if ((g->busy = calloc(GPU_BUCKETS, sizeof *g->busy)) == NULL) {
            f->oom = 1;
            return;
        }
        g->base = row->start_ns;
        g->width = 1000000; /* 1 ms, doubled as the run outgrows the buckets */
    }
    int kernel = row->gpu_kind.len == 6 && memcmp(row->gpu_kind.ptr, "kernel", 6) == 0;
    g->kernels += kernel;
    g->tiny_kernels += kernel && row->end_ns - row->start_ns < TINY_KERNEL_NS;
    uint64_t start = row->start_ns > g->base ? row->start_ns - g->base : 0, end = row->end_ns - g->base;
    if (row->end_ns <= g->base)
        return;
    while (end / g->width >= GPU_BUCKETS)
        gpu_widen(g);
    for (uint64_t b = start / g->width; b <= (end - 1) / g->width; b++) {
        uint64_t from = b * g->width > start ? b * g->width : start;
        uint64_t to = (b + 1) * g->width < end ? (b + 1) * g->width : end;
        g->busy[b] += to - from;
    }
}

/* The GPU's busy time in [from, to) (epoch ns): each bucket's busy time, at most its width, in the
 * share of it that the range covers. */
static double busy_between(const gpu_time_t *g, uint64_t from, uint64_t to)
{
    if (g->busy == NULL || to <= g->base)
        return 0;
    from = from > g->base ? from - g->base : 0;
    to -= g->base;
    double busy = 0;
    for (uint64_t b = from / g->width; b < GPU_BUCKETS && b * g->width < to; b++) {
        uint64_t lo = b * g->width > from ? b * g->width : from;
        uint64_t hi = (b + 1) * g->width < to ? (b + 1) * g->width : to;
        double in = (double)(g->busy[b] < g->width ? g->busy[b] : g->width);
        busy += in * (double)(hi - lo) / (double)g->width;
    }
    return busy;
}

/* The span of the steps the rules count: the steps' thread's outermost calls, the first step out. */
static void steps_span(const findings_t *f, const settle_context_t *c, uint64_t *from, uint64_t *to)
{
    *to = c->thread->last_end;
    *from = *to - c->run_ns;
    (void)f;
}

void rule_gpu_idle(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    if (f->gpu.busy == NULL || c->thread == NULL || c->run_ns == 0)
        return;
    uint64_t from, to;
    steps_span(f, c, &from, &to);
    double busy = busy_between(&f->gpu, from, to) / (double)c->run_ns, idle = 1 - busy;
    if (idle < 0.10)
        return;
    finding_t *x = findings_add(f, r, idle);
    if (x == NULL)
        return;
    findings_evidence(x, "gpu_busy_share", busy);
    findings_evidence(x, "kernels_per_step", (double)f->gpu.kernels / (c->per_step + (f->skip_first ? 1 : 0)));
    /* what the host does meanwhile: the step's parts, most first */
    int top = -1;
    for (int k = 0; k < PARTS && f->anatomy.valid; k++)
        if (top < 0 || f->anatomy.part_ms[k] > f->anatomy.part_ms[top])
            top = k;
    snprintf(x->message, sizeof x->message,
             "The GPU is idle %.1f%% of the steps (busy %.1f%%): it waits for the host%s%s%s.", 100 * idle,
             100 * busy, top >= 0 ? ", whose step is mostly " : "", top >= 0 ? report_part_names[top] : "",
             top == PART_DATA ? " (the DataLoader)" : top == PART_PYTHON ? " (Python between calls)" : "");
}

void rule_tiny_kernels(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    const gpu_time_t *g = &f->gpu;
    /* (the GPU records have no step: the kernels of every step, the first's included, over every step) */
    double steps = c->per_step + (f->skip_first ? 1 : 0), per_step = (double)g->tiny_kernels / steps;
    if (g->kernels == 0 || per_step < 100 || 2 * g->tiny_kernels < g->kernels || c->thread == NULL || c->run_ns == 0)
        return;
    uint64_t from, to;
    steps_span(f, c, &from, &to);
    double idle = 1 - busy_between(g, from, to) / (double)c->run_ns;
    finding_t *x = findings_add(f, r, idle > 0 ? idle : 0);
    if (x == NULL)
        return;
    findings_evidence(x, "tiny_kernels_per_step", per_step);
    findings_evidence(x, "kernels_per_step", (double)g->kernels / steps);
    snprintf(x->message, sizeof x->message,
             "%.0f kernels a step run under 10 us each (%.0f%% of the kernels): each costs a launch of several us "
             "on the host, and the GPU is idle %.1f%% of the steps between them.", per_step,
             100.0 * (double)g->tiny_kernels / (double)g->kernels, 100 * (idle > 0 ? idle : 0));
}

static double fp32_on_gpu(findings_t *f, const rule_t *r, const settle_context_t *c, const series_entry_t *e)
{
    if (e == NULL || c->thread == NULL || e->pid != c->thread->pid || e->node || e->f32_gpu_calls == 0 ||
        !findings_api_in(e->api, e->api_len, r->apis))
        return 0;
    /* the steps the rules count: the first step's share of the calls out */
    return (double)e->f32_gpu_ns * report_series_detail_scale(e) * (f->skip_first && e->calls > 0 ? (double)(e->calls - e->first_calls) / (double)e->calls : 1);
}

void rule_fp32_matmul_gpu(findings_t *f, const rule_t *r, const settle_context_t *c)
{
    double total = 0;
    uint64_t calls = 0;
    const series_entry_t *top = NULL;
    double top_ns = 0;
    for (size_t i = 0; i < f->series.capacity; i++) {
        double ns = fp32_on_gpu(f, r, c, f->series.slots[i]);
        if (ns <= 0)
            continue;
        total += ns;
        const series_entry_t *e = f->series.slots[i];
        calls += (uint64_t)((double)e->f32_gpu_calls * ns / (double)e->f32_gpu_ns + 0.5);
        if (top == NULL || ns > top_ns)
            top = f->series.slots[i], top_ns = ns;
    }
    if (top == NULL || c->run_ns == 0 || f->fp32_precision_lowered)
        return;
    double share = total / (double)c->run_ns;
    finding_t *x = findings_add(f, r, share);
    if (x == NULL)
        return;
    findings_add_where_text(x, findings_line_text(f, top));
    findings_evidence(x, "calls", (double)calls);
    findings_evidence(x, "ms_per_step", total / c->per_step / 1e6);
    snprintf(x->message, sizeof x->message,
             "%" PRIu64 " matrix products on float32 CUDA tensors (%s at %s first) run in full float32: tensor "
             "cores take TF32 or bfloat16 at several times the speed.", calls, top->api, findings_line_text(f, top));
}
