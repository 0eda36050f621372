/* SPDX-License-Identifier: MIT */
/*
 * tw-report --ranks, inside: the tables the sink (ranks.c) gathers and the analysis
 * (ranks_analysis.c) reads; types, and one inline reading.
 */
#ifndef TW_REPORT_RANKS_TABLES_H
#define TW_REPORT_RANKS_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "inputs.h"
#include "ranks_result.h"
#include "sink.h"

/* Steps one series spans at most: a record's step is a 32-bit number, and a malformed or hostile file
 * could otherwise ask for terabytes (--diff's bound). */
#define MAX_STEPS (1 << 22)

/* Values per step, from step first (zero where none); dense: a training loop calls most of its APIs
 * in every step, and 8 bytes a step and API cost less than a hash table's slot. */
typedef struct series {
    int64_t first;
    size_t len; /* 0: empty */
    uint64_t *v;
} series_t;

typedef struct proc {
    int64_t pid;
    int ddp;   /* ran DistributedDataParallel */
    int nodes; /* has autograd nodes of its own (backward's self time is then the engine's) */
    int64_t min_step, max_step; /* of its rows; max_step -1: none */
    series_t *apis;             /* self time per step, by API index */
    size_t napis;               /* room in apis (empty series past the sink's APIs) */
    series_t first_ns, end_ns;  /* the span of its calls in each step */
} proc_t;

typedef struct api {
    char *name;
    size_t len;
    uint64_t hash;
} api_t;

typedef struct ranks {
    report_sink_t sink;
    const options_t *o;
    const inputs_t *in;
    proc_t *procs;
    size_t nprocs, procs_capacity, proc_hint;
    api_t *apis;
    size_t napis, apis_capacity;
    uint32_t *api_slots; /* index + 1 into apis; 0: empty */
    size_t api_capacity;
    uint64_t no_step, beyond;
    int computed;
    ranks_result_t *result;
} ranks_t;


/* The value of step in s (0 where none). */
static inline uint64_t series_get(const series_t *s, int64_t step)
{
    return s->len > 0 && step >= s->first && step < s->first + (int64_t)s->len ? s->v[step - s->first] : 0;
}

#endif
