/* SPDX-License-Identifier: MIT */
/*
 * The pass over the record files (pass.h): each row through the filters (filter.c) to the sinks that
 * asked for it, knowing none of them by name; only report_open_sinks, which picks them from the
 * options, does. The driver (main.c) runs it on its thread, jobs.c on several, each with a pass and
 * sinks of its own.
 */
#include "config.h"
#include "pass.h"

#include <stdio.h>

#include "torchwrapper/common.h"

#include "aggregate.h"
#include "chrome_trace.h"
#include "findings.h"
#include "flame.h"
#include "html.h"
#include "ranks.h"
#include "tree.h"

int report_pass_row(void *ctx, const tw_row_t *row)
{
    pass_t *p = ctx;
    if (p->gpu_pass != (row->kind == TW_FILE_GPU))
        return 0;
    if ((int64_t)row->start_ns < p->min_start_ns && row->start_ns != 0)
        p->min_start_ns = (int64_t)row->start_ns;
    if (p->prepass)
        return 0;
    if (p->index.recent_wanted && row->kind == TW_FILE_CALLS) /* every call, kept or not: a stack's */
        report_index_note(&p->index, row);
    int keep = !p->filtering || report_filter_keep(&p->filter, row);
    unsigned wanted = keep ? SINK_ROWS_KEPT : SINK_ROWS_LEFT_OUT;
    if (keep)
        p->out.kept++;
    else
        p->out.filtered++;
    for (size_t i = 0; i < p->nsinks; i++) {
        report_sink_t *s = p->sinks[i];
        if ((s->rows & wanted) && s->ops->row(s, row, keep) == TW_ENOMEM)
            p->out.oom = 1;
    }
    return 0;
}

/*
 * The sinks the options ask for, in the order they write their files (the flame graph's, the page
 * that embeds it, the trace) and print (the tree, or the table, whose footer counts the trace's
 * calls). See pass.h.
 */
int report_open_sinks(pass_t *p, const options_t *o, const inputs_t *in, const report_sites_t *sites, FILE *err)
{
    report_sink_t *trace = NULL, *flame = NULL, *html = NULL, *tree = NULL, *aggregate = NULL, *ranks = NULL,
                  *findings = NULL;
    int rc = 0;
    if (o->trace != NULL && (rc = report_chrome_trace_open(o, in, sites, &p->index, in->origin_ns, &trace, err)) != 0)
        return rc; /* it said what failed */
    if (trace != NULL && o->tree_step >= 0)
        trace->rows = 0; /* --tree reads one thread's calls for itself: the trace stays empty */
    if (o->tree_step >= 0) {
        rc = report_tree_new(o, sites, &tree);
    } else if (o->findings) {
        rc = report_findings_new(o, sites, p->out.have_gpu_files, &findings);
        if (rc == 0) {
            report_findings_use_host(findings, in->info.cpus, in->info.torch_threads);
            report_findings_use_detail(findings, in->info.own.detail_first, in->info.own.detail_every);
        }
        if (rc == 0 && in->nranks >= 2) /* stragglers: the ranks' analysis, not printed (findings.h) */
            rc = report_ranks_new(o, in, &ranks);
        if (rc == 0 && ranks != NULL)
            report_findings_use_ranks(findings, ranks);
    } else {
        if (o->ranks)
            rc = report_ranks_new(o, in, &ranks);
        if (rc == 0 && (!o->ranks || o->html)) /* --ranks prints instead of the table; --html shows both */
            rc = report_aggregate_new(o, sites, &p->index, p->out.have_gpu_files, trace, &aggregate);
        if (rc == 0 && (o->folded || o->flamegraph || o->html))
            rc = report_flame_open(o, sites, &p->index, &flame);
        if (rc == 0 && o->html) /* the page opens with the findings */
            rc = report_findings_new(o, sites, p->out.have_gpu_files, &findings);
        if (rc == 0 && o->html) {
            report_findings_use_host(findings, in->info.cpus, in->info.torch_threads);
            report_findings_use_detail(findings, in->info.own.detail_first, in->info.own.detail_every);
        }
        if (rc == 0 && o->html && ranks != NULL)
            report_findings_use_ranks(findings, ranks);
        if (rc == 0 && o->html)
            rc = report_html_open(o, flame, aggregate, ranks, findings, &html);
    }
    if (rc != 0)
        fprintf(err, "tw-report: %s\n", tw_strerror(rc));
    report_sink_t *const order[] = {findings, flame, html, trace, tree, aggregate, ranks};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (order[i] != NULL)
            p->sinks[p->nsinks++] = order[i];
    return rc;
}
