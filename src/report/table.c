/* SPDX-License-Identifier: MIT */
/* tw-report, the table: groups sorted by --sort, as text, CSV, JSON or Markdown, and its footer. */
#include "config.h"
#include "table.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/stats.h"

#include "chrome_trace.h"
#include "own_cost_report.h"
#include "util.h"

static uint64_t sort_value(const group_t *g, sort_key_t key)
{
    const tw_api_stats_t *s = &g->stats;
    switch (key) {
    case SORT_SELF: return s->self_ns;
    case SORT_GPU: return s->gpu_ns;
    case SORT_CALLS: return s->calls;
    case SORT_MEAN: return s->calls ? s->total_ns / s->calls : 0;
    case SORT_MIN: return s->min_ns;
    case SORT_MAX: return s->max_ns;
    case SORT_P50: return tw_stats_percentile(s, 0.50);
    case SORT_P95: return tw_stats_percentile(s, 0.95);
    case SORT_P99: return tw_stats_percentile(s, 0.99);
    case SORT_FLOPS: return g->flops + g->bwd_flops;
    case SORT_MEM: return g->mem_alloc + g->bwd_mem;
    default: return s->total_ns;
    }
}

static int compare_groups(const void *a, const void *b, void *arg)
{
    sort_key_t key = *(const sort_key_t *)arg;
    const group_t *x = *(group_t *const *)a, *y = *(group_t *const *)b;
    if (key != SORT_NAME) {
        uint64_t u = sort_value(x, key), v = sort_value(y, key);
        if (u != v)
            return u < v ? 1 : -1;
    }
    /* Numbers (steps, pids) in numeric order: shorter digit strings first. */
    if (x->key_len != y->key_len && x->key[0] >= '0' && x->key[0] <= '9' && y->key[0] >= '0' && y->key[0] <= '9' &&
        strspn(x->key, "0123456789") == x->key_len && strspn(y->key, "0123456789") == y->key_len)
        return x->key_len < y->key_len ? -1 : 1;
    return strcmp(x->key, y->key);
}

typedef struct row_values {
    const char *key;
    uint64_t calls, errors, total, self, gpu, mean, min, p50, p95, p99, max, bwd, flops, bwd_flops;
    double share, flop_s, mfu; /* mfu < 0: no peak known */
    uint64_t mem_alloc, mem_self, mem_freed, mem_peak, bwd_mem;
    int flops_unknown; /* report_flops_unknown() */
} row_values_t;

/*
 * The APIs that surely compute, below torch's Python surface (in C++, where no wrapper sees the
 * products they make), and have no FLOP formula in torchwrapper (python/core/below/flops.c): products
 * FlopCounterMode counts through the mm or bmm they run, convolutions outside conv*d, factorizations
 * and solvers, FFTs. Not listed: what FlopCounterMode itself leaves at 0 by rule (elementwise work,
 * reductions, norms, products of vectors: dot, mv, outer, kron) and Python functions whose products
 * are recorded calls inside them (their FLOPs are those calls'). Sorted (strcmp), for bsearch.
 */
