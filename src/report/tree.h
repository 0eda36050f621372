/* SPDX-License-Identifier: MIT */
/* --tree (tree.c): the calls of one step of one thread, kept as the rows stream by, printed as a tree. */
#ifndef TW_REPORT_TREE_H
#define TW_REPORT_TREE_H

#include "site_texts.h"
#include "cli.h"
#include "sink.h"

/*
 * A new --tree sink into *sink; sites names the calls' sites. Its print returns -ENOENT (after a
 * message) when the step is not in the records. Returns 0 or TW_ENOMEM.
 */
int report_tree_new(const options_t *o, const report_sites_t *sites, report_sink_t **sink);

#endif
