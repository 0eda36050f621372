/* SPDX-License-Identifier: MIT */
/*
 * The aggregate (aggregate.c): the sink of the table, the kept rows' totals per group of --by (api,
 * thread, pid, parent, step, site), printed by table.c. --html reads its groups (by api).
 */
#ifndef TW_REPORT_AGGREGATE_H
#define TW_REPORT_AGGREGATE_H

#include "site_texts.h"
#include "cli.h"
#include "groups.h"
#include "index.h"
#include "sink.h"

/*
 * A new aggregate into *sink. sites names --by site's groups; trace (NULL: none) is the --trace
 * sink whose calls the table's footer counts; index the pass's (--by parent's children wait there).
 * Returns 0 or TW_ENOMEM.
 */
int report_aggregate_new(const options_t *o, const report_sites_t *sites, report_index_t *index, int have_gpu_files,
                         const report_sink_t *trace, report_sink_t **sink);

/* The groups gathered (settled after the sink's settle). */
const group_table_t *report_aggregate_groups(const report_sink_t *sink);

#endif