static const char *const uncounted_apis[] = {
    "torch.Tensor.addbmm", "torch.Tensor.addbmm_", "torch.Tensor.cholesky", "torch.Tensor.cholesky_inverse",
    "torch.Tensor.cholesky_solve", "torch.Tensor.corrcoef", "torch.Tensor.cov", "torch.Tensor.det",
    "torch.Tensor.geqrf", "torch.Tensor.inner", "torch.Tensor.inverse", "torch.Tensor.istft", "torch.Tensor.logdet",
    "torch.Tensor.lu", "torch.Tensor.lu_solve", "torch.Tensor.matrix_exp", "torch.Tensor.matrix_power",
    "torch.Tensor.orgqr", "torch.Tensor.ormqr", "torch.Tensor.pinverse", "torch.Tensor.qr", "torch.Tensor.slogdet",
    "torch.Tensor.stft", "torch.Tensor.svd", "torch.Tensor.triangular_solve", "torch.addbmm", "torch.bilinear",
    "torch.cdist", "torch.chain_matmul", "torch.cholesky", "torch.cholesky_inverse", "torch.cholesky_solve",
    "torch.conv_tbc", "torch.convolution", "torch.corrcoef", "torch.cov", "torch.det", "torch.fft.fft",
    "torch.fft.fft2", "torch.fft.fftn", "torch.fft.hfft", "torch.fft.hfft2", "torch.fft.hfftn", "torch.fft.ifft",
    "torch.fft.ifft2", "torch.fft.ifftn", "torch.fft.ihfft", "torch.fft.ihfft2", "torch.fft.ihfftn",
    "torch.fft.irfft", "torch.fft.irfft2", "torch.fft.irfftn", "torch.fft.rfft", "torch.fft.rfft2",
    "torch.fft.rfftn", "torch.geqrf", "torch.inner", "torch.inverse", "torch.istft", "torch.linalg.cholesky",
    "torch.linalg.cholesky_ex", "torch.linalg.cond", "torch.linalg.det", "torch.linalg.eig", "torch.linalg.eigh",
    "torch.linalg.eigvals", "torch.linalg.eigvalsh", "torch.linalg.householder_product", "torch.linalg.inv",
    "torch.linalg.inv_ex", "torch.linalg.ldl_factor", "torch.linalg.ldl_factor_ex", "torch.linalg.ldl_solve",
    "torch.linalg.lstsq", "torch.linalg.lu", "torch.linalg.lu_factor", "torch.linalg.lu_factor_ex",
    "torch.linalg.lu_solve", "torch.linalg.matrix_exp", "torch.linalg.matrix_power", "torch.linalg.matrix_rank",
    "torch.linalg.multi_dot", "torch.linalg.pinv", "torch.linalg.qr", "torch.linalg.slogdet", "torch.linalg.solve",
    "torch.linalg.solve_ex", "torch.linalg.solve_triangular", "torch.linalg.svd", "torch.linalg.svdvals",
    "torch.linalg.tensorinv", "torch.linalg.tensorsolve", "torch.logdet", "torch.lu", "torch.lu_solve",
    "torch.matrix_exp", "torch.matrix_power", "torch.orgqr", "torch.ormqr", "torch.pinverse", "torch.qr",
    "torch.slogdet", "torch.stft", "torch.svd", "torch.tensordot", "torch.triangular_solve",
};

static int compare_names(const void *key, const void *item)
{
    return strcmp((const char *)key, *(const char *const *)item);
}

int report_flops_unknown(const group_t *g, group_by_t by)
{
    return by == BY_API && (g->flops | g->bwd_flops) == 0 &&
           bsearch(g->key, uncounted_apis, sizeof uncounted_apis / sizeof uncounted_apis[0], sizeof uncounted_apis[0],
                   compare_names) != NULL;
}

/*
 * Achieved FLOP/s of a group (config flops): on a GPU, its own records' FLOPs over their GPU time
 * (autograd nodes are groups of their own there); else its FLOPs with those of the nodes charged to
 * it over its calls' time and the nodes' (--by api, site), or over its self time for groups of
 * whole call trees (step, pid, thread: their total counts nested calls more than once). A module:
 * its forward calls' FLOPs over their time, their GPU time on a GPU (its backward's are spread over
 * nodes of many modules).
 */
double report_flop_rate(const group_t *g, group_by_t by)
{
    const tw_api_stats_t *s = &g->stats;
    if (by == BY_MODULE && s->gpu_ns > 0)
        return (double)g->flops * 1e9 / (double)s->gpu_ns;
    if (by == BY_MODULE)
        return s->total_ns ? (double)g->flops * 1e9 / (double)s->total_ns : 0.0;
    if (s->gpu_ns > 0)
        return (double)g->flops * 1e9 / (double)s->gpu_ns;
    uint64_t ns = by == BY_API || by == BY_SITE || by == BY_PARENT ? s->total_ns + g->bwd_ns : s->self_ns;
    return ns ? (double)(g->flops + g->bwd_flops) * 1e9 / (double)ns : 0.0;
}

