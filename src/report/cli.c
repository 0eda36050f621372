/* SPDX-License-Identifier: MIT */
/* tw-report, the command line: tw-report's options (--diff's too), parsed and checked, and its usage text. */
#include "config.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "torchwrapper/common.h"

#define USAGE                                                                                                     \
    "usage: tw-report [options] OUT_DIR|FILE...\n"                                                                 \
    "Per-API totals and percentiles from TorchWrapper record files (CSV or JSON lines, any number of\n"            \
    "processes and ranks), read in one streaming pass.\n\n"                                                        \
    "  --sort KEY        total (default), self, gpu, calls, mean, min, max, p50, p95, p99, name, flops, mem\n"     \
    "  --top N           the first N rows only\n"                                                                  \
    "  --by GROUP        api (default), thread, pid, parent (caller > callee), step, site (where the program\n"    \
    "                    made the calls, with the APIs called there: config sites); shape (an API and its\n"    \
    "                    input shapes, from the argument summaries: torch.profiler's group_by_input_shape);\n"  \
    "                    module: a row per module path (its forward calls, the backward nodes charged to it,\n" \
    "                    FLOPs, bytes and GPU time with those of the modules inside), or with --folded,\n"      \
    "                    --flamegraph and --html their frames are module paths. GPU time goes to each group\n"  \
    "                    through the call that launched the work (--by api: bwd_gpu_ns in CSV and JSON, that\n" \
    "                    of the autograd nodes charged to the API; --by parent's caller > callee rows: none)\n" \
    "  --api GLOB        only APIs matching the glob (repeatable)\n"                                               \
    "  --pid N           only process N (repeatable)\n"                                                            \
    "  --tid N           only thread N (repeatable)\n"                                                             \
    "  --window A:B      only calls starting between A and B seconds after the run's start (A or B may be empty)\n" \
    "  --steps A:B       only calls of steps A to B, both included (0 is the first; A or B may be empty; one\n"    \
    "                    number: that step); GPU records, which carry no step, are left out\n"                     \
    "  --format F        table (default), csv, json, markdown\n"                                                   \
    "  --trace FILE      also write the trace torch.profiler writes (Perfetto, chrome://tracing, HTA); .gz\n"     \
    "                    compresses; FILE a directory (or ending in /): a file per rank in it,\n"                  \
    "                    rankR.pt.trace.json.gz, as HTA's TraceAnalysis(trace_dir=...) reads them\n"              \
    "  --limit N         at most N calls in the trace (default 1000000; 0 for no limit)\n"                         \
    "  --tree STEP       instead of the table, the call tree of step STEP (0 is the first; all: every call) of\n" \
    "                    one thread (--tid, or the first call's): the calls' step column where the files have\n" \
    "                    it, else (or with --boundary) steps that end with an outermost --boundary call;\n"      \
    "                    --format json: the calls in the order shown, each with its level, api, module,\n"       \
    "                    backward, site, cost_ns and self_ns\n"                                                  \
    "  --boundary GLOB   the call that ends a step (default 'torch.optim.*.step')\n"                               \
    "  --max-depth N     --tree: N levels at most\n"                                                               \
    "  --folded FILE     also write folded stacks (flamegraph.pl, speedscope): self ns per stack of API names,\n"  \
    "                    or of module paths with --by module\n"                                                    \
    "  --flamegraph FILE also write an interactive SVG flame graph (hover, click to zoom, search)\n"               \
    "  --html FILE       also write a one-file HTML report: summary, per-API table, flame graph, steps,\n"         \
    "                    processes, modules, GPU time (no network needed to open it); with --diff, the diff\n"     \
    "  --backward VIEW   where autograd nodes go in --folded, --flamegraph, --html and --tree: charged\n"          \
    "                    (default: under the forward call that created them) or timeline (where they ran)\n"      \
    "  --diff BASE       compare the inputs (NEW) with BASE (a directory or file; repeat for more files): per\n"   \
    "                    API, time per step in both runs, the change, and whether it is beyond the step-to-step\n" \
    "                    noise; steps 1 to the last but one unless --steps (warm-up and a cut-off last step)\n"   \
    "  --findings        instead of the table: a typical step's parts and costliest lines, then what is wrong\n" \
    "                    in the run, where (the program's lines), what it costs and how to fix it, ranked by\n" \
    "                    cost; --format json|markdown\n"                                                       \
    "  --rules           the findings' catalogue: each rule, its severity thresholds and its source\n"          \
    "  --ranks           instead of the table: per step and rank the step's time, the skew and the slowest\n"   \
    "                    rank; the ranks by how often and how much they were slowest; for a rank slower than\n"  \
    "                    the others beyond noise (--alpha, --min-change), the APIs that explain it; on runs\n"  \
    "                    too short for that, a likely straggler and about how many more steps it needs; time\n" \
    "                    in collectives shown apart, never blamed; times on rank 0's clock (clock_sync)\n"       \
    "  --fail-above PCT  --diff: exit status 1 when a regression beyond noise exceeds PCT percent of BASE's step\n" \
    "  --alpha P         --diff, --ranks: the significance level of the per-step test (default 0.001)\n"                   \
    "  --min-change PCT  --diff, --ranks: changes under PCT percent of BASE's (the median rank's) step time\n"   \
    "                    are not flagged (default 4)\n"          \
    "  -j, --jobs N      read on N threads (default: the number of online CPUs; 1: one thread); the output\n"    \
    "                    is the same for any N. Files over 32 MiB are read in ranges. Only the table --by\n"     \
    "                    api, thread, pid, step or shape: the other outputs, and --diff, are read on one\n"      \
    "                    thread\n"                                                                                 \
    "  -h, --help        this text\n"

