/* SPDX-License-Identifier: MIT */
/*
 * tw-report, --html: one self-contained page (no network: styles, scripts and the flame graph are
 * inline) with the run's summary, the per-API table, the flame graph, step times, the processes
 * side by side, the modules and GPU time. It shows aggregates only, never the records, so its size
 * is bounded whatever the run's (tables and the flame graph are capped; see the limits below).
 *
 * The page is written by the sink's write from sections, each a function of its own taking the page
 * (the sink, the pass, the per-API groups and the stacks); report_html_begin() and report_html_end()
 * open and close a page, so that another page (two runs side by side) can reuse them.
 */
#include "config.h"
#include "html.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"
#include "torchwrapper/stats.h"
#include "../stats_internal.h"

#include "aggregate.h"
#include "findings.h"
#include "findings_output.h"
#include "ranks.h"
#include "ranks_output.h"
#include "flame.h"
#include "flame_output.h"
#include "table.h"
#include "groups.h"
#include "html_page.h"
#include "own_cost_report.h"
#include "util.h"

#define HTML_MAX_APIS 1500    /* per-API rows, the most total time first */
#define HTML_MAX_FRAMES 3000  /* flame graph frames, the widest */
#define HTML_MAX_MODULES 40
#define HTML_MAX_GPU_APIS 40
#define HTML_MAX_PROCESSES 256
#define HTML_MAX_BARS 500     /* step chart: more steps are shown as the mean of groups of steps */
#define HTML_MAX_STEPS (1 << 24)

typedef struct process {
    int64_t pid;
    uint64_t calls, self_ns, busy_ns, gpu_ns; /* busy: the cost of its outermost calls */
    int64_t steps;                            /* 1 + its largest step; 0: none */
    /* its outermost calls' cost in the first step its rows carry; stepping once they carry another: a
     * DataLoader's worker carries the step it was forked in, and steps nothing */
    int64_t first_step;
    uint64_t first_step_ns;
    int stepping;
} process_t;

typedef struct html {
    report_sink_t sink;
    const char *path;
    const report_sink_t *flame, *aggregate; /* the flame graph, and the per-API table */
    report_sink_t *ranks;                   /* --ranks: its section (NULL: none) */
    const report_sink_t *findings;          /* the findings: the page's first section */
    uint64_t *step_ns; /* per step, the cost of the outermost calls of every process */
    int64_t nsteps, step_capacity;
    process_t *processes;
    size_t nprocesses, process_capacity, last;
    group_table_t modules;
    /* For records whose model's path is "" (the C API's TW_MODULE_ROOT, files written before every
     * model was named by its class): FLOPs of the backward nodes charged to that model or to any
     * module in it, and the model's label (its forward's API). A model named by its class gets them
     * as every module does: the modules' backward FLOPs include those of the modules inside them */
    uint64_t root_bwd_flops, root_bwd_mem;
    char root_label[256];
    uint64_t first_ns, last_ns; /* the span of the calls */
    int oom;
} html_t;

/* What the page's sections read: the sink, what the pass saw, and the two sinks it shows. */
typedef struct page {
    html_t *h;
    const report_pass_t *pass;
    const group_table_t *groups; /* by api */
    const flame_t *flame;
} page_t;

static process_t *process_of(html_t *h, int64_t pid)
{
    /* A process's rows come together (a file is one process's): the last one is checked first. */
    if (h->nprocesses > 0 && h->processes[h->last].pid == pid)
        return &h->processes[h->last];
    for (size_t i = 0; i < h->nprocesses; i++)
        if (h->processes[i].pid == pid)
            return &h->processes[h->last = i];
    if (h->nprocesses == h->process_capacity) {
        size_t capacity = h->process_capacity ? h->process_capacity * 2 : 16;
        process_t *bigger = realloc(h->processes, capacity * sizeof *bigger);
        if (bigger == NULL)
            return NULL;
        h->processes = bigger;
        h->process_capacity = capacity;
    }
    h->processes[h->nprocesses] = (process_t){.pid = pid};
    return &h->processes[h->last = h->nprocesses++];
}