static row_values_t values_of(const group_t *g, uint64_t all_self, group_by_t by, double peak)
{
    const tw_api_stats_t *s = &g->stats;
    double rate = report_flop_rate(g, by);
    return (row_values_t){g->key, s->calls, s->errors, s->total_ns, s->self_ns, s->gpu_ns,
                          s->calls ? s->total_ns / s->calls : 0, s->min_ns, tw_stats_percentile(s, 0.50),
                          tw_stats_percentile(s, 0.95), tw_stats_percentile(s, 0.99), s->max_ns, g->bwd_ns,
                          g->flops, g->bwd_flops, all_self ? 100.0 * (double)s->self_ns / (double)all_self : 0.0,
                          rate, peak > 0 ? 100.0 * rate / peak : -1.0, g->mem_alloc, g->mem_self, g->mem_freed,
                          g->mem_peak, g->bwd_mem, report_flops_unknown(g, by)};
}

static const char *group_title(group_by_t by)
{
    return by == BY_THREAD ? "pid/thread" : by == BY_PID ? "pid" : by == BY_PARENT ? "caller > api"
           : by == BY_STEP ? "step" : by == BY_SITE ? "site: APIs called there" : by == BY_MODULE ? "module"
           : by == BY_SHAPE ? "api [input shapes]" : "api";
}

static void print_ms(char *buf, size_t size, uint64_t ns)
{
    snprintf(buf, size, "%.3f", (double)ns / 1e6);
}

static void print_us(char *buf, size_t size, uint64_t ns)
{
    snprintf(buf, size, "%.2f", (double)ns / 1e3);
}