/* ---- options ----------------------------------------------------------------------------------- */

/* The index of value among names, or -1. */
static int pick(const char *value, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(value, names[i]) == 0)
            return i;
    return -1;
}

/* The parsers of option values below return 0, or -EINVAL when the value is not accepted. */

static int parse_count(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return -EINVAL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_window(const char *s, options_t *o)
{
    const char *colon = strchr(s, ':');
    if (colon == NULL)
        return -EINVAL;
    char *end;
    o->window_from = 0;
    o->window_to = -1;
    if (colon != s) {
        o->window_from = strtod(s, &end);
        if (end != colon || o->window_from < 0)
            return -EINVAL;
    }
    if (colon[1] != '\0') {
        o->window_to = strtod(colon + 1, &end);
        if (*end != '\0' || o->window_to < o->window_from)
            return -EINVAL;
    }
    o->has_window = 1;
    return 0;
}

/* --steps A:B, A:, :B or N: steps counted from 0, both ends included. */
static int parse_steps(const char *s, options_t *o)
{
    const char *colon = strchr(s, ':');
    uint64_t from = 0, to = 0;
    char a[32];
    size_t len = colon != NULL ? (size_t)(colon - s) : strlen(s);
    if (len >= sizeof a)
        return -EINVAL;
    memcpy(a, s, len);
    a[len] = '\0';
    if ((len > 0 || colon == NULL) && (parse_count(a, &from) != 0 || from > INT64_MAX))
        return -EINVAL;
    o->steps_from = (int64_t)from;
    o->steps_to = colon == NULL ? (int64_t)from : -1;
    if (colon != NULL && colon[1] != '\0') {
        if (parse_count(colon + 1, &to) != 0 || to > INT64_MAX || to < from)
            return -EINVAL;
        o->steps_to = (int64_t)to;
    }
    o->has_steps = 1;
    return 0;
}

/* A usage error: the message, then where the options are listed; returns -EINVAL. */
static int usage_error(FILE *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(FILE *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tw-report: ", err);
    vfprintf(err, fmt, ap);
    fputs("\n(tw-report --help lists the options)\n", err);
    va_end(ap);
    return -EINVAL;
}

/* ---- --diff's options ---------------------------------------------------------------------------- */

/* A percentage or a level: a finite number, nothing after it. */
static int parse_number(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v))
        return -EINVAL;
    *out = v;
    return 0;
}

/* --diff, --fail-above, --alpha, --min-change: 0 (*matched set when name is one of them), -EINVAL after
 * a usage message, or TW_ENOMEM after its message. */
static int parse_diff_option(const char *name, size_t name_len, const char *value, int argc, options_t *o,
                             FILE *err, int *matched)
{
#define IS(n) (name_len == strlen(n) && strncmp(name, n, name_len) == 0)
    *matched = IS("--diff") || IS("--fail-above") || IS("--alpha") || IS("--min-change");
    if (!*matched)
        return 0;
    if (value == NULL)
        return usage_error(err, "option %.*s needs a value", (int)name_len, name);
    double v;
    if (IS("--diff")) {
        if (o->diff_base == NULL && (o->diff_base = calloc((size_t)argc + 1, sizeof *o->diff_base)) == NULL) {
            fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
            return TW_ENOMEM;
        }
        o->diff_base[o->ndiff_base++] = value;
    } else if (IS("--fail-above")) {
        if (parse_number(value, &v) != 0 || v < 0)
            return usage_error(err, "--fail-above '%s' is not accepted: give a percentage of BASE's step time, "
                                         "a number >= 0 (e.g. 5 or 2.5)", value);
        o->diff_fail_above = v;
        o->diff_fail_above_given = 1;
    } else if (IS("--alpha")) {
        if (parse_number(value, &v) != 0 || !(v > 0 && v < 1))
            return usage_error(err, "--alpha '%s' is not accepted: give a significance level between 0 and 1, "
                                         "both excluded (e.g. 0.001)", value);
        o->diff_alpha = v;
    } else {
        if (parse_number(value, &v) != 0 || v < 0)
            return usage_error(err, "--min-change '%s' is not accepted: give a percentage of BASE's step time, "
                                         "a number >= 0 (e.g. 1 or 0.5)", value);
        o->diff_min_change = v;
        o->diff_min_change_given = 1;
    }
    return 0;
#undef IS
}