/* A row kept by the filters (GPU rows too). */
static int html_row(report_sink_t *sink, const tw_row_t *row, int kept)
{
    html_t *h = (html_t *)sink;
    process_t *p = process_of(h, row->pid);
    if (p == NULL) {
        h->oom = 1;
        return TW_ENOMEM;
    }
    if (row->kind == TW_FILE_GPU) {
        p->gpu_ns += row->cost_ns;
        return 0;
    }
    p->calls++;
    p->self_ns += row->self_ns;
    p->gpu_ns += row->gpu_ns; /* 0 where GPU files hold the GPU time */
    if (row->start_ns < h->first_ns)
        h->first_ns = row->start_ns;
    if (row->start_ns + row->cost_ns > h->last_ns)
        h->last_ns = row->start_ns + row->cost_ns;
    if (row->depth == 0 || row->parent_id == 0) {
        p->busy_ns += row->cost_ns;
        if (row->step >= 0 && row->step < HTML_MAX_STEPS) {
            if (row->step >= h->step_capacity) {
                int64_t capacity = h->step_capacity ? h->step_capacity : 256;
                while (capacity <= row->step)
                    capacity *= 2;
                uint64_t *bigger = realloc(h->step_ns, (size_t)capacity * sizeof *bigger);
                if (bigger == NULL) {
                    h->oom = 1;
                    return TW_ENOMEM;
                }
                memset(bigger + h->step_capacity, 0, (size_t)(capacity - h->step_capacity) * sizeof *bigger);
                h->step_ns = bigger;
                h->step_capacity = capacity;
            }
            h->step_ns[row->step] += row->cost_ns;
            if (row->step >= h->nsteps)
                h->nsteps = row->step + 1;
            if (p->steps == 0) /* (its first row with a step) */
                p->first_step = row->step;
            if (row->step == p->first_step && !p->stepping)
                p->first_step_ns += row->cost_ns;
            else
                p->stepping = 1;
            if (row->step >= p->steps)
                p->steps = row->step + 1;
        }
    }
    const char *label;
    size_t len = report_module_label(row, &label);
    if (len > 0) {
        group_t *g = report_group_get(&h->modules, label, len);
        if (g != NULL && row->fwd_call_id != 0) { /* an autograd node charged to the module: its backward */
            g->bwd_ns += row->cost_ns;
        } else if (g == NULL || tw_api_stats_add(&g->stats, row->cost_ns, row->self_ns, row->gpu_ns, row->error) != 0) {
            h->oom = 1;
        } else {
            g->flops += row->flops_total; /* the FLOPs of the calls inside its forward */
            g->mem_alloc += row->mem_alloc; /* and the bytes they allocated */
            g->mem_freed += row->mem_freed;
            if (row->mem_peak > g->mem_peak)
                g->mem_peak = row->mem_peak;
            if (row->module.len == 0 && row->has_module == 1 && h->root_label[0] == '\0')
                snprintf(h->root_label, sizeof h->root_label, "%.*s", (int)len, label);
        }
    }
    if (row->fwd_call_id != 0 && (row->flops | row->mem_alloc) != 0 && row->has_module == 1) {
        /* a node's backward FLOPs and bytes count for its module and every module around it: the
         * path's prefixes */
        h->root_bwd_flops += row->flops;
        h->root_bwd_mem += row->mem_alloc;
        for (size_t end = 0; end < row->module.len; end++) {
            if (end + 1 != row->module.len && row->module.ptr[end + 1] != '.')
                continue;
            group_t *m = report_group_get(&h->modules, row->module.ptr, end + 1);
            if (m == NULL)
                h->oom = 1;
            else {
                m->bwd_flops += row->flops;
                m->bwd_mem += row->mem_alloc;
            }
        }
    }
    return h->oom ? TW_ENOMEM : 0;
}

/* ---- writing ----------------------------------------------------------------------------------- */

static void text(FILE *out, const char *s)
{
    report_html_text(out, s, strlen(s));
}

static void ms(FILE *out, uint64_t ns)
{
    fprintf(out, "%.3f", (double)ns / 1e6);
}

static void us(FILE *out, uint64_t ns)
{
    fprintf(out, "%.2f", (double)ns / 1e3);
}

/* A cell of bytes in MiB after the previous cell ("</td><td>" first), blank for 0 (config memory). */
static void mib(FILE *out, uint64_t bytes)
{
    fputs("</td><td>", out);
    if (bytes != 0)
        fprintf(out, "%.4g", (double)bytes / 1048576.0);
}

static void card(FILE *out, const char *value, const char *label)
{
    fputs("<div class=\"card\"><b>", out);
    text(out, value);
    fputs("</b><span>", out);
    text(out, label);
    fputs("</span></div>\n", out);
}

static uint64_t median_of(uint64_t *values, size_t n);

