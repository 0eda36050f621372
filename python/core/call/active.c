/* SPDX-License-Identifier: MIT */
/*
 * The active session's state (active.h), and the only writer of it: what Session.start and stop put
 * in place, the call sites' part, and steps (the step counter and the schedule's decision at each
 * boundary).
 *
 * Steps: a step ends when an outermost optimizer step returns (one not called from inside another
 * optimizer step on the same thread, so that GradScaler.step(opt) or an optimizer wrapping another
 * ends one step), or, once the program has called Session.step(), at each such call only (the first
 * such call ends no step when optimizer steps have ended some: see tw_step_mark). Each
 * boundary moves the recorder's step (every record carries the step its call began in) and applies
 * the schedule (schedule.h) to the new step: outside active and warmup steps, argument summaries are
 * not made, and with the summary of active steps only, wrappers record nothing at all (tw_active.idle).
 * The steps of an on-demand capture (ondemand.h) are active whatever the schedule.
 * All of it runs with the GIL held.
 */
#include "active.h"

#include <stddef.h>
#include <string.h>

#include "below/backward.h"


_Alignas(64) tw_active_t tw_active; /* its hot fields in one cache line (active.h) */
_Static_assert(offsetof(tw_active_t, hooks.kinds) + sizeof(uint32_t) <= 64,
               "tw_active's fields read by every call fit its first cache line");

static uint64_t last_gen;

/* ---- the session ---------------------------------------------------------------------------------- */

uint64_t tw_active_begin(const tw_active_config_t *c)
{
    tw_active.recorder = c->recorder;
    tw_active.clock_source = c->clock_source;
    tw_active.args_mode = c->args_mode;
    tw_active.tensor_type = c->tensor_type;
    tw_active.hooks = *c->hooks;
    tw_active.hooks.kinds |= TW_KIND_STEP; /* optimizer steps end steps */
    tw_recorder_set_step(c->recorder, 0);
    tw_active.writer = c->writer; /* before the steps' state, which depends on it */
    tw_active.gpu_session = c->gpu_session;
    tw_active.gpu_recording = 1; /* tw_gpu_start enabled the activities */
    tw_steps_start(c->schedule, c->args_mode, c->detail_sampled);
    tw_active.ondemand = c->ondemand;
    tw_active.session = Py_NewRef(c->session);
    tw_active.gpu = c->gpu;
    tw_active.gen = ++last_gen;
    return tw_active.gen;
}

/* The detail's parts on the hot path (linking autograd nodes, FLOPs) as the current step has it. */
static void apply_detail(void)
{
    tw_active.seq_peek = tw_active.detail ? tw_active.seq_peek_configured : NULL;
    if (tw_active.detail && tw_active.flops_configured)
        tw_active.hooks.kinds |= TW_KIND_FLOPS; /* those wrappers leave the common path */
    else
        tw_active.hooks.kinds &= ~(uint32_t)TW_KIND_FLOPS;
}

void tw_active_set_seq_peek(uint64_t (*seq_peek)(void))
{
    tw_active.seq_peek_configured = seq_peek;
    apply_detail();
}

void tw_active_set_flops(int on)
{
    tw_active.flops_configured = on;
    apply_detail();
}

PyObject *tw_active_end(void)
{
    tw_active.gen = 0;
    tw_active.seq_peek = tw_active.seq_peek_configured = NULL;
    tw_active.flops_configured = 0;
    tw_active.idle = 0;
    tw_active.recorder = NULL;
    tw_active.writer = NULL;
    tw_active.ondemand = NULL;
    tw_active.capture_from = tw_active.capture_to = 0;
    memset(&tw_active.hooks, 0, sizeof tw_active.hooks);
    tw_active.gpu = NULL;
    tw_active.gpu_session = NULL;
    PyObject *session = tw_active.session;
    tw_active.session = NULL;
    return session;
}

void tw_active_set_sites(tw_sites_mode_t mode, tw_sites_t *sites)
{
    tw_active.sites = mode != TW_SITES_OFF ? sites : NULL;
    tw_active.sites_overflow_id = mode != TW_SITES_OFF ? tw_sites_overflow_id(sites) : 0;
    tw_active.sites_mode = mode;
}

