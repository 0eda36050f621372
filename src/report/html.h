/* SPDX-License-Identifier: MIT */
/*
 * --html (html.c): one self-contained page of the run, a sink gathering its own aggregates (steps,
 * processes, modules) and showing the flame sink's stacks and the aggregate's per-API table. Every
 * page's frame is html_page.h's.
 */
#ifndef TW_REPORT_HTML_H
#define TW_REPORT_HTML_H

#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "html_page.h" /* for the pages that include this header for the frame (findings_output.c) */
#include "sink.h"

/*
 * A new --html sink into *sink, writing o->html: flame is the flame sink, aggregate the aggregate
 * (by api), both settled and written before it; ranks (NULL: none) the --ranks sink, whose section it
 * shows; findings (NULL: none) the findings sink, shown first. Its write returns 0, or after a message on err the
 * -errno of the failed open, TW_EIO (a write failed) or TW_ENOMEM. Returns 0 or TW_ENOMEM.
 */
int report_html_open(const options_t *o, const report_sink_t *flame, const report_sink_t *aggregate,
                     report_sink_t *ranks, const report_sink_t *findings, report_sink_t **sink);

#endif