static void section_summary(FILE *out, const page_t *pg)
{
    const tw_read_stats_t *stats = pg->pass->stats;
    const struct run_info *info = &pg->pass->in->info;
    const html_t *h = pg->h;
    char value[160];
    fputs("<section id=\"summary\"><h2>Run</h2><div class=\"cards\">\n", out);
    snprintf(value, sizeof value, "%s%s", info->host[0] ? info->host : "?", info->hosts > 1 ? " and others" : "");
    card(out, value, "host");
    card(out, info->torch[0] ? info->torch : "?", "torch");
    card(out, info->torchwrapper[0] ? info->torchwrapper : "?", "torchwrapper");
    snprintf(value, sizeof value, "%" PRId64, h->nsteps);
    card(out, value, "steps");
    snprintf(value, sizeof value, "%" PRIu64, stats->rows);
    card(out, value, "records read");
    snprintf(value, sizeof value, "%" PRIu64, info->dropped);
    card(out, info->manifests ? value : "?", "records dropped (manifests)");
    snprintf(value, sizeof value, "%zu", h->nprocesses);
    card(out, value, h->nprocesses == 1 ? "process" : "processes");
    snprintf(value, sizeof value, "%.3f s", h->last_ns > h->first_ns ? (double)(h->last_ns - h->first_ns) / 1e9 : 0.0);
    card(out, value, "from the first call to the last return");
    snprintf(value, sizeof value, "%.3f s", (double)report_flame_self_ns(pg->flame) / 1e9);
    card(out, value, "time in recorded calls (self, all threads)");
    const report_own_t *own = &info->own;
    if (own->manifests > 0 && own->run_ns > 0) {
        snprintf(value, sizeof value, "%.2f%%", 100.0 * (double)report_own_program_ns(own) / (double)own->run_ns);
        card(out, value, "the profiler's own cost (of the recording, on the program's threads)");
    }
    fputs("</div>\n<p class=\"note\">", out);
    size_t files = pg->pass->in->count;
    fprintf(out, "%zu record file%s, %.1f MB", files, files == 1 ? "" : "s", (double)stats->bytes / 1e6);
    if (info->manifests)
        fprintf(out, "; %" PRIu64 " records written by %zu process%s (their manifests)", info->written,
                info->manifests, info->manifests == 1 ? "" : "es");
    if (stats->truncated || stats->malformed)
        fprintf(out, "; skipped: %" PRIu64 " torn last lines, %" PRIu64 " malformed rows", stats->truncated,
                stats->malformed);
    if (pg->pass->filtered)
        fprintf(out, "; %" PRIu64 " records left out by the filters", pg->pass->filtered);
    if (pg->pass->oom || h->oom)
        fputs("; <b>out of memory: some calls are not counted</b>", out);
    fputs("</p>\n", out);
    char own_text[1024];
    report_own_text(own, own_text, sizeof own_text);
    if (own_text[0] != '\0') {
        fputs("<p class=\"note\" id=\"own-cost\">", out);
        text(out, own_text);
        fputs("</p>\n", out);
    }
    report_removed_text(info, own_text, sizeof own_text);
    if (own_text[0] != '\0') {
        fputs("<p class=\"note\" id=\"removed\">", out);
        text(out, own_text);
        fputs("</p>\n", out);
    }
    fputs("</section>\n", out);
}

static int compare_total(const void *a, const void *b)
{
    const group_t *x = *(group_t *const *)a, *y = *(group_t *const *)b;
    if (x->stats.total_ns != y->stats.total_ns)
        return x->stats.total_ns < y->stats.total_ns ? 1 : -1;
    return strcmp(x->key, y->key);
}

static int compare_gpu(const void *a, const void *b)
{
    const group_t *x = *(group_t *const *)a, *y = *(group_t *const *)b;
    if (x->stats.gpu_ns != y->stats.gpu_ns)
        return x->stats.gpu_ns < y->stats.gpu_ns ? 1 : -1;
    return strcmp(x->key, y->key);
}

/* The groups of t in an array (NULL without memory), sorted by compare. */
static group_t **sorted_groups(const group_table_t *t, int (*compare)(const void *, const void *), uint64_t *self)
{
    group_t **order = calloc(t->count ? t->count : 1, sizeof *order);
    size_t n = 0;
    *self = 0;
    for (size_t i = 0; order != NULL && i < t->capacity; i++) {
        if (t->slots[i] != NULL) {
            order[n++] = t->slots[i];
            *self += t->slots[i]->stats.self_ns;
        }
    }
    if (order != NULL)
        qsort(order, n, sizeof *order, compare);
    return order;
}

