/* SPDX-License-Identifier: MIT */
/*
 * tw-report: per-API totals and percentiles from record files, and a Chrome trace event timeline,
 * streamed in constant memory (one pass over the files; a second only for --window without
 * manifests). The tw-report program and `python -m torchwrapper report` both run tw_report_main().
 */
#ifndef TORCHWRAPPER_REPORT_H
#define TORCHWRAPPER_REPORT_H

#include <stdio.h>

#include "torchwrapper/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Runs the report as `tw-report argv[1..]` would: output to out, messages and errors to err.
 * Returns the exit status: 0, 1 (an input could not be read or is not a record file), 2 (usage).
 * Keeps no state between calls.
 */
TW_API int tw_report_main(int argc, char *const argv[], FILE *out, FILE *err);

/*
 * The line every report ends with, "torchwrapper's own cost: ...", from a run's manifests (their JSON
 * texts, one per process; one that does not parse is left out): into buf (size bytes, cut with "..."
 * when longer), "" when none says what profiling cost. Returns the line's length. `run`'s summary prints
 * it, so that it reads as tw-report's.
 */
TW_API int tw_report_own_cost_text(const char *const *manifests, size_t count, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
