/* SPDX-License-Identifier: MIT */
/*
 * tw-report --ranks, the output: tables as text or markdown (the ranks, each straggler's APIs, the
 * steps), the step x rank table as CSV, everything as JSON (what torchwrapper.ranks() reads), and
 * --html's section.
 */
#include "config.h"
#include "ranks_output.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "html_page.h"
#include "util.h"

#define RANK_COLUMNS_MAX 8 /* the steps table shows each rank's time up to this many ranks */
#define STEPS_SHOWN 40     /* beyond it, the steps with the largest skew */

/* ---- a table of text cells, printed aligned or as markdown --------------------------------------- */

typedef struct tab {
    size_t ncols;
    char **cells;
    size_t count, capacity;
    int failed;
} tab_t;

static void tab_add(tab_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tab_add(tab_t *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    if (t->count == t->capacity) {
        size_t capacity = t->capacity ? 2 * t->capacity : 64;
        char **bigger = realloc(t->cells, capacity * sizeof *bigger);
        if (bigger == NULL) {
            t->failed = 1;
            return;
        }
        t->cells = bigger;
        t->capacity = capacity;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&t->cells[t->count], fmt, ap);
    va_end(ap);
    if (n < 0)
        t->failed = 1;
    else
        t->count++;
}

/* Prints the table (its first row the header) and frees it; 0 or TW_ENOMEM. */
static int tab_print(tab_t *t, FILE *out, int markdown)
{
    int rc = t->failed ? TW_ENOMEM : 0;
    size_t widths[32] = {0};
    for (size_t i = 0; rc == 0 && i < t->count; i++) {
        size_t w = strlen(t->cells[i]);
        if (w > widths[i % t->ncols])
            widths[i % t->ncols] = w;
    }
    for (size_t i = 0; rc == 0 && i < t->count; i++) {
        size_t c = i % t->ncols;
        int last = c + 1 == t->ncols;
        if (markdown) {
            fprintf(out, "| %s %s", t->cells[i], last ? "|\n" : "");
            if (last && i + 1 == t->ncols) {
                for (size_t k = 0; k < t->ncols; k++)
                    fputs(k == 0 ? "|---|" : "---|", out);
                fputc('\n', out);
            }
        } else {
            /* text left-aligned in the first column, numbers right-aligned in the others */
            fprintf(out, c == 0 ? "%-*s" : "  %*s", (int)widths[c], t->cells[i]);
            if (last)
                fputc('\n', out);
        }
    }
    for (size_t i = 0; i < t->count; i++)
        free(t->cells[i]);
    free(t->cells);
    *t = (tab_t){0};
    return rc;
}

static double ms(double ns)
{
    return ns / 1e6;
}

static const char *rank_label(const ranks_rank_t *k, char *buf, size_t size)
{
    if (k->rank >= 0)
        snprintf(buf, size, "%" PRId64, k->rank);
    else
        snprintf(buf, size, "pid %" PRId64, k->pid);
    return buf;
}

static const char *verdict(const ranks_rank_t *k)
{
    return k->straggler ? "straggler" : k->likely ? "likely" : "-";
}

static void say_steps(const ranks_result_t *r, FILE *out)
{
    fprintf(out, "%zu ranks, steps %" PRId64 " to %" PRId64 " compared%s. Busy: a rank's recorded time in a step "
                 "(its calls' self time) less its wait in collectives (torch.distributed, and DDP's allreduce "
                 "waited for in backward), which is shown apart and never blamed.\n",
            r->nranks, r->first_step, r->last_step,
            r->steps_cut ? " (the first, a warm-up, and the last, maybe cut off, left out; --steps to choose)" : "");
    if (r->clocks > 0)
        fprintf(out, "Clocks: %zu of %zu ranks' times moved to rank 0's clock, within %.3f ms (the largest "
                     "round-trip error measured).\n", r->clocks, r->nranks, ms((double)r->clock_error_ns));
    else
        fprintf(out, "Clocks: not aligned (no rank's manifest holds a measured offset: clock_sync).\n");
    if (r->other_processes > 0)
        fprintf(out, "%zu other processes (no rank, or not a rank's main process) left out.\n", r->other_processes);
}

static int print_text(const ranks_result_t *r, FILE *out, int markdown)
{
    say_steps(r, out);
    fputc('\n', out);
    char label[48];
    tab_t t = {.ncols = 9};
    const char *head[] = {"rank", "pid", "slowest in", "extra ms", "busy ms/step", "wait ms/step", "vs others ms",
                          "p", "verdict"};
    for (size_t c = 0; c < 9; c++)
        tab_add(&t, "%s", head[c]);
    size_t stragglers = 0;
    for (size_t n = 0; n < r->nranks; n++) {
        const ranks_rank_t *k = &r->by_rank[r->order[n]];
        stragglers += (size_t)k->straggler;
        tab_add(&t, "%s", rank_label(k, label, sizeof label));
        tab_add(&t, "%" PRId64, k->pid);
        tab_add(&t, "%zu of %zu", k->slowest_steps, r->nsteps);
        tab_add(&t, "%.3f", ms(k->slowest_extra_ns));
        tab_add(&t, "%.3f", ms(k->busy_ns));
        tab_add(&t, "%.3f", ms(k->wait_ns));
        tab_add(&t, "%+.3f (%+.1f%%)", ms(k->change_ns), k->change_pct);
        tab_add(&t, isnan(k->p_value) ? "-" : "%.2g", k->p_value);
        tab_add(&t, "%s", verdict(k));
    }
    int rc = tab_print(&t, out, markdown);
    fputc('\n', out);
    if (stragglers == 0)
        fprintf(out, "No rank is slower than the others beyond noise (p < %g and at least %g%% of a step's %.3f ms).\n",
                r->alpha, r->min_change_pct, ms(r->step_time_ns));
    for (size_t n = 0; rc == 0 && n < r->nranks; n++) {
        const ranks_rank_t *k = &r->by_rank[r->order[n]];
        if (k->straggler)
            fprintf(out, "Rank %s is slower than the others beyond noise by %.3f ms a step (%.1f%% of a step's %.3f ms, "
                         "p %.2g). Its extra time by API (self time per step, median over steps, against the median "
                         "of the other ranks'):\n",
                    rank_label(k, label, sizeof label), ms(k->change_ns), k->change_pct, ms(r->step_time_ns),
                    k->p_value);
        else if (k->likely) {
            fprintf(out, "Likely straggler: rank %s slowest in %zu of %zu steps; ", rank_label(k, label, sizeof label),
                    k->slowest_steps, r->nsteps);
            if (k->more_steps > 0)
                fprintf(out, "about %zu more steps for significance", k->more_steps);
            else
                fputs("too far from significance to say how many more steps", out);
            fprintf(out, " (slower by %.3f ms a step, %.1f%% of a step's %.3f ms, p %.2g where --alpha is %g; slowest "
                         "in that many steps by chance: p %.2g, the sign test over %zu ranks; the steps estimated as if "
                         "the next ones were like these). Its extra time by API, not yet beyond noise (p < %g):\n",
                    ms(k->change_ns), k->change_pct, ms(r->step_time_ns), k->p_value, r->alpha, k->sign_p, r->nranks,
                    r->likely_alpha);
        } else
            continue;
        if (k->napis == 0) {
            if (k->straggler)
                fprintf(out, "  no single API beyond noise: the time is spread over many\n\n");
            else
                fprintf(out, "  no API below p %g on its own yet: too few steps to tell\n\n", r->likely_alpha);
            continue;
        }
        t = (tab_t){.ncols = 6};
        const char *h[] = {"api", "rank ms", "others ms", "extra ms", "% of step", "p"};
        for (size_t c = 0; c < 6; c++)
            tab_add(&t, "%s", h[c]);
        for (size_t a = 0; a < k->napis; a++) {
            const ranks_api_t *api = &k->apis[a];
            tab_add(&t, "%s", api->api);
            tab_add(&t, "%.3f", ms(api->rank_ns));
            tab_add(&t, "%.3f", ms(api->others_ns));
            tab_add(&t, "%+.3f", ms(api->change_ns));
            tab_add(&t, "%.1f%%", api->change_pct);
            tab_add(&t, "%.2g", api->p_value);
        }
        rc = tab_print(&t, out, markdown);
        fputc('\n', out);
    }
    if (rc != 0)
        return rc;
    /* The steps: all of them when few, else the largest skews (in step order) */
    size_t shown = r->nsteps;
    unsigned char *show = malloc(r->nsteps + 1);
    if (show == NULL)
        return TW_ENOMEM;
    memset(show, 1, r->nsteps + 1);
    if (r->nsteps > STEPS_SHOWN) {
        double *skews = malloc(r->nsteps * sizeof *skews);
        if (skews == NULL) {
            free(show);
            return TW_ENOMEM;
        }
        for (size_t k = 0; k < r->nsteps; k++)
            skews[k] = r->steps[k].skew_ns;
        /* the STEPS_SHOWN-th largest skew, by selection over a sorted copy */
        for (size_t i = 1; i < r->nsteps; i++)
            for (size_t j = i; j > 0 && skews[j - 1] < skews[j]; j--) {
                double v = skews[j];
                skews[j] = skews[j - 1];
                skews[j - 1] = v;
            }
        double bar = skews[STEPS_SHOWN - 1];
        free(skews);
        shown = 0;
        for (size_t k = 0; k < r->nsteps; k++)
            shown += show[k] = r->steps[k].skew_ns >= bar && shown < STEPS_SHOWN;
    }
    int columns = r->nranks <= RANK_COLUMNS_MAX;
    fprintf(out, "Steps%s: skew = the slowest rank's busy time less the median rank's%s\n",
            shown < r->nsteps ? " with the largest skew" : "", columns ? "; busy ms per rank" : "");
    t = (tab_t){.ncols = 4 + (columns ? r->nranks : 0)};
    tab_add(&t, "step");
    tab_add(&t, "skew ms");
    tab_add(&t, "slowest");
    tab_add(&t, "median ms");
    for (size_t j = 0; columns && j < r->nranks; j++)
        tab_add(&t, "r%s", rank_label(&r->by_rank[j], label, sizeof label));
    for (size_t k = 0; k < r->nsteps; k++) {
        if (!show[k])
            continue;
        const ranks_step_t *s = &r->steps[k];
        tab_add(&t, "%" PRId64, s->step);
        tab_add(&t, "%.3f", ms(s->skew_ns));
        tab_add(&t, "%s", s->slowest == SIZE_MAX ? "-" : rank_label(&r->by_rank[s->slowest], label, sizeof label));
        tab_add(&t, "%.3f", ms(s->median_busy_ns));
        for (size_t j = 0; columns && j < r->nranks; j++)
            tab_add(&t, "%.3f", ms((double)r->busy_ns[k * r->nranks + j]));
    }
    free(show);
    rc = tab_print(&t, out, markdown);
    if (shown < r->nsteps)
        fprintf(out, "(%zu steps more: --format csv or json lists every step and rank)\n", r->nsteps - shown);
    return rc;
}

static void print_csv(const ranks_result_t *r, FILE *out)
{
    fputs("step,rank,pid,step_ns,wait_ns,busy_ns,slowest,skew_ns,start_ns,end_ns\n", out);
    for (size_t k = 0; k < r->nsteps; k++)
        for (size_t j = 0; j < r->nranks; j++) {
            size_t at = k * r->nranks + j;
            fprintf(out, "%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%d,%.0f,%" PRId64
                         ",%" PRId64 "\n", r->steps[k].step, r->by_rank[j].rank, r->by_rank[j].pid, r->step_ns[at],
                    r->wait_ns[at], r->busy_ns[at], r->steps[k].slowest == j, r->steps[k].skew_ns, r->start_ns[at],
                    r->end_ns[at]);
        }
}

/* A double as JSON (null for NAN). */
/* Named numbers, written "key":value with a comma between them (none before the first or after the last). */
typedef struct {
    const char *key;
    double value;
    const char *fmt;
} json_field_t;

static void json_numbers(FILE *out, const json_field_t *fields, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(',', out);
        report_json_double(out, fields[i].key, fields[i].value, fields[i].fmt);
    }
}