static void section_apis(FILE *out, const page_t *pg)
{
    uint64_t all_self;
    group_t **order = sorted_groups(pg->groups, compare_total, &all_self);
    if (order == NULL)
        return;
    size_t n = pg->groups->count, shown = n < HTML_MAX_APIS ? n : HTML_MAX_APIS;
    int gpu = pg->pass->have_gpu_files;
    for (size_t i = 0; i < n; i++)
        gpu |= order[i]->stats.gpu_ns != 0;
    fprintf(out, "<section id=\"apis\"><h2>Per API (%zu)</h2>\n", n);
    if (shown < n)
        fprintf(out, "<p class=\"note\">The %zu APIs with the most total time; %zu more in "
                     "<code>tw-report --format csv</code>.</p>\n", shown, n - shown);
    fputs("<p class=\"note\">Click a column's name to sort. Times in ms (us for the per-call columns); share: of "
          "all self time.</p>\n<div class=\"scroll\"><table class=\"sortable\" id=\"api-table\"><thead><tr>"
          "<th>api</th><th class=\"num\">calls</th><th class=\"num\">errors</th><th class=\"num\" data-dir=\"desc\">"
          "total ms</th><th class=\"num\">self ms</th>", out);
    if (gpu)
        fputs("<th class=\"num\">gpu ms</th>", out);
    int any_flops = 0;
    for (size_t i = 0; i < n; i++)
        any_flops |= (order[i]->flops | order[i]->bwd_flops) != 0;
    double peak = pg->pass->in->info.peak_flops;
    fputs("<th class=\"num\">mean us</th><th class=\"num\">p50 us</th><th class=\"num\">p95 us</th>"
          "<th class=\"num\">p99 us</th><th class=\"num\">max us</th><th class=\"num\">share %</th>", out);
    if (any_flops) /* forward and the charged nodes' backward, as tw-report's table */
        fprintf(out, "<th class=\"num\">GFLOP</th><th class=\"num\">TFLOP/s</th>%s",
                peak > 0 ? "<th class=\"num\">MFU %</th>" : "");
    int any_mem = 0;
    for (size_t i = 0; i < n; i++)
        any_mem |= (order[i]->mem_alloc | order[i]->mem_freed) != 0;
    if (any_mem) /* as tw-report's table: with the calls inside, of which self; the highest peak */
        fputs("<th class=\"num\">alloc MiB</th><th class=\"num\">self MiB</th><th class=\"num\">freed MiB</th>"
              "<th class=\"num\">peak MiB</th>", out);
    fputs("</tr></thead><tbody>\n", out);
    for (size_t i = 0; i < shown; i++) {
        const tw_api_stats_t *s = &order[i]->stats;
        fputs("<tr><td>", out);
        report_html_name(out, order[i]->key, order[i]->key_len);
        fprintf(out, "</td><td>%" PRIu64 "</td><td>%" PRIu64 "</td><td>", s->calls, s->errors);
        ms(out, s->total_ns);
        fputs("</td><td>", out);
        ms(out, s->self_ns);
        if (gpu) {
            fputs("</td><td>", out);
            ms(out, s->gpu_ns);
        }
        fputs("</td><td>", out);
        us(out, s->calls ? s->total_ns / s->calls : 0);
        fputs("</td><td>", out);
        us(out, tw_stats_percentile(s, 0.50));
        fputs("</td><td>", out);
        us(out, tw_stats_percentile(s, 0.95));
        fputs("</td><td>", out);
        us(out, tw_stats_percentile(s, 0.99));
        fputs("</td><td>", out);
        us(out, s->max_ns);
        fprintf(out, "</td><td>%.1f", all_self ? 100.0 * (double)s->self_ns / (double)all_self : 0.0);
        if (any_flops && (order[i]->flops | order[i]->bwd_flops) != 0) {
            double rate = report_flop_rate(order[i], BY_API);
            fprintf(out, "</td><td>%.4g</td><td>%.4g", (double)(order[i]->flops + order[i]->bwd_flops) / 1e9,
                    rate / 1e12);
            if (peak > 0)
                fprintf(out, "</td><td>%.2f", 100.0 * rate / peak);
        } else if (any_flops) { /* n/a: an API that computes with no formula (table.c) */
            fputs(report_flops_unknown(order[i], BY_API) ? "</td><td>n/a</td><td>" : "</td><td></td><td>", out);
            if (peak > 0)
                fputs("</td><td>", out);
        }
        if (any_mem) {
            mib(out, order[i]->mem_alloc);
            mib(out, order[i]->mem_self);
            mib(out, order[i]->mem_freed);
            mib(out, order[i]->mem_peak);
        }
        fputs("</td></tr>\n", out);
    }
    fputs("</tbody></table></div></section>\n", out);
    free(order);
}

