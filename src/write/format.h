/* SPDX-License-Identifier: MIT */
/*
 * Record formatting (not public API): one call record as a CSV or JSON line, the escaping under it,
 * and the UTF-8 cut that keeps shortened text valid. Used by the writer, the GPU rows (cupti.c) and
 * tw-report; it knows nothing of files or threads.
 */
#ifndef TW_FORMAT_H
#define TW_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "torchwrapper/api.h"
#include "torchwrapper/clock.h"
#include "torchwrapper/recorder.h"
#include "torchwrapper/writer.h"

/* One formatted record: escaped API name, module path, forward API and arguments (6 bytes per byte at
 * worst in JSON). */
#define TW_LINE_MAX (18 * TW_API_NAME_MAX + 6 * TW_ARGS_MAX + 1024)

/* The header line of a CSV file of call records. */
#define TW_CALLS_CSV_HEADER "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module,step,site,fwd_call_id,fwd_api,flops,flops_total,mem_alloc,mem_self,mem_freed,mem_peak\n"

/* Formats record r of chunk into line (at least TW_LINE_MAX bytes) in format, its times converted
 * by clock and its argument text cut to args_max bytes; returns its length. */
size_t tw_format_record(char *line, tw_format_t format, const tw_clock_t *clock, int64_t pid, const tw_chunk_t *chunk,
                        const tw_record_t *r, size_t args_max);

#endif
