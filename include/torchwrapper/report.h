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

#ifdef __cplusplus
}
#endif
#endif
