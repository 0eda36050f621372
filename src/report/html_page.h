/* SPDX-License-Identifier: MIT */
/*
 * The frame of tw-report's HTML pages (html_page.c), for every page: --html's (html.c), --diff's
 * (diff_html.c) and the sections other sinks write into them (ranks, findings).
 */
#ifndef TW_REPORT_HTML_PAGE_H
#define TW_REPORT_HTML_PAGE_H

#include <stddef.h>
#include <stdio.h>

/* A page's head (styles) and end (scripts: sortable tables, the flame graph's search box), and text
 * escaped for HTML. */
void report_html_begin(FILE *out, const char *title);
void report_html_end(FILE *out);
void report_html_text(FILE *out, const char *s, size_t len);

/* The same for a name in a table's first column: it wraps between its dotted or slashed parts. */
void report_html_name(FILE *out, const char *s, size_t len);

#endif