/* ---- the command line ---------------------------------------------------------------------------- */

int report_parse_options(int argc, char *const argv[], options_t *o, FILE *out, FILE *err)
{
    static const char *const sorts[] = {"total", "self", "gpu", "calls", "mean", "min", "max", "p50", "p95", "p99",
                                        "name", "flops", "mem"};
    static const char *const bys[] = {"api", "thread", "pid", "parent", "step", "site", "shape"};
    static const char *const formats[] = {"table", "csv", "json", "markdown"};
    memset(o, 0, sizeof *o);
    o->limit = 1000000;
    o->tree_step = -1;
    o->boundary = "torch.optim.*.step";
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->jobs = cpus < 1 ? 1 : cpus > REPORT_JOBS_MAX ? REPORT_JOBS_MAX : (unsigned)cpus;
    if ((o->inputs = calloc((size_t)argc + 1, sizeof *o->inputs)) == NULL) {
        fprintf(err, "tw-report: %s\n", tw_strerror(TW_ENOMEM));
        return TW_ENOMEM;
    }
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') {
            o->inputs[o->ninputs++] = a;
            continue;
        }
        if (strcmp(a, "--ranks") == 0) { /* the options without a value */
            o->ranks = 1;
            continue;
        }
        if (strcmp(a, "--findings") == 0) {
            o->findings = 1;
            continue;
        }
        if (strcmp(a, "--rules") == 0) {
            o->rules = 1;
            return 0;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, out);
            o->help = 1;
            return 0;
        }
        /* Every other option takes a value: --opt VALUE or --opt=VALUE (and -jN, as make takes it). */
        const char *eq = strchr(a, '=');
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        const char *value;
        if (a[1] == 'j' && a[2] != '\0' && a[2] != '=') {
            name_len = 2;
            value = a + 2;
        } else {
            value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        }
        int matched, diff_rc = parse_diff_option(a, name_len, value, argc, o, err, &matched);
        if (diff_rc != 0)
            return diff_rc;
        if (matched)
            continue;
