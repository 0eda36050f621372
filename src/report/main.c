/* SPDX-License-Identifier: MIT */
/*
 * tw-report, tw_report_main: the report's steps in order (options, inputs, origin, passes, output).
 * See report.h.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report_internal.h"
#include "torchwrapper/report.h"

static int read_all(report_t *r, inputs_t *in, tw_read_stats_t *stats, FILE *err)
{
    for (int pass = 1; pass >= 0; pass--) { /* GPU files first: the trace's arrows need their call ids */
        r->gpu_pass = pass;
        for (size_t i = 0; i < in->count; i++) {
            if ((in->files[i].kind == TW_FILE_GPU) != pass || in->files[i].kind == 0)
                continue;
            char message[512];
            int rc = tw_read_file(in->files[i].path, report_on_row, r, stats, message, sizeof message);
            if (rc != 0) {
                fprintf(err, "tw-report: %s\n", message);
                return 1;
            }
        }
    }
    return 0;
}

/* The run's origin (the manifests' earliest start, or else its first call's) and the --window it
 * sets. */
static int find_origin(report_t *r, inputs_t *in, FILE *err)
{
    const options_t *o = r->o;
    int rc = 0;
    if ((o->has_window || o->trace) && in->origin_ns == INT64_MAX) {
        /* No manifest says when the run started: one more pass finds its first call. */
        r->prepass = 1;
        tw_read_stats_t ignored = {0};
        rc = read_all(r, in, &ignored, err);
        r->prepass = 0;
        in->origin_ns = r->min_start_ns == INT64_MAX ? 0 : r->min_start_ns;
    }
    if (rc == 0 && o->has_window) {
        r->window_from_ns = in->origin_ns + (int64_t)(o->window_from * 1e9);
        r->window_to_ns = o->window_to < 0 ? INT64_MAX : in->origin_ns + (int64_t)(o->window_to * 1e9);
    } else {
        r->window_to_ns = INT64_MAX;
    }
    return rc;
}

/* --folded, --flamegraph, --html, once every row is read. */
static int write_stacks(report_t *r, const tw_read_stats_t *stats, FILE *err)
{
    const options_t *o = r->o;
    report_flame_settle(r->flame);
    if (report_flame_oom(r->flame))
        r->oom = 1;
    if (o->folded && report_flame_write_folded(r->flame, o->folded, err) != 0)
        return 1;
    if (o->flamegraph && report_flame_write_svg_file(r->flame, o->flamegraph, err) != 0)
        return 1;
    if (o->html && report_html_write(r, stats, err) != 0)
        return 1;
    return 0;
}

int tw_report_main(int argc, char *const argv[], FILE *out, FILE *err)
{
    options_t o;
    int rc = report_parse_options(argc, argv, &o, out, err);
    if (rc != 0 || o.ndiff_base > 0) { /* --diff reads two runs its own way (diff.c) */
        if (rc == 0)
            rc = report_diff_main(&o, out, err);
        free(o.inputs);
        free(o.diff_base);
        fflush(out);
        fflush(err);
        return rc < 0 ? 0 : rc;
    }
    inputs_t in;
    memset(&in, 0, sizeof in);
    report_t r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.in = &in;
    r.min_start_ns = INT64_MAX;
    r.window_to_ns = INT64_MAX;
    tw_read_stats_t stats = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = report_collect_inputs(&o, &in, err);
    for (size_t i = 0; rc == 0 && i < in.count; i++)
        r.have_gpu_files |= in.files[i].kind == TW_FILE_GPU;
    if (rc == 0)
        rc = find_origin(&r, &in, err);
    if (rc == 0 && (o.by == BY_SITE || o.tree_step >= 0 || o.folded || o.flamegraph || o.html))
        /* sites.json beside the record files */
        rc = report_load_sites(&r.sites, &in);
    r.tree.sites = &r.sites;
    if (rc == 0 && o.trace != NULL && (r.trace = report_trace_open(o.trace, in.origin_ns, err)) == NULL)
        rc = 1;
    if (rc == 0 && (o.folded || o.flamegraph || o.html) &&
        (r.flame = report_flame_new(o.frames_by_module, o.frames_by_module ? NULL : &r.sites, o.backward_timeline)) ==
            NULL)
        rc = 1;
    if (rc == 0 && o.html && (r.html_data = report_html_new()) == NULL)
        rc = 1;
    if (rc == 0)
        rc = read_all(&r, &in, &stats, err);
    if (rc == 0 && o.by == BY_PARENT)
        report_settle_pending(&r);
    if (rc == 0 && o.by == BY_SITE)
        report_site_keys_finish(&r);
    if (rc == 0 && r.flame != NULL)
        rc = write_stacks(&r, &stats, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (r.trace != NULL && report_trace_close(r.trace) != 0 && rc == 0) {
        fprintf(err, "tw-report: writing the trace %s failed (disk full?)\n", o.trace);
        rc = 1;
    }
    if (rc == 0 && r.oom)
        fprintf(err, "tw-report: out of memory: some calls are not counted\n");
    if (rc == 0 && o.tree_step >= 0) {
        report_print_tree(out, err, &o, &r.tree);
        if (r.tree.selected.count == 0)
            rc = 1;
    } else if (rc == 0) {
        report_print_table(out, err, &r, &stats, seconds);
    }
    report_free(&r);
    report_free_inputs(&in);
    free(o.inputs);
    fflush(out);
    fflush(err);
    return rc;
}