void tw_active_forget_gpu(void)
{
    tw_active.gpu = NULL;
    tw_active.gpu_session = NULL;
}

/* ---- steps ------------------------------------------------------------------------------------------ */

/* The state of the current step applied to what the hot path reads. */
static void apply_state(void)
{
    int captured = tw_active.capture_to != 0 && tw_active.step >= tw_active.capture_from &&
                   tw_active.step < tw_active.capture_to;
    tw_step_state_t state = captured ? TW_STEP_ACTIVE : tw_schedule_state(&tw_active.schedule, tw_active.step);
    tw_active.args_mode = state == TW_STEP_IDLE ? TW_ARGS_NONE : tw_active.args_configured;
    /* GPU timing in warm-up and active steps, as Kineto's: CUPTI's records (and its cost per launch)
     * only where they are written. And in the step after an active one, where the GPU still runs what
     * the CPU launched at the end of it (the CPU runs ahead): those records keep the step of their
     * launch, and are written. */
    int gpu_on = state != TW_STEP_IDLE || tw_active.step_recorded;
    if (tw_active.gpu_session != NULL && gpu_on != tw_active.gpu_recording &&
        tw_gpu_set_recording(tw_active.gpu_session, gpu_on) == 0) /* refused: the next boundary tries again */
        tw_active.gpu_recording = gpu_on;
    tw_active.step_recorded = state == TW_STEP_ACTIVE;
    /* The costly detail (argument summaries, autograd nodes, FLOPs): under detail "sampled", in the
     * first steps and one in TW_DETAIL_EVERY after (a capture's steps have it all), else in every
     * step (nodes and FLOPs outside the schedule's recorded steps too, for the summary's counts):
     * the argument summaries here, the rest in apply_detail and the node hooks, whose callbacks
     * libtorch stops calling in the steps without. */
    tw_active.detail = !tw_active.detail_sampled || captured || tw_detail_step(tw_active.step);
    if (!tw_active.detail)
        tw_active.args_mode = TW_ARGS_NONE;
    apply_detail();
    tw_backward_set_detail(tw_active.detail);
    /* A session that keeps its records in memory has no summary.json to count idle steps' calls for:
     * they are not recorded at all, so that memory holds the recorded steps only. */
    tw_active.idle = state == TW_STEP_IDLE && (tw_active.schedule.summary_active || tw_active.writer == NULL);
    tw_backward_set_idle(tw_active.idle); /* autograd's nodes follow the same schedule */
}

void tw_steps_start(const tw_schedule_t *schedule, tw_args_mode_t args_mode, int detail_sampled)
{
    tw_active.schedule = *schedule;
    tw_active.args_configured = args_mode;
    tw_active.detail_sampled = detail_sampled;
    tw_active.step_recorded = 0;
    tw_active.step = 0;
    tw_active.manual_steps = 0;
    tw_active.capture_from = tw_active.capture_to = 0;
    apply_state();
}

void tw_step_end(void)
{
    if (tw_active.gen == 0 || tw_active.step == UINT32_MAX)
        return;
    tw_active.step++;
    tw_recorder_set_step(tw_active.recorder, tw_active.step);
    if (tw_active.writer != NULL)
        tw_writer_set_step(tw_active.writer, tw_active.step);
    /* A capture asked for (the signal's flag) begins here; one whose steps are over ends. */
    if (tw_active.ondemand != NULL && (tw_active.capture_to != 0 || tw_ondemand_asked() || tw_active.step == 1))
        tw_ondemand_step(tw_active.ondemand, tw_active.step, &tw_active.capture_from, &tw_active.capture_to);
    apply_state();
}

void tw_steps_manual(void)
{
    tw_active.manual_steps = 1;
    tw_active.hooks.kinds &= ~(uint32_t)TW_KIND_STEP; /* optimizer steps take the common path again */
}

void tw_step_mark(void)
{
    if (tw_active.gen == 0)
        return;
    int first = !tw_active.manual_steps;
    tw_steps_manual();
    /* The first mark after optimizer steps have ended steps does not end another: the step the
     * last optimizer step began goes on (a program that calls step() after optimizer.step() would
     * otherwise see its first iteration counted twice). */
    if (first && tw_active.step > 0)
        return;
    tw_step_end();
}
