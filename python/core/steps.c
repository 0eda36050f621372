/* SPDX-License-Identifier: MIT */
/*
 * Steps: the step counter of the active session and the schedule's decision at each boundary.
 *
 * A step ends when an outermost optimizer step returns (one not called from inside another
 * optimizer step on the same thread, so that GradScaler.step(opt) or an optimizer wrapping another
 * ends one step), or, once the program has called Session.step(), at each such call only (the first
 * such call ends no step when optimizer steps have ended some: see tw_step_mark). Each
 * boundary moves the recorder's step (every record carries the step its call began in) and applies
 * the schedule (schedule.h) to the new step: outside active and warmup steps, argument summaries are
 * not made, and with the summary of active steps only, wrappers record nothing at all (tw_active.idle).
 * The steps of an on-demand capture (ondemand.h) are active whatever the schedule.
 * All of it runs with the GIL held.
 */
#include "module.h"
#include "backward.h"

/* The state of the current step applied to what the hot path reads. */
static void apply_state(void)
{
    int captured = tw_active.capture_to != 0 && tw_active.step >= tw_active.capture_from &&
                   tw_active.step < tw_active.capture_to;
    tw_step_state_t state = captured ? TW_STEP_ACTIVE : tw_schedule_state(&tw_active.schedule, tw_active.step);
    tw_active.args_mode = state == TW_STEP_IDLE ? TW_ARGS_NONE : tw_active.args_configured;
    tw_active.step_recorded = state == TW_STEP_ACTIVE;
    /* A session that keeps its records in memory has no summary.json to count idle steps' calls for:
     * they are not recorded at all, so that memory holds the recorded steps only. */
    tw_active.idle = state == TW_STEP_IDLE && (tw_active.schedule.summary_active || tw_active.writer == NULL);
    tw_backward_set_idle(tw_active.idle); /* autograd's nodes follow the same schedule */
}

void tw_steps_start(const tw_schedule_t *schedule, tw_args_mode_t args_mode)
{
    tw_active.schedule = *schedule;
    tw_active.args_configured = args_mode;
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