static void print_json(const ranks_result_t *r, FILE *out)
{
    fprintf(out, "{\"first_step\":%" PRId64 ",\"last_step\":%" PRId64 ",\"steps_cut\":%s,", r->first_step,
            r->last_step, r->steps_cut ? "true" : "false");
    report_json_double(out, "step_ns", r->step_time_ns, "%.1f");
    fprintf(out, ",\"alpha\":%g,\"likely_alpha\":%g,\"min_change_pct\":%g,\"clock_error_ns\":", r->alpha,
            r->likely_alpha, r->min_change_pct);
    if (r->clock_error_ns >= 0)
        fprintf(out, "%" PRId64, r->clock_error_ns);
    else
        fputs("null", out);
    fprintf(out, ",\"clocks\":%zu,\"other_processes\":%zu,\"no_step_rows\":%" PRIu64 ",\n\"ranks\":[", r->clocks,
            r->other_processes, r->no_step_rows);
    for (size_t n = 0; n < r->nranks; n++) {
        const ranks_rank_t *k = &r->by_rank[r->order[n]];
        fprintf(out, "%s\n{\"rank\":%" PRId64 ",\"pid\":%" PRId64 ",\"slowest_steps\":%zu,", n ? "," : "", k->rank,
                k->pid, k->slowest_steps);
        const json_field_t rank_fields[] = {
            {"slowest_extra_ns", k->slowest_extra_ns, "%.1f"}, {"step_ns", k->step_ns, "%.1f"},
            {"wait_ns", k->wait_ns, "%.1f"},   {"busy_ns", k->busy_ns, "%.1f"},
            {"change_ns", k->change_ns, "%.1f"}, {"change_pct", k->change_pct, "%.3f"},
            {"p_value", k->p_value, "%.6g"},
        };
        json_numbers(out, rank_fields, sizeof rank_fields / sizeof rank_fields[0]);
        fprintf(out, ",\"straggler\":%s,\"likely\":%s,", k->straggler ? "true" : "false",
                k->likely ? "true" : "false");
        report_json_double(out, "sign_p", k->sign_p, "%.6g");
        fputs(",\"more_steps\":", out);
        if (k->likely && k->more_steps > 0)
            fprintf(out, "%zu", k->more_steps);
        else
            fputs("null", out);
        fputs(",\"clock_offset_ns\":", out);
        if (k->has_clock)
            fprintf(out, "%" PRId64 ",\"clock_error_ns\":%" PRId64, k->clock_offset_ns, k->clock_error_ns);
        else
            fputs("null,\"clock_error_ns\":null", out);
        fputs(",\"apis\":[", out);
        for (size_t a = 0; a < k->napis; a++) {
            const ranks_api_t *api = &k->apis[a];
            fprintf(out, "%s{\"api\":", a ? "," : "");
            report_json_text(out, api->api);
            fputc(',', out);
            const json_field_t api_fields[] = {
                {"rank_ns", api->rank_ns, "%.1f"},       {"others_ns", api->others_ns, "%.1f"},
                {"change_ns", api->change_ns, "%.1f"},   {"change_pct", api->change_pct, "%.3f"},
                {"p_value", api->p_value, "%.6g"},
            };
            json_numbers(out, api_fields, sizeof api_fields / sizeof api_fields[0]);
            fputc('}', out);
        }
        fputs("]}", out);
    }
    fputs("],\n\"steps\":[", out);
    for (size_t k = 0; k < r->nsteps; k++) {
        const ranks_step_t *s = &r->steps[k];
        fprintf(out, "%s\n{\"step\":%" PRId64 ",", k ? "," : "", s->step);
        if (s->slowest == SIZE_MAX)
            fputs("\"slowest_rank\":null,\"slowest_pid\":null,", out);
        else
            fprintf(out, "\"slowest_rank\":%" PRId64 ",\"slowest_pid\":%" PRId64 ",", r->by_rank[s->slowest].rank,
                    r->by_rank[s->slowest].pid);
        report_json_double(out, "skew_ns", s->skew_ns, "%.1f");
        fputc(',', out);
            report_json_double(out, "median_busy_ns", s->median_busy_ns, "%.1f");
        fputc('}', out);
    }
    fputs("],\n\"cells\":[", out);
    for (size_t k = 0; k < r->nsteps; k++)
        for (size_t j = 0; j < r->nranks; j++) {
            size_t at = k * r->nranks + j;
            fprintf(out, "%s\n{\"step\":%" PRId64 ",\"rank\":%" PRId64 ",\"pid\":%" PRId64 ",\"step_ns\":%" PRIu64
                         ",\"wait_ns\":%" PRIu64 ",\"busy_ns\":%" PRIu64 ",\"start_ns\":%" PRId64 ",\"end_ns\":%" PRId64
                         "}", at ? "," : "", r->steps[k].step, r->by_rank[j].rank, r->by_rank[j].pid, r->step_ns[at],
                    r->wait_ns[at], r->busy_ns[at], r->start_ns[at], r->end_ns[at]);
        }
    fputs("]}\n", out);
}

