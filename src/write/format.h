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
#include "torchwrapper/recorder.h"
#include "torchwrapper/writer.h"

/* One formatted record: escaped API name, module path, forward API and arguments (6 bytes per byte at
 * worst in JSON). */
#define TW_LINE_MAX (18 * TW_API_NAME_MAX + 6 * TW_ARGS_MAX + 1024)

/* The header line of a CSV file of call records. */
#define TW_CALLS_CSV_HEADER "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module,step,site,fwd_call_id,fwd_api,flops,flops_total,mem_alloc,mem_self,mem_freed,mem_peak\n"

/*
 * What a stream of records repeats, kept formatted: the process id, the thread id of the records' chunk,
 * and the leading digits of their start times (a nanosecond timestamp changes in its last 8 digits for
 * 0.1 s at a time). Numbers are most of a record's formatting: with these, the writer formats 3 of a
 * record's 19 + 7 + 7 digits of start, pid and tid, not all (tests/bench/bench_writer under callgrind;
 * NEWS). One per stream; zero-initialized (or tw_format_cache_init) before its first record.
 */
typedef struct {
    int64_t pid;          /* pid_text is this value's (pid_len 0: none yet) */
    uint64_t tid;
    uint64_t start_base;  /* start_head is the digits of start_base / 10^8; start_base a multiple of 10^8 */
    uint8_t pid_len, tid_len, start_head_len;
    char pid_text[24], tid_text[24], start_head[24];
} tw_format_cache_t;

void tw_format_cache_init(tw_format_cache_t *cache);

/* A record's times in nanoseconds (tw_clock_epoch_ns, tw_clock_duration_ns): converted once by the
 * writer, which needs cost and self for the summary too. */
typedef struct {
    int64_t start;
    uint64_t cost, self;
} tw_format_times_t;

/* Formats record r of chunk into line (at least TW_LINE_MAX bytes) in format, with its times ns, its
 * process pid and its argument text cut to args_max bytes; returns its length. cache: the stream's
 * (above). */
size_t tw_format_record(char *line, tw_format_t format, const tw_format_times_t *ns, int64_t pid,
                        tw_format_cache_t *cache, const tw_chunk_t *chunk, const tw_record_t *r, size_t args_max);

#endif
