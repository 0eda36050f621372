/* SPDX-License-Identifier: MIT */
/*
 * Steps and the schedule: which steps of a run leave per-call records.
 *
 * A run is cut into steps, counted from 0: a step ends when an outermost optimizer step returns, or,
 * once the program marks steps itself (profile().step(), torchwrapper.step()), only there. The
 * extension keeps the current step in the recorder (tw_recorder_set_step); every record carries the
 * step its call began in.
 *
 * The schedule (config key "schedule") has torch.profiler.schedule's meaning: skip_first steps are
 * skipped, then cycles of wait, warmup and active steps follow, repeat times (0: without end).
 * Only active steps leave records in the files; warmup steps run the whole recording path (threads
 * attach, module paths are resolved) but their records are dropped, so that the first active step
 * is timed like the others.
 */
#ifndef TORCHWRAPPER_SCHEDULE_H
#define TORCHWRAPPER_SCHEDULE_H

#include "torchwrapper/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tw_schedule {
    int enabled;          /* 0: every step is active (no schedule) */
    uint32_t skip_first;
    uint32_t wait;
    uint32_t warmup;
    uint32_t active;      /* >= 1 when enabled */
    uint32_t repeat;      /* cycles; 0: cycles without end */
    int summary_active;   /* 1: summary.json counts the calls of active steps only; 0: every call */
} tw_schedule_t;

typedef enum {
    TW_STEP_IDLE = 0,   /* skipped, waiting, or after the last cycle: no records */
    TW_STEP_WARMUP = 1, /* recorded as in an active step, then dropped */
    TW_STEP_ACTIVE = 2, /* records written */
} tw_step_state_t;

/* What the schedule makes of step (counted from 0). NULL or a disabled schedule: always active. */
TW_API tw_step_state_t tw_schedule_state(const tw_schedule_t *schedule, uint64_t step);

/* What is kept of a call, by tw_schedule_keeps(). */
enum {
    TW_KEEP_RECORD = 1u << 0,  /* its record: in the record files, or in a session's in-memory records */
    TW_KEEP_SUMMARY = 1u << 1, /* its count and times in summary.json */
};

/*
 * What is kept of a call of step: its record in active steps, unless summary_only (config records
 * "summary"); its place in the summary always, or only in active steps with "summary": "active".
 * The one rule of the writer and of a session that keeps its records in memory.
 */
TW_API unsigned tw_schedule_keeps(const tw_schedule_t *schedule, int summary_only, uint64_t step);

/*
 * The schedule of a normalized configuration's "schedule" value (JSON text: null, or the object
 * tw_config_normalize() makes). Returns 0, or TW_EINVAL when it is neither.
 */
TW_API int tw_schedule_from_json(const char *json, tw_schedule_t *out);

#ifdef __cplusplus
}
#endif
#endif
