/* SPDX-License-Identifier: MIT */
/*
 * The flame graph's stacks (flame.c builds them as the rows stream by; flame_output.h writes them):
 * the sink of --folded and --flamegraph, whose stacks --html embeds.
 */
#ifndef TW_REPORT_FLAME_H
#define TW_REPORT_FLAME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "torchwrapper/reader.h"

#include "site_texts.h"
#include "cli.h"
#include "index.h"
#include "sink.h"

typedef struct flame flame_t;

/*
 * A new flame sink into *sink: stacks of API names, or of module paths with --by module; sites: call
 * sites as frames above their calls (NULL: none); --backward timeline keeps backward nodes under the
 * backward call that ran them (else under the forward call that created them, the charged view). Its
 * write writes --folded and --flamegraph when given. Returns 0 or TW_ENOMEM.
 */
int report_flame_open(const options_t *o, const report_sites_t *sites, report_index_t *index, report_sink_t **sink);

/* The stacks of a flame sink (settled after the sink's settle). */
const flame_t *report_flame_of(const report_sink_t *sink);

/* All the self time counted: what the stacks sum to. */
uint64_t report_flame_self_ns(const flame_t *f);

/* The module a row is the forward of (--by module's frame, --html's modules): its length, 0 for none. */
size_t report_module_label(const tw_row_t *row, const char **label);

#endif
