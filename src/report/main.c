/* SPDX-License-Identifier: MIT */
/*
 * tw-report, tw_report_main: the report's steps in order (options, inputs, origin, the sinks, the
 * pass over the rows, output). See report.h, and sink.h for the sinks.
 *
 * The pass (pass.c) reads the GPU files first (the trace's arrows need their call ids), applies the
 * filters (filter.c) and hands each row to the sinks that asked for it. With -j N it is read on N
 * threads (jobs.c) when every sink can merge; else, and with -j 1, here on this one.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "torchwrapper/common.h"
#include "torchwrapper/report.h"

#include "cli.h"
#include "diff.h"
#include "filter.h"
#include "findings.h"
#include "inputs.h"
#include "jobs.h"
#include "pass.h"
#include "site_texts.h"
#include "sink.h"

/* Every record file, GPU files first; 0, or tw_read_file's error after its message on err. */
static int read_all(pass_t *p, const inputs_t *in, tw_read_stats_t *stats, FILE *err)
{
    for (int gpu = 1; gpu >= 0; gpu--) {
        p->gpu_pass = gpu;
        for (size_t i = 0; i < in->count; i++) {
            if ((in->files[i].kind == TW_FILE_GPU) != gpu || in->files[i].kind == 0)
                continue;
            char message[512];
            int rc = tw_read_file(in->files[i].path, report_pass_row, p, stats, message, sizeof message);
            if (rc != 0) {
                fprintf(err, "tw-report: %s\n", message);
                return rc;
            }
        }
    }
    return 0;
}

/* The run's origin (the manifests' earliest start, or else its first call's) and the --window it
 * sets; 0, or read_all's error. */
static int find_origin(pass_t *p, inputs_t *in, FILE *err)
{
    const options_t *o = p->out.o;
    int rc = 0;
    if ((o->has_window || o->trace) && in->origin_ns == INT64_MAX) {
        /* No manifest says when the run started: one more pass finds its first call. */
        p->prepass = 1;
        tw_read_stats_t ignored = {0};
        rc = read_all(p, in, &ignored, err);
        p->prepass = 0;
        in->origin_ns = p->min_start_ns == INT64_MAX ? 0 : p->min_start_ns;
    }
    if (rc == 0 && o->has_window) {
        p->filter.window_from_ns = in->origin_ns + (int64_t)(o->window_from * 1e9);
        p->filter.window_to_ns = o->window_to < 0 ? INT64_MAX : in->origin_ns + (int64_t)(o->window_to * 1e9);
    } else {
        p->filter.window_to_ns = INT64_MAX;
    }
    return rc;
}

/* After the pass: each sink settles, writes its files, then prints; 0, or the first error (after its
 * message on err: the outputs after it are still written, but nothing is printed). */
static int finish_sinks(pass_t *p, const struct timespec *t0, FILE *out, FILE *err)
{
    for (size_t i = 0; i < p->nsinks; i++)
        if (p->sinks[i]->ops->settle != NULL && p->sinks[i]->ops->settle(p->sinks[i]) == TW_ENOMEM)
            p->out.oom = 1;
    int rc = 0;
    for (size_t i = 0; i < p->nsinks; i++) {
        int written = p->sinks[i]->ops->write != NULL ? p->sinks[i]->ops->write(p->sinks[i], &p->out, err) : 0;
        if (rc == 0)
            rc = written;
    }
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    p->out.seconds = (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
    if (rc == 0 && p->out.oom)
        fprintf(err, "tw-report: out of memory: some calls are not counted\n");
    for (size_t i = 0; rc == 0 && i < p->nsinks; i++)
        if (p->sinks[i]->ops->print != NULL)
            rc = p->sinks[i]->ops->print(p->sinks[i], &p->out, out, err);
    return rc;
}

/* The report of the inputs: 0, or a negative errno after a message on err. */
static int report_run(const options_t *o, FILE *out, FILE *err)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    inputs_t in;
    memset(&in, 0, sizeof in);
    report_sites_t sites;
    memset(&sites, 0, sizeof sites);
    tw_read_stats_t stats = {0};
    pass_t p;
    memset(&p, 0, sizeof p);
    p.out = (report_pass_t){.o = o, .in = &in, .stats = &stats};
    p.filter = (report_filter_t){.o = o, .window_to_ns = INT64_MAX};
    p.filtering = report_filter_any(o);
    p.min_start_ns = INT64_MAX;
    int rc = report_collect_inputs(o, &in, err);
    for (size_t i = 0; rc == 0 && i < in.count; i++)
        p.out.have_gpu_files |= in.files[i].kind == TW_FILE_GPU;
    if (rc == 0)
        rc = find_origin(&p, &in, err);
    if (rc == 0 && (o->by == BY_SITE || o->tree_step >= 0 || o->folded || o->flamegraph || o->html || o->findings))
        rc = report_load_sites(&sites, &in); /* sites.json beside the record files */
    if (rc == 0)
        rc = report_open_sinks(&p, o, &in, &sites, err);
    if (rc == 0 && report_read_jobs(&p, &in, &sites, &stats, err) != 0)
        rc = read_all(&p, &in, &stats, err); /* -j 1, or what cannot be read on several threads */
    if (rc == 0)
        rc = finish_sinks(&p, &t0, out, err);
    for (size_t i = 0; i < p.nsinks; i++)
        p.sinks[i]->ops->free(p.sinks[i]);
    report_index_free(&p.index);
    report_sites_free(&sites);
    report_free_inputs(&in);
    return rc;
}

int tw_report_main(int argc, char *const argv[], FILE *out, FILE *err)
{
    options_t o;
    int rc = report_parse_options(argc, argv, &o, out, err), status;
    if (rc != 0) {
        status = rc == -EINVAL ? 2 : 1; /* a usage error, or no memory */
    } else if (o.help) {
        status = 0;
    } else if (o.rules) {
        report_findings_print_rules(out);
        status = 0;
    } else if (o.ndiff_base > 0) { /* --diff reads two runs its own way (diff.c) */
        int failed = 0;
        rc = report_diff_main(&o, out, err, &failed);
        status = rc != 0 || failed ? 1 : 0;
    } else {
        status = report_run(&o, out, err) != 0 ? 1 : 0;
    }
    free(o.inputs);
    free(o.diff_base);
    fflush(out);
    fflush(err);
    return status;
}