#define IS(name) (name_len == strlen(name) && strncmp(a, name, name_len) == 0)
        if (!(IS("--sort") || IS("--top") || IS("--by") || IS("--api") || IS("--pid") || IS("--tid") ||
              IS("--window") || IS("--steps") || IS("--format") || IS("--trace") || IS("--limit") || IS("--tree") ||
              IS("--boundary") || IS("--max-depth") || IS("--folded") || IS("--flamegraph") || IS("--html") ||
              IS("--backward") || IS("-j") || IS("--jobs")))
            return usage_error(err, "unknown option '%.*s'", (int)name_len, a);
        if (value == NULL)
            return usage_error(err, "option %s needs a value", a);
        uint64_t n;
        int k;
        if (IS("--folded") || IS("--flamegraph") || IS("--html")) {
            if (value[0] == '\0')
                return usage_error(err, "%.*s needs a file name", (int)name_len, a);
            *(IS("--folded") ? &o->folded : IS("--flamegraph") ? &o->flamegraph : &o->html) = value;
        } else if (IS("-j") || IS("--jobs")) {
            if (parse_count(value, &n) != 0 || n < 1 || n > REPORT_JOBS_MAX)
                return usage_error(err, "%.*s '%s' is not accepted: give a number of threads from 1 to %d (1: read on "
                                        "one thread)", (int)name_len, a, value, REPORT_JOBS_MAX);
            o->jobs = (unsigned)n;
        } else if (IS("--backward")) {
            if (strcmp(value, "charged") != 0 && strcmp(value, "timeline") != 0)
                return usage_error(err, "--backward '%s' is not accepted: give charged or timeline", value);
            o->backward_timeline = strcmp(value, "timeline") == 0;
        } else if (IS("--by") && strcmp(value, "module") == 0) {
            o->frames_by_module = 1;
        } else if (IS("--sort")) {
            if ((k = pick(value, sorts, 13)) < 0)
                return usage_error(err, "--sort '%s' is not accepted: give total, self, gpu, calls, mean, min, max, "
                                        "p50, p95, p99, name, flops or mem", value);
            o->sort = (sort_key_t)k;
        } else if (IS("--by")) {
            if ((k = pick(value, bys, 7)) < 0)
                return usage_error(err, "--by '%s' is not accepted: give api, thread, pid, parent, step, site, shape "
                                        "or module", value);
            o->by = (group_by_t)k;
            o->frames_by_module = 0;
        } else if (IS("--format")) {
            if ((k = pick(value, formats, 4)) < 0)
                return usage_error(err, "--format '%s' is not accepted: give table, csv, json or markdown", value);
            o->format = (out_format_t)k;
        } else if (IS("--top") || IS("--limit") || IS("--tree") || IS("--max-depth")) {
            if (IS("--tree") && strcmp(value, "all") == 0)
                n = (uint64_t)REPORT_TREE_ALL;
            else if (parse_count(value, &n) != 0 || (IS("--tree") && n >= (uint64_t)REPORT_TREE_ALL))
                return usage_error(err, "%.*s '%s' is not a count (a whole number >= 0)%s", (int)name_len, a, value,
                                   IS("--tree") ? " nor all" : "");
            if (IS("--top"))
                o->top = (size_t)n;
            else if (IS("--limit"))
                o->limit = n;
            else if (IS("--tree"))
                o->tree_step = (int64_t)n;
            else
                o->max_depth = n;
        } else if (IS("--boundary")) {
            o->boundary = value;
            o->boundary_given = 1;
        } else if (IS("--api")) {
            if (o->napis == MAX_FILTERS)
                return usage_error(err, "at most %d --api globs", MAX_FILTERS);
            o->apis[o->napis++] = value;
        } else if (IS("--pid") || IS("--tid")) {
            int64_t v;
            char *end;
            errno = 0;
            v = strtoll(value, &end, 10);
            if (errno != 0 || end == value || *end != '\0')
                return usage_error(err, "%.*s '%s' is not a process or thread id (a whole number)", (int)name_len, a,
                                   value);
            if ((IS("--pid") ? o->npids : o->ntids) == MAX_FILTERS)
                return usage_error(err, "at most %d %.*s filters", MAX_FILTERS, (int)name_len, a);
            if (IS("--pid"))
                o->pids[o->npids++] = v;
            else
                o->tids[o->ntids++] = (uint64_t)v;
        } else if (IS("--window")) {
            if (parse_window(value, o) != 0)
                return usage_error(err, "--window '%s' is not accepted: give START:END in seconds after the run's "
                                        "start, START <= END, either may be empty (e.g. 10:20, 5:, :1.5)", value);
        } else if (IS("--steps")) {
            if (parse_steps(value, o) != 0)
                return usage_error(err, "--steps '%s' is not accepted: give FIRST:LAST, steps counted from 0, FIRST <= "
                                        "LAST, either may be empty (e.g. 7:9, 10:, :4), or one step (e.g. 5)", value);
        } else if (IS("--trace")) {
            o->trace = value;
        }
#undef IS
    }
    while (i < argc)
        o->inputs[o->ninputs++] = argv[i++];
    if (o->ninputs == 0 && o->ndiff_base > 0)
        return usage_error(err, "--diff BASE compares BASE with the run given as input (NEW): give NEW's directory "
                                "or record files too (tw-report --diff BASE NEW)");
    if (o->ninputs == 0)
        return usage_error(err, "no input: give an output directory or record files");
    /* --folded, --flamegraph, --html: stacks of API names, or of module paths */
    int stacks = o->folded || o->flamegraph || o->html;
    if (o->frames_by_module && !stacks) { /* the table by module: each module's forward calls and nodes */
        o->frames_by_module = 0;
        o->by = BY_MODULE;
    }
    if (stacks && (o->by != BY_API || o->tree_step >= 0))
        return usage_error(err, "--folded, --flamegraph and --html take --by api (the default) or --by module, "
                                "and not --tree");
    if (o->findings && (o->ndiff_base > 0 || o->tree_step >= 0 || o->by != BY_API || o->ranks))
        return usage_error(err, "--findings reads the whole run: it does not go with %s",
                           o->ndiff_base > 0 ? "--diff" : o->tree_step >= 0 ? "--tree" : o->ranks ? "--ranks" : "--by");
    if (o->ranks && (o->ndiff_base > 0 || o->tree_step >= 0 || o->by != BY_API || o->frames_by_module))
        return usage_error(err, "--ranks compares ranks per step and API: it does not go with %s",
                           o->ndiff_base > 0 ? "--diff" : o->tree_step >= 0 ? "--tree" : "--by");
    if (o->ndiff_base > 0 && (o->tree_step >= 0 || o->trace != NULL || o->has_window || o->by != BY_API || o->folded ||
                              o->flamegraph || o->frames_by_module))
        return usage_error(err, "--diff compares per API and step: it does not go with %s",
                           o->tree_step >= 0 ? "--tree" : o->trace != NULL ? "--trace"
                           : o->has_window ? "--window (give --steps)" : o->folded ? "--folded"
                           : o->flamegraph ? "--flamegraph (--html shows the diff)" : "--by");
    return 0;
}