int report_ranks_print(const ranks_result_t *r, const options_t *o, FILE *out, FILE *err)
{
    if (r->no_step_rows > 0 && r->nranks == 0) {
        fprintf(err, "tw-report: --ranks compares steps, and these records carry no step (files written before the "
                     "step column)\n");
        return TW_EINVAL;
    }
    if (r->nranks == 0 || r->nsteps == 0) {
        fprintf(err, "tw-report: --ranks: no call records with steps in the inputs\n");
        return TW_EINVAL;
    }
    int rc = 0;
    switch (o->format) {
    case OUT_CSV:
        print_csv(r, out);
        break;
    case OUT_JSON:
        print_json(r, out);
        break;
    default:
        rc = print_text(r, out, o->format == OUT_MARKDOWN);
    }
    if (rc != 0)
        fprintf(err, "tw-report: %s\n", tw_strerror(rc));
    return rc;
}

void report_ranks_write_html(const ranks_result_t *r, FILE *out)
{
    if (r == NULL || r->nranks == 0 || r->nsteps == 0)
        return;
    char label[48];
    fprintf(out, "<section id=\"ranks\"><h2>Ranks (%zu)</h2>\n<p class=\"note\">Steps %" PRId64 " to %" PRId64
                 " compared. Busy: a rank's recorded time in a step less its wait in collectives (shown apart, "
                 "never blamed). A straggler is slower than the median of the others beyond noise (p &lt; %g, at "
                 "least %g%% of a step's %.3f ms); a likely one is slowest in more steps than chance makes likely "
                 "(p &lt; %g), with too few steps for the first test yet. ",
            r->nranks, r->first_step, r->last_step, r->alpha, r->min_change_pct, ms(r->step_time_ns),
            r->likely_alpha);
    if (r->clocks > 0)
        fprintf(out, "Clocks aligned to rank 0's within %.3f ms.</p>\n", ms((double)r->clock_error_ns));
    else
        fputs("Clocks not aligned (no measured offset in the manifests).</p>\n", out);
    fputs("<table class=\"sortable\"><thead><tr><th>rank</th><th>pid</th><th>slowest in</th><th>extra ms</th>"
          "<th>busy ms/step</th><th>wait ms/step</th><th>vs others ms</th><th>p</th><th>verdict</th></tr></thead>"
          "<tbody>\n", out);
    for (size_t n = 0; n < r->nranks; n++) {
        const ranks_rank_t *k = &r->by_rank[r->order[n]];
        fprintf(out, "<tr%s><td>%s</td><td>%" PRId64 "</td><td>%zu</td><td>%.3f</td><td>%.3f</td><td>%.3f</td>"
                     "<td>%+.3f</td><td>%.2g</td><td>%s</td></tr>\n",
                k->straggler || k->likely ? " class=\"slowest\"" : "", rank_label(k, label, sizeof label), k->pid,
                k->slowest_steps, ms(k->slowest_extra_ns), ms(k->busy_ns), ms(k->wait_ns), ms(k->change_ns),
                k->p_value, verdict(k));
    }
    fputs("</tbody></table>\n", out);
    for (size_t n = 0; n < r->nranks; n++) {
        const ranks_rank_t *k = &r->by_rank[r->order[n]];
        if (k->likely) {
            fprintf(out, "<p>Likely straggler: rank %s slowest in %zu of %zu steps; ", rank_label(k, label, sizeof label),
                    k->slowest_steps, r->nsteps);
            if (k->more_steps > 0)
                fprintf(out, "about %zu more steps for significance.</p>\n", k->more_steps);
            else
                fputs("too far from significance to say how many more steps.</p>\n", out);
        }
        if (!(k->straggler || k->likely) || k->napis == 0)
            continue;
        fprintf(out, "<h3>Rank %s: its extra time by API</h3>\n<table class=\"sortable\"><thead><tr><th>API</th>"
                     "<th>rank ms</th><th>others ms</th><th>extra ms</th><th>%% of step</th><th>p</th></tr></thead>"
                     "<tbody>\n", rank_label(k, label, sizeof label));
        for (size_t a = 0; a < k->napis; a++) {
            const ranks_api_t *api = &k->apis[a];
            fputs("<tr><td>", out);
            report_html_name(out, api->api, strlen(api->api));
            fprintf(out, "</td><td>%.3f</td><td>%.3f</td><td>%+.3f</td><td>%.1f</td><td>%.2g</td></tr>\n",
                    ms(api->rank_ns), ms(api->others_ns), ms(api->change_ns), api->change_pct, api->p_value);
        }
        fputs("</tbody></table>\n", out);
    }
    size_t shown = r->nsteps < 500 ? r->nsteps : 500;
    fprintf(out, "<h3>Steps%s</h3>\n<table class=\"sortable\"><thead><tr><th>step</th><th>skew ms</th>"
                 "<th>slowest</th><th>median ms</th></tr></thead><tbody>\n", shown < r->nsteps ? " (the first 500)" : "");
    for (size_t k = 0; k < shown; k++) {
        const ranks_step_t *s = &r->steps[k];
        fprintf(out, "<tr><td>%" PRId64 "</td><td>%.3f</td><td>%s</td><td>%.3f</td></tr>\n", s->step, ms(s->skew_ns),
                s->slowest == SIZE_MAX ? "-" : rank_label(&r->by_rank[s->slowest], label, sizeof label),
                ms(s->median_busy_ns));
    }
    fputs("</tbody></table></section>\n", out);
}
