/* SPDX-License-Identifier: MIT */
/* What the findings' pass follows row by row on a thread (findings_follow.c). */
#ifndef TW_REPORT_FINDINGS_FOLLOW_H
#define TW_REPORT_FINDINGS_FOLLOW_H

#include "findings_state.h"

/* A Dataset's call, counted to its process: a DataLoader's worker, or the main process. */
void findings_count_dataset_process(findings_t *f, const tw_row_t *row);

/* A DataLoader's iterators on thread t (an epoch's start), the first batch each gave and each one's last. */
void findings_follow_loader(thread_state_t *t, const tw_row_t *row, const site_line_t *line);

/* A module forward's batch: its first tensor's leading size, 2 or more, kept among t's. */
void findings_note_batch_lead(thread_state_t *t, const tw_row_t *row);

/* count more of the program's own calls of e in step: a step with as many as a batch of t's models is a
 * loop over that batch's samples (e->per_sample_runs). */
void findings_count_program_step(const thread_state_t *t, series_entry_t *e, int64_t step, uint32_t count);

/* The grad and eval modes an outermost call switches (no_grad, inference_mode, Module.eval/train). */
void findings_follow_modes(thread_state_t *t, const tw_row_t *row);

/* Whether an outermost module forward runs as an evaluation: under no_grad/inference_mode, or its model in
 * eval mode (*with_grad then). */
int findings_is_evaluation(const thread_state_t *t, const tw_row_t *row, int *with_grad);

#endif
