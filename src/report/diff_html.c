/* SPDX-License-Identifier: MIT */
/*
 * tw-report --diff BASE NEW --html FILE: the comparison as one self-contained page, with html.c's
 * head, styles and scripts (sortable tables, no network): the two runs side by side, then one row
 * per API, the changes beyond the runs' own step-to-step noise first, coloured by verdict.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "diff.h"
#include "html_page.h"
#include "util.h"

static void text(FILE *out, const char *s)
{
    report_html_text(out, s, strlen(s));
}

static void card(FILE *out, const char *label, const char *format, double base, double new_)
{
    fputs("<div class=\"card\"><b>", out);
    fprintf(out, format, base);
    fputs(" &rarr; ", out);
    fprintf(out, format, new_);
    fputs("</b><span>", out);
    text(out, label);
    fputs("</span></div>\n", out);
}

static void inputs(FILE *out, const diff_run_t *run)
{
    for (size_t i = 0; i < run->ninputs; i++) {
        if (i > 0)
            fputs(", ", out);
        text(out, run->inputs[i]);
    }
}

/* A number, or an empty cell for NAN (an API absent from BASE has no relative change). */
static void cell(FILE *out, const char *format, double v)
{
    fputs("<td>", out);
    if (!isnan(v))
        fprintf(out, format, v);
    fputs("</td>", out);
}

static void write_page(FILE *out, const diff_t *d)
{
    report_html_begin(out, "TorchWrapper diff");
    fputs("<header><h1>TorchWrapper diff</h1><p>BASE ", out);
    inputs(out, &d->base);
    fputs(" &rarr; NEW ", out);
    inputs(out, &d->new_);
    fputs("</p></header>\n<main>\n<section id=\"runs\"><h2>Runs</h2><div class=\"cards\">\n", out);
    card(out, "steps compared (BASE → NEW)", "%.0f", (double)d->base.steps, (double)d->new_.steps);
    card(out, "median step, ms of self time", "%.3f", d->base.step_ns / 1e6, d->new_.step_ns / 1e6);
    card(out, "records read", "%.0f", (double)d->base.records, (double)d->new_.records);
    size_t counts[5] = {0};
    for (size_t i = 0; i < d->count; i++)
        counts[d->rows[i].verdict]++;
    fprintf(out, "<div class=\"card\"><b>%+.2f%%</b><span>step time change (p=%.2g)</span></div>\n",
            d->step_change_pct, d->step_p_value);
    fprintf(out, "<div class=\"card\"><b>%zu / %zu</b><span>regressions / improvements beyond noise</span></div>\n",
            counts[DIFF_REGRESSION], counts[DIFF_IMPROVEMENT]);
    fprintf(out, "<div class=\"card\"><b>%zu / %zu</b><span>APIs appeared / vanished</span></div>\n",
            counts[DIFF_APPEARED], counts[DIFF_VANISHED]);
    fprintf(out, "</div>\n<p class=\"note\">Per API, its self time in a step of each run (the median step; "
                 "the mean where both medians are 0). A change is beyond noise when a Mann-Whitney test of "
                 "the per-step self times gives p &lt; %g and it is at least %g%% of BASE's step time.%s</p>"
                 "</section>\n",
            d->alpha, d->min_change_pct, d->failed ? " <b>--fail-above is exceeded.</b>" : "");
    fprintf(out, "<section id=\"diff\"><h2>Per API (%zu)</h2>\n<p class=\"note\">Click a column's name to "
                 "sort. Regressions are red, improvements green, APIs that appeared or vanished grey.</p>\n"
                 "<div class=\"scroll\"><table class=\"sortable\" id=\"diff-table\"><thead><tr><th>api</th>"
                 "<th>verdict</th><th class=\"num\">change us/step</th><th class=\"num\">%% of step</th>"
                 "<th class=\"num\">BASE self us/step</th><th class=\"num\">NEW self us/step</th>"
                 "<th class=\"num\">BASE calls/step</th><th class=\"num\">NEW calls/step</th>"
                 "<th class=\"num\">BASE p50 us</th><th class=\"num\">NEW p50 us</th><th class=\"num\">BASE p99 us"
                 "</th><th class=\"num\">NEW p99 us</th><th class=\"num\">p</th></tr></thead><tbody>\n",
            d->count);
    for (size_t i = 0; i < d->count; i++) {
        const diff_row_t *r = &d->rows[i];
        const char *verdict = report_diff_verdict_name(r->verdict);
        fprintf(out, "<tr class=\"%s\"><td>", verdict);
        text(out, r->api);
        fprintf(out, "</td><td>%s</td>", verdict);
        cell(out, "%+.2f", r->change_ns / 1e3);
        cell(out, "%+.2f", r->change_pct);
        cell(out, "%.2f", r->base.median_self_ns / 1e3);
        cell(out, "%.2f", r->new_.median_self_ns / 1e3);
        cell(out, "%.2f", r->base.calls);
        cell(out, "%.2f", r->new_.calls);
        cell(out, "%.2f", (double)r->base.p50_ns / 1e3);
        cell(out, "%.2f", (double)r->new_.p50_ns / 1e3);
        cell(out, "%.2f", (double)r->base.p99_ns / 1e3);
        cell(out, "%.2f", (double)r->new_.p99_ns / 1e3);
        cell(out, "%.2g", r->p_value);
        fputs("</tr>\n", out);
    }
    fputs("</tbody></table></div></section>\n</main>\n", out);
    report_html_end(out);
}

int report_diff_write_html(const diff_t *d, const char *path, FILE *err)
{
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        int rc = -errno;
        fprintf(err, "tw-report: --html '%s' cannot be written: %s\n", path, strerror(errno));
        return rc;
    }
    write_page(out, d);
    return report_close_output(out, path, 0, err);
}