/* Columns a UTF-8 string takes (code points: API names hold no wide or combining characters). */
static size_t text_columns(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* The byte offset of code point i of s (its length when s is shorter). */
static size_t code_point_offset(const char *s, size_t i)
{
    size_t at = 0;
    for (; s[at] && i > 0; i--)
        for (at++; ((unsigned char)s[at] & 0xC0) == 0x80; at++)
            ;
    return at;
}

#define ELLIPSIS "\xe2\x80\xa6" /* U+2026, one column */

/* key with its middle elided to fit cap columns (cap >= 3): "torch.nn.functional.scal…attention"; a
 * new string, or NULL (out of memory). The end of a name tells methods apart, so both ends stay. */
static char *elide_middle(const char *key, size_t cap)
{
    size_t cols = text_columns(key), len = strlen(key);
    if (cols <= cap)
        return strdup(key);
    size_t head = (cap - 1) / 2, tail = cap - 1 - head;
    size_t head_bytes = code_point_offset(key, head), tail_at = code_point_offset(key, cols - tail);
    char *out = malloc(head_bytes + sizeof ELLIPSIS + (len - tail_at));
    if (out != NULL)
        sprintf(out, "%.*s" ELLIPSIS "%s", (int)head_bytes, key, key + tail_at);
    return out;
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The names shown for the first n groups: whole, or elided in the middle to cap columns where that
 * keeps every shown name distinct (otherwise all whole: a wide column rather than two rows that read
 * the same). Sets *width to the widest. Each is a new string; NULL when out of memory.
 */
static char **shown_names(group_t **order, size_t n, size_t cap, size_t *width)
{
    char **names = calloc(n ? n : 1, sizeof *names), **sorted = NULL;
    int elided = 0, whole = 0;
    for (size_t i = 0; names != NULL && i < n; i++) {
        if ((names[i] = elide_middle(order[i]->key, cap)) == NULL)
            goto fail;
        elided |= strcmp(names[i], order[i]->key) != 0;
    }
    if (names != NULL && elided && !whole) {
        if ((sorted = malloc(n * sizeof *sorted)) == NULL)
            goto fail;
        memcpy(sorted, names, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, compare_strings);
        for (size_t i = 1; i < n && !whole; i++)
            whole = strcmp(sorted[i - 1], sorted[i]) == 0;
        free(sorted);
        for (size_t i = 0; whole && i < n; i++) {
            free(names[i]);
            if ((names[i] = strdup(order[i]->key)) == NULL)
                goto fail;
        }
    }
    for (size_t i = 0; names != NULL && i < n; i++)
        if (text_columns(names[i]) > *width)
            *width = text_columns(names[i]);
    return names;
fail:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return NULL;
}

/* The optional columns a table has: those of some group's values. */
typedef struct columns {
    int gpu, bwd, flops, mem, bwd_mem;
    double peak; /* FLOP/s (MFU) */
    const report_own_t *own; /* --by step: the profiler's own cost a step (the manifests say it); NULL: none */
} columns_t;

/* The profiler's own time in step group g (--by step): its calls and nodes at the run's rates. */
static uint64_t own_of(const group_t *g, const report_own_t *own)
{
    int64_t step = g->key[0] >= '0' && g->key[0] <= '9' ? strtoll(g->key, NULL, 10) : -1;
    uint64_t nodes = g->nodes < g->stats.calls ? g->nodes : g->stats.calls;
    return report_own_step_ns(own, report_own_detail_step(own, step), g->stats.calls - nodes, nodes);
}

/* Whether the table shows column c (of print_rows' heads). */
static int shown_column(int c, const columns_t *k)
{
    return (c != 3 || k->bwd) && (c != 4 || k->gpu) && (c < 12 || c > 14 || k->flops) && (c != 14 || k->peak > 0) &&
           (c < 15 || c > 19 || k->mem) && (c != 19 || k->bwd_mem) && (c != 20 || k->own != NULL);
}

/* Bytes as MiB, blank for 0 (a group with no allocator report). */
static void print_mib(char *buf, size_t size, uint64_t bytes)
{
    if (bytes != 0)
        snprintf(buf, size, "%.4g", (double)bytes / 1048576.0);
}

/* Name column: the widest shown name, up to this many columns in the terminal table (Markdown shows
 * names whole). */
#define NAME_CAP 100

/* k->bwd: some API has autograd nodes charged to it (a "bwd" column: after self time in the table,
 * last in CSV and JSON, so that runs without backward nodes read as before). k->flops: some record
 * counted FLOPs (GFLOP: forward and the charged nodes' backward; TFLOP/s; MFU % with a peak: and in
 * CSV and JSON after bwd_ns). k->mem: some record carries memory (config memory: MiB allocated with
 * the calls inside, of which self, freed, the highest peak, and what the charged nodes allocated;
 * bytes in CSV and JSON, last). */
static void print_rows(FILE *out, const options_t *o, group_t **order, size_t n, uint64_t all_self,
                       const columns_t *k)
{
    static const char *const heads[] = {"calls", "total ms", "self ms", "bwd ms", "gpu ms", "mean us", "min us",
                                        "p50 us", "p95 us", "p99 us", "max us", "share %", "GFLOP", "TFLOP/s",
                                        "MFU %", "alloc MiB", "self MiB", "freed MiB", "peak MiB", "bwd MiB",
                                        "own ms"};
    enum { NCOLS = 21 };
    int any_bwd = k->bwd, any_flops = k->flops;
    double peak = k->peak;
    if (o->format == OUT_CSV) {
        /* bwd_gpu_ns last: the columns before it stay where they were */
        fprintf(out, "%s,calls,errors,total_ns,self_ns,gpu_ns,mean_ns,min_ns,p50_ns,p95_ns,p99_ns,max_ns,share%s%s%s%s%s%s\n",
                group_title(o->by), any_bwd ? ",bwd_ns" : "", any_flops ? ",flops,bwd_flops,flop_s" : "",
                any_flops && peak > 0 ? ",mfu" : "", k->mem ? ",mem_alloc,mem_self,mem_freed,mem_peak,bwd_mem" : "",
                any_bwd && k->gpu ? ",bwd_gpu_ns" : "", k->own != NULL ? ",own_ns" : "");
        for (size_t i = 0; i < n; i++) {
            row_values_t v = values_of(order[i], all_self, o->by, peak);
            report_csv_text(out, v.key);
            fprintf(out, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64
                         ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.4f",
                    v.calls, v.errors, v.total, v.self, v.gpu, v.mean, v.min, v.p50, v.p95, v.p99, v.max, v.share);
            if (any_bwd)
                fprintf(out, ",%" PRIu64, v.bwd);
            if (any_flops && v.flops_unknown) /* empty: not a 0 */
                fputs(peak > 0 ? ",,,," : ",,,", out);
            else if (any_flops)
                fprintf(out, ",%" PRIu64 ",%" PRIu64 ",%.6g", v.flops, v.bwd_flops, v.flop_s);
            if (any_flops && peak > 0 && !v.flops_unknown)
                fprintf(out, ",%.6g", v.mfu / 100.0);
            if (k->mem)
                fprintf(out, ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, v.mem_alloc, v.mem_self,
                        v.mem_freed, v.mem_peak, v.bwd_mem);
            if (any_bwd && k->gpu)
                fprintf(out, ",%" PRIu64, order[i]->bwd_gpu_ns);
            if (k->own != NULL)
                fprintf(out, ",%" PRIu64, own_of(order[i], k->own));
            fputc('\n', out);
        }
        return;
    }
    if (o->format == OUT_JSON) {
        /* gpu: the run has GPU time (GPU files, or records that carry it), which gpu_ns and
         * bwd_gpu_ns give per group: what a program computes rates over instead of CPU time */
        fprintf(out, "{\"group_by\":\"%s\",\"gpu\":%s,\"rows\":[", o->by == BY_API ? "api" : o->by == BY_THREAD ? "thread"
                                                       : o->by == BY_PID ? "pid" : o->by == BY_STEP ? "step"
                                                       : o->by == BY_SITE ? "site" : o->by == BY_SHAPE ? "shape"
                                                       : o->by == BY_MODULE ? "module" : "parent",
                k->gpu ? "true" : "false");
        for (size_t i = 0; i < n; i++) {
            row_values_t v = values_of(order[i], all_self, o->by, peak);
            fputs(i ? ",\n{\"key\":" : "\n{\"key\":", out);
            report_json_text(out, v.key);
            fprintf(out, ",\"calls\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"total_ns\":%" PRIu64 ",\"self_ns\":%" PRIu64
                         ",\"gpu_ns\":%" PRIu64 ",\"mean_ns\":%" PRIu64 ",\"min_ns\":%" PRIu64 ",\"p50_ns\":%" PRIu64
                         ",\"p95_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64 ",\"max_ns\":%" PRIu64 ",\"share\":%.4f",
                    v.calls, v.errors, v.total, v.self, v.gpu, v.mean, v.min, v.p50, v.p95, v.p99, v.max, v.share);
            if (any_bwd)
                fprintf(out, ",\"bwd_ns\":%" PRIu64, v.bwd);
            if (any_bwd && k->gpu) /* the GPU time of the nodes charged (bwd_ns's nodes) */
                fprintf(out, ",\"bwd_gpu_ns\":%" PRIu64, order[i]->bwd_gpu_ns);
            if (any_flops && v.flops_unknown)
                fputs(peak > 0 ? ",\"flops\":null,\"bwd_flops\":null,\"flop_s\":null,\"node_flops\":null,\"mfu\":null"
                               : ",\"flops\":null,\"bwd_flops\":null,\"flop_s\":null,\"node_flops\":null", out);
            else if (any_flops) /* node_flops: of flops, the autograd nodes' own (a step's backward) */
                fprintf(out, ",\"flops\":%" PRIu64 ",\"bwd_flops\":%" PRIu64 ",\"flop_s\":%.6g,\"node_flops\":%" PRIu64,
                        v.flops, v.bwd_flops, v.flop_s, order[i]->node_flops);
            if (any_flops && peak > 0 && !v.flops_unknown)
                fprintf(out, ",\"mfu\":%.6g", v.mfu / 100.0);
            if (k->mem)
                fprintf(out, ",\"mem_alloc\":%" PRIu64 ",\"mem_self\":%" PRIu64 ",\"mem_freed\":%" PRIu64
                             ",\"mem_peak\":%" PRIu64 ",\"bwd_mem\":%" PRIu64,
                        v.mem_alloc, v.mem_self, v.mem_freed, v.mem_peak, v.bwd_mem);
            if (k->own != NULL) /* the profiler's own time in the step (its calls and nodes at the run's rates) */
                fprintf(out, ",\"own_ns\":%" PRIu64, own_of(order[i], k->own));
            fputc('}', out);
        }
        fputs("\n]}\n", out);
        return;
    }
    /* Table and Markdown: the same cells, aligned; the GPU column only when there is GPU time. */
    int md = o->format == OUT_MARKDOWN;
    char (*cells)[NCOLS][24] = calloc(n ? n : 1, sizeof *cells);
    size_t width[NCOLS + 1] = {strlen(group_title(o->by))};
    char **names = cells != NULL ? shown_names(order, n, md ? (size_t)-1 : NAME_CAP, &width[0]) : NULL;
    if (names == NULL) {
        free(cells);
        return;
    }
    for (int c = 0; c < NCOLS; c++)
        width[c + 1] = strlen(heads[c]);
    for (size_t i = 0; i < n; i++) {
        row_values_t v = values_of(order[i], all_self, o->by, peak);
        snprintf(cells[i][0], 24, "%" PRIu64, v.calls);
        print_ms(cells[i][1], 24, v.total);
        print_ms(cells[i][2], 24, v.self);
        print_ms(cells[i][3], 24, v.bwd);
        print_ms(cells[i][4], 24, v.gpu);
        print_us(cells[i][5], 24, v.mean);
        print_us(cells[i][6], 24, v.min);
        print_us(cells[i][7], 24, v.p50);
        print_us(cells[i][8], 24, v.p95);
        print_us(cells[i][9], 24, v.p99);
        print_us(cells[i][10], 24, v.max);
        snprintf(cells[i][11], 24, "%.1f", v.share);
        if (v.flops + v.bwd_flops > 0) { /* blank for the groups that count none */
            snprintf(cells[i][12], 24, "%.4g", (double)(v.flops + v.bwd_flops) / 1e9);
            snprintf(cells[i][13], 24, "%.4g", v.flop_s / 1e12);
            snprintf(cells[i][14], 24, "%.2f", v.mfu);
        } else if (v.flops_unknown) { /* n/a for those that compute with no formula */
            snprintf(cells[i][12], 24, "n/a");
        }
        print_mib(cells[i][15], 24, v.mem_alloc);
        print_mib(cells[i][16], 24, v.mem_self);
        print_mib(cells[i][17], 24, v.mem_freed);
        print_mib(cells[i][18], 24, v.mem_peak);
        print_mib(cells[i][19], 24, v.bwd_mem);
        if (k->own != NULL)
            print_ms(cells[i][20], 24, own_of(order[i], k->own));
        for (int c = 0; c < NCOLS; c++)
            if (strlen(cells[i][c]) > width[c + 1])
                width[c + 1] = strlen(cells[i][c]);
    }
    const char *sep = md ? " | " : "  ";
    fprintf(out, "%s%-*s", md ? "| " : "", (int)width[0], group_title(o->by));
    for (int c = 0; c < NCOLS; c++)
        if (shown_column(c, k))
            fprintf(out, "%s%*s", sep, (int)width[c + 1], heads[c]);
    fputs(md ? " |\n" : "\n", out);
    if (md) {
        fputc('|', out);
        for (size_t i = 0; i < width[0] + 2; i++)
            fputc('-', out);
        for (int c = 0; c < NCOLS; c++)
            if (shown_column(c, k))
                fprintf(out, "|%.*s:", (int)width[c + 1] + 1, "--------------------------------");
        fputs("|\n", out);
    }
    for (size_t i = 0; i < n; i++) {
        fprintf(out, "%s%s%*s", md ? "| " : "", names[i], (int)(width[0] - text_columns(names[i])), "");
        free(names[i]);
        for (int c = 0; c < NCOLS; c++)
            if (shown_column(c, k))
                fprintf(out, "%s%*s", sep, (int)width[c + 1], cells[i][c]);
        fputs(md ? " |\n" : "\n", out);
    }
    free(names);
    free(cells);
}

int report_print_table(FILE *out, FILE *err, const group_table_t *groups, const report_pass_t *pass,
                       const report_sink_t *trace)
{
    const options_t *o = pass->o;
    const inputs_t *in = pass->in;
    const tw_read_stats_t *stats = pass->stats;
    double seconds = pass->seconds;
    size_t n = 0;
    group_t **order = report_group_list(groups, &n);
    if (order != NULL && o->by == BY_MODULE) { /* groups made only for backward FLOPs and bytes (a ModuleList,
                                                 * whose forward never runs) are not shown, as in --html */
        size_t kept = 0;
        for (size_t i = 0; i < n; i++)
            if (order[i]->stats.calls > 0)
                order[kept++] = order[i];
        n = kept;
    }
    uint64_t all_self = 0;
    columns_t k = {pass->have_gpu_files, 0, 0, 0, 0, in->info.peak_flops,
                   o->by == BY_STEP && in->info.own.manifests > 0 ? &in->info.own : NULL};
    for (size_t i = 0; i < n; i++) {
        const group_t *g = order[i];
        all_self += g->stats.self_ns;
        k.gpu |= (g->stats.gpu_ns | g->bwd_gpu_ns) != 0;
        k.bwd |= g->bwd_ns != 0;
        k.flops |= (g->flops | g->bwd_flops) != 0;
        k.mem |= (g->mem_alloc | g->mem_freed | g->bwd_mem) != 0;
        k.bwd_mem |= g->bwd_mem != 0;
    }
    qsort_r(order, n, sizeof *order, compare_groups, (void *)&o->sort);
    size_t shown = o->top && o->top < n ? o->top : n;
    if (stats->rows == 0 && in->count > 0)
        fprintf(err, "tw-report: the record files hold no records yet (%zu file%s)\n", in->count,
                in->count == 1 ? "" : "s");
    print_rows(out, o, order, shown, all_self, &k);
    free(order);
    /* The footer goes under the terminal table; with CSV, JSON or Markdown it goes to err, and only
     * when something was skipped, so that the output stays clean. */
    int table = o->format == OUT_TABLE;
    FILE *note = table ? out : err;
    if (table || stats->truncated || stats->malformed) {
        fprintf(note, "%s%" PRIu64 " records from %zu file%s (%.1f MB) in %.2f s (%.0f MB/s)", table ? "\n"
                : "tw-report: ", stats->rows, in->count, in->count == 1 ? "" : "s", (double)stats->bytes / 1e6,
                seconds, seconds > 0 ? (double)stats->bytes / 1e6 / seconds : 0.0);
        if (shown < n)
            fprintf(note, "; %zu more row%s (--top)", n - shown, n - shown == 1 ? "" : "s");
        if (stats->truncated || stats->malformed)
            fprintf(note, "; skipped: %" PRIu64 " torn last line%s (a killed process), %" PRIu64
                          " malformed row%s", stats->truncated, stats->truncated == 1 ? "" : "s", stats->malformed,
                    stats->malformed == 1 ? "" : "s");
        if (pass->filtered)
            fprintf(note, "; %" PRIu64 " filtered out", pass->filtered);
        if (trace != NULL) {
            uint64_t events, skipped;
            size_t files;
            report_chrome_trace_counts(trace, &events, &skipped, &files);
            fprintf(note, "; trace: %" PRIu64 " calls in %s", events, o->trace);
            if (files != 1)
                fprintf(note, " (%zu files)", files);
            fputs(skipped ? " (--limit reached)" : "", note);
        }
        fputc('\n', note);
    }
    char own[1024];
    report_own_text(&in->info.own, own, sizeof own);
    if (table && own[0] != '\0') /* what recording this cost the program, under every terminal table */
        fprintf(out, "%s%s\n", own, k.own != NULL ? " (own ms: a step's calls and nodes at these rates)" : "");
    report_removed_text(&in->info, own, sizeof own);
    if (table && own[0] != '\0')
        fprintf(out, "%s\n", own);
    return 0;
}