static int section_flame(FILE *out, const page_t *pg)
{
    fprintf(out, "<section id=\"flame\"><h2>Flame graph: self time by %s</h2>\n"
                 "<p class=\"note\">Width is time. Hover a frame for its calls and times; click it to zoom in, click "
                 "the bottom frame (all) or Reset zoom to zoom out. Colours: the API's package.</p>\n"
                 "<input type=\"search\" id=\"tw-flame-search\" placeholder=\"Search frames (part of a name)\">\n",
            pg->pass->o->frames_by_module ? "module path" : "call stack");
    int rc = report_flame_write_svg(pg->flame, out, "tw-flame",
                                    pg->pass->o->frames_by_module ? "Self time by module path" : "Self time by call stack",
                                    HTML_MAX_FRAMES, 1);
    fputs("</section>\n", out);
    return rc;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median_of(uint64_t *values, size_t n)
{
    if (n == 0)
        return 0;
    qsort(values, n, sizeof *values, compare_u64);
    return values[n / 2];
}

/* Per-step time: the cost of the step's outermost calls, over every process, as bars. */
static void section_steps(FILE *out, const page_t *pg)
{
    const html_t *h = pg->h;
    if (h->nsteps == 0)
        return;
    /* the processes that step (ranks); where some do, the others (DataLoader workers, each in the one step
     * it was forked in) are left out of the steps' times, which would be theirs too, and of the mean */
    size_t processes = 0;
    for (size_t i = 0; i < h->nprocesses; i++)
        processes += h->processes[i].stepping;
    int workers_out = processes > 0;
    if (processes == 0)
        for (size_t i = 0; i < h->nprocesses; i++)
            processes += h->processes[i].steps > 0;
    if (processes == 0)
        processes = 1;
    int64_t group = (h->nsteps + HTML_MAX_BARS - 1) / HTML_MAX_BARS; /* steps a bar */
    int64_t bars = (h->nsteps + group - 1) / group;
    double *value = calloc((size_t)bars, sizeof *value);
    uint64_t *sorted = malloc((size_t)h->nsteps * sizeof *sorted);
    uint64_t *step_ns = malloc((size_t)h->nsteps * sizeof *step_ns);
    if (value == NULL || sorted == NULL || step_ns == NULL) {
        free(value);
        free(sorted);
        free(step_ns);
        return;
    }
    memcpy(step_ns, h->step_ns, (size_t)h->nsteps * sizeof *step_ns);
    for (size_t i = 0; workers_out && i < h->nprocesses; i++) {
        const process_t *p = &h->processes[i];
        if (!p->stepping && p->steps > 0 && p->first_step < h->nsteps)
            step_ns[p->first_step] -= p->first_step_ns;
    }
    double top = 0;
    int64_t slowest = 0;
    for (int64_t s = 0; s < h->nsteps; s++) {
        value[s / group] += (double)step_ns[s] / (double)processes / 1e6 / (double)group;
        sorted[s] = step_ns[s];
        if (step_ns[s] > step_ns[slowest])
            slowest = s;
    }
    for (int64_t b = 0; b < bars; b++)
        if (value[b] > top)
            top = value[b];
    uint64_t median = median_of(sorted, (size_t)h->nsteps);
    free(sorted);
    fprintf(out, "<section id=\"steps\"><h2>Steps (%" PRId64 ")</h2>\n<p class=\"note\">The time of each step's "
                 "outermost calls%s%s. Median step: %.3f ms; slowest: step %" PRId64 " at %.3f ms.</p>\n",
            h->nsteps, processes > 1 ? ", the mean over the processes" : "",
            group > 1 ? "; each bar is the mean of a group of steps" : "",
            (double)median / (double)processes / 1e6, slowest, (double)step_ns[slowest] / (double)processes / 1e6);
    const double width = 1000, height = 160, left = 84, bottom = 20;
    double bar = (width - left) / (double)bars;
    fprintf(out, "<svg id=\"step-chart\" viewBox=\"0 0 %.0f %.0f\" width=\"100%%\" style=\"max-width:%.0fpx\" "
                 "font-size=\"11\">\n",
            width, height + bottom, width);
    fprintf(out, "<line x1=\"%.0f\" y1=\"0\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#999\"/>"
                 "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#999\"/>\n",
            left, left, height, left, height, width, height);
    fprintf(out, "<text x=\"%.0f\" y=\"10\" text-anchor=\"end\">%.1f ms</text>"
                 "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">0</text>\n",
            left - 4, top, left - 4, height);
    fprintf(out, "<text x=\"%.0f\" y=\"%.0f\">step 0</text><text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">step "
                 "%" PRId64 "</text>\n",
            left, height + 15, width, height + 15, h->nsteps - 1);
    for (int64_t b = 0; b < bars && top > 0; b++) {
        double bh = value[b] / top * (height - 12);
        fprintf(out, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"#4a7cc9\">"
                     "<title>step%s %" PRId64,
                left + (double)b * bar + bar * 0.1, height - bh, bar * 0.8 > 0.5 ? bar * 0.8 : 0.5, bh,
                group > 1 ? "s" : "", b * group);
        if (group > 1)
            fprintf(out, "-%" PRId64, (b + 1) * group - 1 < h->nsteps - 1 ? (b + 1) * group - 1 : h->nsteps - 1);
        fprintf(out, ": %.3f ms</title></rect>\n", value[b]);
    }
    fputs("</svg></section>\n", out);
    free(step_ns);
    free(value);
}

static int64_t rank_of(const inputs_t *in, int64_t pid)
{
    for (size_t i = 0; i < in->nranks; i++)
        if (in->rank_pids[i][0] == pid)
            return in->rank_pids[i][1];
    return -1;
}

static int compare_busy(const void *a, const void *b)
{
    const process_t *x = a, *y = b;
    if (x->busy_ns != y->busy_ns)
        return x->busy_ns < y->busy_ns ? 1 : -1;
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* The processes side by side (ranks, or a launcher's children), the slowest marked. */
static void section_processes(FILE *out, const page_t *pg)
{
    html_t *h = pg->h;
    if (h->nprocesses < 2)
        return;
    qsort(h->processes, h->nprocesses, sizeof *h->processes, compare_busy);
    h->last = 0;
    uint64_t *busy = malloc(h->nprocesses * sizeof *busy);
    if (busy == NULL)
        return;
    for (size_t i = 0; i < h->nprocesses; i++)
        busy[i] = h->processes[i].busy_ns;
    uint64_t median = median_of(busy, h->nprocesses);
    free(busy);
    const process_t *slowest = &h->processes[0];
    int64_t slowest_rank = rank_of(pg->pass->in, slowest->pid);
    size_t shown = h->nprocesses < HTML_MAX_PROCESSES ? h->nprocesses : HTML_MAX_PROCESSES;
    fprintf(out, "<section id=\"processes\"><h2>Processes (%zu)</h2>\n<p class=\"note\">Busy: the time of a "
                 "process's outermost calls. Slowest: ",
            h->nprocesses);
    if (slowest_rank >= 0)
        fprintf(out, "rank %" PRId64 " (pid %" PRId64 ")", slowest_rank, slowest->pid);
    else
        fprintf(out, "pid %" PRId64, slowest->pid);
    fprintf(out, ", %.1f%% above the median process.%s</p>\n",
            median ? 100.0 * ((double)slowest->busy_ns - (double)median) / (double)median : 0.0,
            shown < h->nprocesses ? " The busiest processes only." : "");
    fputs("<div class=\"scroll\"><table class=\"sortable\" id=\"process-table\"><thead><tr><th>process</th>"
          "<th class=\"num\">rank</th><th class=\"num\">calls</th><th class=\"num\" data-dir=\"desc\">busy ms</th>"
          "<th class=\"num\">self ms</th><th class=\"num\">steps</th><th class=\"num\">ms per step</th>"
          "<th class=\"num\">gpu ms</th><th class=\"num\">vs median %</th><th style=\"width:25%\"></th></tr></thead>"
          "<tbody>\n", out);
    for (size_t i = 0; i < shown; i++) {
        const process_t *p = &h->processes[i];
        int64_t rank = rank_of(pg->pass->in, p->pid);
        fprintf(out, "<tr%s><td>pid %" PRId64 "</td><td>", i == 0 ? " class=\"slowest\"" : "", p->pid);
        if (rank >= 0)
            fprintf(out, "%" PRId64, rank);
        fprintf(out, "</td><td>%" PRIu64 "</td><td>", p->calls);
        ms(out, p->busy_ns);
        fputs("</td><td>", out);
        ms(out, p->self_ns);
        fprintf(out, "</td><td>%" PRId64 "</td><td>", p->steps);
        ms(out, p->steps ? p->busy_ns / (uint64_t)p->steps : 0);
        fputs("</td><td>", out);
        ms(out, p->gpu_ns);
        fprintf(out, "</td><td>%+.1f</td><td><div class=\"bar\" style=\"width:%.1f%%\"></div></td></tr>\n",
                median ? 100.0 * ((double)p->busy_ns - (double)median) / (double)median : 0.0,
                slowest->busy_ns ? 100.0 * (double)p->busy_ns / (double)slowest->busy_ns : 0.0);
    }
    fputs("</tbody></table></div></section>\n", out);
}

static void section_modules(FILE *out, const page_t *pg)
{
    const html_t *h = pg->h;
    if (h->modules.count == 0)
        return;
    uint64_t ignored;
    group_t **order = sorted_groups(&h->modules, compare_total, &ignored);
    if (order == NULL)
        return;
    /* groups made only for backward FLOPs (a ModuleList, whose forward never runs) are not shown */
    size_t n = 0;
    int any_flops = 0, any_mem = 0;
    for (size_t i = 0; i < h->modules.count; i++) {
        if (order[i]->stats.calls > 0)
            order[n++] = order[i];
        any_flops |= (order[i]->flops | order[i]->bwd_flops) != 0;
        any_mem |= (order[i]->mem_alloc | order[i]->bwd_mem) != 0;
    }
    size_t shown = n < HTML_MAX_MODULES ? n : HTML_MAX_MODULES;
    uint64_t top = n > 0 ? order[0]->stats.total_ns : 0;
    double peak = pg->pass->in->info.peak_flops;
    fprintf(out, "<section id=\"modules\"><h2>Modules (top %zu of %zu)</h2>\n<p class=\"note\">Each module's "
                 "forward calls: total includes the modules and calls inside it; the model is named by its "
                 "class, which every path in it starts with; bwd: the autograd nodes its forward created, in "
                 "backward passes.%s%s</p>\n"
                 "<table class=\"sortable\" id=\"module-table\"><thead><tr><th>module</th>"
                 "<th class=\"num\">calls</th><th class=\"num\" data-dir=\"desc\">total ms</th>"
                 "<th class=\"num\">self ms</th><th class=\"num\">bwd ms</th><th class=\"num\">mean us</th>"
                 "<th class=\"num\">p95 us</th>%s%s%s"
                 "<th style=\"width:25%%\"></th></tr></thead><tbody>\n",
            shown, n,
            any_flops ? " GFLOP: its forward calls' and the backward nodes' of it and of the modules inside it; "
                        "TFLOP/s: its forward calls' FLOPs over their time" : "",
            any_mem ? " alloc MiB: what its forward calls allocated, the modules inside included; bwd MiB: what "
                      "the backward nodes of it and of the modules inside it allocated; peak: the highest allocated "
                      "total during its forward calls" : "",
            any_flops ? "<th class=\"num\">GFLOP</th><th class=\"num\">fwd TFLOP/s</th>" : "",
            any_flops && peak > 0 ? "<th class=\"num\">fwd MFU %</th>" : "",
            any_mem ? "<th class=\"num\">alloc MiB</th><th class=\"num\">bwd MiB</th><th class=\"num\">peak MiB</th>"
                    : "");
    for (size_t i = 0; i < shown; i++) {
        const tw_api_stats_t *s = &order[i]->stats;
        fputs("<tr><td>", out);
        report_html_name(out, order[i]->key, order[i]->key_len);
        fprintf(out, "</td><td>%" PRIu64 "</td><td>", s->calls);
        ms(out, s->total_ns);
        fputs("</td><td>", out);
        ms(out, s->self_ns);
        fputs("</td><td>", out);
        ms(out, order[i]->bwd_ns);
        fputs("</td><td>", out);
        us(out, s->calls ? s->total_ns / s->calls : 0);
        fputs("</td><td>", out);
        us(out, tw_stats_percentile(s, 0.95));
        if (any_flops) {
            uint64_t bwd = order[i]->bwd_flops;
            if (strcmp(order[i]->key, h->root_label) == 0) /* the model: every node charged in it */
                bwd = h->root_bwd_flops;
            double rate = s->total_ns ? (double)order[i]->flops * 1e9 / (double)s->total_ns : 0.0;
            fprintf(out, "</td><td>%.4g</td><td>%.4g", (double)(order[i]->flops + bwd) / 1e9, rate / 1e12);
            if (peak > 0)
                fprintf(out, "</td><td>%.2f", 100.0 * rate / peak);
        }
        if (any_mem) {
            mib(out, order[i]->mem_alloc);
            mib(out, strcmp(order[i]->key, h->root_label) == 0 ? h->root_bwd_mem : order[i]->bwd_mem);
            mib(out, order[i]->mem_peak);
        }
        fprintf(out, "</td><td><div class=\"bar\" style=\"width:%.1f%%\"></div></td></tr>\n",
                top ? 100.0 * (double)s->total_ns / (double)top : 0.0);
    }
    fputs("</tbody></table></section>\n", out);
    free(order);
}

static void section_gpu(FILE *out, const page_t *pg)
{
    uint64_t ignored, all_gpu = 0;
    group_t **order = sorted_groups(pg->groups, compare_gpu, &ignored);
    if (order == NULL)
        return;
    size_t n = 0;
    while (n < pg->groups->count && order[n]->stats.gpu_ns > 0)
        all_gpu += order[n++]->stats.gpu_ns;
    if (n > 0) {
        size_t shown = n < HTML_MAX_GPU_APIS ? n : HTML_MAX_GPU_APIS;
        fprintf(out, "<section id=\"gpu\"><h2>GPU time per API (top %zu of %zu)</h2>\n<p class=\"note\">GPU time of "
                     "the kernels and copies each API launched: %.3f ms in all.</p>\n<table class=\"sortable\" "
                     "id=\"gpu-table\"><thead><tr><th>api</th><th class=\"num\" data-dir=\"desc\">gpu ms</th>"
                     "<th class=\"num\">calls</th><th class=\"num\">total ms (CPU)</th><th class=\"num\">share %%</th>"
                     "</tr></thead><tbody>\n",
                shown, n, (double)all_gpu / 1e6);
        for (size_t i = 0; i < shown; i++) {
            const tw_api_stats_t *s = &order[i]->stats;
            fputs("<tr><td>", out);
            report_html_name(out, order[i]->key, order[i]->key_len);
            fputs("</td><td>", out);
            ms(out, s->gpu_ns);
            fprintf(out, "</td><td>%" PRIu64 "</td><td>", s->calls);
            ms(out, s->total_ns);
            fprintf(out, "</td><td>%.1f</td></tr>\n", 100.0 * (double)s->gpu_ns / (double)all_gpu);
        }
        fputs("</tbody></table></section>\n", out);
    }
    free(order);
}

/* --html FILE: 0, or after a message on err the -errno of the failed open, TW_EIO (a write failed) or
 * TW_ENOMEM. */
static int html_write(report_sink_t *sink, const report_pass_t *pass, FILE *err)
{
    html_t *h = (html_t *)sink;
    const page_t page = {h, pass, report_aggregate_groups(h->aggregate), report_flame_of(h->flame)};
    const options_t *o = pass->o;
    FILE *out = fopen(h->path, "w");
    if (out == NULL) {
        int rc = -errno;
        fprintf(err, "tw-report: cannot write %s: %s\n", h->path, strerror(errno));
        return rc;
    }
    report_html_begin(out, "TorchWrapper report");
    fputs("<header><h1>TorchWrapper report</h1><p>", out);
    for (size_t i = 0; i < o->ninputs; i++) {
        text(out, o->inputs[i]);
        fputs(i + 1 < o->ninputs ? ", " : "", out);
    }
    fputs("</p></header>\n<main>\n", out);
    if (h->findings != NULL) {
        size_t count;
        const finding_t *found = report_findings_result(h->findings, &count);
        report_findings_write_html(found, count, report_findings_anatomy(h->findings), out);
    }
    section_summary(out, &page);
    section_steps(out, &page);
    int rc = section_flame(out, &page);
    section_apis(out, &page);
    section_processes(out, &page);
    if (h->ranks != NULL)
        report_ranks_write_html(report_ranks_result(h->ranks), out);
    section_modules(out, &page);
    section_gpu(out, &page);
    fputs("</main>\n", out);
    report_html_end(out);
    return report_close_output(out, h->path, rc, err);
}

static void html_free(report_sink_t *sink)
{
    html_t *h = (html_t *)sink;
    free(h->step_ns);
    free(h->processes);
    report_group_table_free(&h->modules);
    free(h);
}

static const report_sink_ops_t html_ops = {
    .name = "html",
    .row = html_row,
    .write = html_write,
    .free = html_free,
};

int report_html_open(const options_t *o, const report_sink_t *flame, const report_sink_t *aggregate,
                     report_sink_t *ranks, const report_sink_t *findings, report_sink_t **sink)
{
    html_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return TW_ENOMEM;
    h->sink = (report_sink_t){&html_ops, SINK_ROWS_KEPT};
    h->path = o->html;
    h->flame = flame;
    h->aggregate = aggregate;
    h->ranks = ranks;
    h->findings = findings;
    h->first_ns = UINT64_MAX;
    *sink = &h->sink;
    return 0;
}
