/* SPDX-License-Identifier: MIT */
/* tw-report --findings' outputs: text (the default), JSON, Markdown and the HTML page's section, from
 * a list of findings and the step's anatomy (it knows neither the sink nor the rules). */
#include "config.h"
#include "findings_output.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "html_page.h"
#include "util.h"

const char *const report_part_names[PARTS] = {"data", "forward", "backward", "optimizer", "evaluation",
                                              "other torch", "Python"};

static void anatomy_json(const step_anatomy_t *a, FILE *out)
{
    fputs("\"anatomy\": ", out);
    if (a == NULL || !a->valid) {
        fputs("null, ", out);
        return;
    }
    fprintf(out, "{\"steps\": %" PRIu64 ", ", a->steps);
    report_json_double(out, "step_ms", a->step_ms, "%.6g");
    fputs(", \"parts_ms\": {", out);
    for (int k = 0; k < PARTS; k++) {
        fputs(k ? ", " : "", out);
        report_json_double(out, report_part_names[k], a->part_ms[k], "%.6g");
    }
    fputs("}, \"lines\": [", out);
    for (size_t i = 0; i < a->nlines; i++) {
        fputs(i ? ", {\"where\": " : "{\"where\": ", out);
        report_json_text(out, a->lines[i].where);
        fputs(", \"runs\": ", out);
        report_json_text(out, a->lines[i].runs);
        fputs(", ", out);
        report_json_double(out, "share", a->lines[i].share, "%.6g");
        fputs(", ", out);
        report_json_double(out, "ms", a->lines[i].ms, "%.6g");
        fputs("}", out);
    }
    fputs("]}, ", out);
}

static void print_json(const finding_t *findings, size_t count, const step_anatomy_t *anatomy, double run_ms,
                       uint64_t steps, FILE *out)
{
    fputs("{", out);
    anatomy_json(anatomy, out);
    fputs("\"findings\": [", out);
    for (size_t i = 0; i < count; i++) {
        const finding_t *x = &findings[i];
        fputs(i ? ",\n  {" : "\n  {", out);
        fputs("\"kind\": ", out);
        report_json_text(out, x->kind);
        fputs(", \"severity\": ", out);
        report_json_text(out, x->severity);
        fputs(", ", out);
        report_json_double(out, "share", x->share >= 0 ? x->share : NAN, "%.6g");
        fputs(", \"where\": [", out);
        for (size_t k = 0; k < x->nwhere; k++) {
            if (k)
                fputs(", ", out);
            report_json_text(out, x->where[k]);
        }
        fputs("], \"evidence\": {", out);
        for (size_t k = 0; k < x->nevidence; k++) {
            fputs(k ? ", " : "", out);
            report_json_double(out, x->evidence_keys[k], x->evidence[k], "%.6g");
        }
        fputs("}, \"message\": ", out);
        report_json_text(out, x->message);
        fputs(", \"fix\": ", out);
        report_json_text(out, x->fix);
        fputs(", \"source\": ", out);
        report_json_text(out, x->source != NULL ? x->source : "");
        fputs("}", out);
    }
    fprintf(out, "%s], \"steps\": %" PRIu64 ", ", count ? "\n" : "", steps);
    report_json_double(out, "run_ms", run_ms, "%.6g");
    fputs("}\n", out);
}

/* "A typical step (37 steps, 12.40 ms): data 46% . forward 20% ..." and its costly lines. */
static void anatomy_text(const step_anatomy_t *a, int markdown, FILE *out)
{
    if (a == NULL || !a->valid)
        return;
    if (markdown)
        fputs("## A typical step\n\n", out);
    fprintf(out, "A typical step (the middle half of %" PRIu64 " steps): %.2f ms:", a->steps, a->step_ms);
    int shown = 0;
    for (int k = 0; k < PARTS; k++)
        if (a->part_ms[k] >= 0.005 * a->step_ms) /* (a part under half a percent is left out) */
            fprintf(out, "%s %s %.0f%%", shown++ ? "," : "", report_part_names[k], 100 * a->part_ms[k] / a->step_ms);
    fputc('\n', out);
    if (markdown)
        fputc('\n', out);
    for (size_t i = 0; i < a->nlines; i++)
        fprintf(out, markdown ? "- %.1f%% of a step at `%s`: `%s` (%.2f ms)\n" : "  %5.1f%% of a step at %s: %s (%.2f ms)\n",
                100 * a->lines[i].share, a->lines[i].where, a->lines[i].runs, a->lines[i].ms);
    fputc('\n', out);
}

static void print_text(const finding_t *findings, size_t count, const step_anatomy_t *anatomy, double run_ms,
                       uint64_t steps, int markdown, FILE *out)
{
    anatomy_text(anatomy, markdown, out);
    if (markdown)
        fputs("## Findings\n\n", out);
    if (count == 0) {
        fprintf(out, "No findings: nothing in this run's %" PRIu64 " step(s) (%.1f ms) matches a known problem.\n",
                steps, run_ms);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        const finding_t *x = &findings[i];
        char share[32] = "";
        if (x->share >= 0)
            snprintf(share, sizeof share, ", %.1f%% of the run", 100 * x->share);
        if (markdown)
            fprintf(out, "%zu. **%s** `%s`%s: %s\n", i + 1, x->severity, x->kind, share, x->message);
        else
            fprintf(out, "[%s] %s%s\n  %s\n", x->severity, x->kind, share, x->message);
        for (size_t k = 0; k < x->nwhere; k++)
            fprintf(out, markdown ? "   - at `%s`\n" : "  at %s\n", x->where[k]);
        fprintf(out, markdown ? "   - fix: %s\n" : "  fix: %s\n", x->fix);
        if (!markdown)
            fputc('\n', out);
    }
    fprintf(out, "%s%zu finding(s) over %" PRIu64 " step(s), %.1f ms (the first step, a warm-up, left out from three "
                 "steps on).\n", markdown ? "\n" : "", count, steps, run_ms);
}

void report_findings_print(const options_t *o, const finding_t *findings, size_t count,
                           const step_anatomy_t *anatomy, double run_ms, uint64_t steps, FILE *out)
{
    if (o->format == OUT_JSON)
        print_json(findings, count, anatomy, run_ms, steps, out);
    else
        print_text(findings, count, anatomy, run_ms, steps, o->format == OUT_MARKDOWN, out);
}

/* The step as a bar of its parts, each as wide as its share, then its costly lines. */
static void anatomy_html(const step_anatomy_t *a, FILE *out)
{
    if (a == NULL || !a->valid)
        return;
    fprintf(out, "<section id=\"step\"><h2>A typical step: %.2f ms</h2>\n<div class=\"stepbar\">", a->step_ms);
    for (int k = 0; k < PARTS; k++) {
        double share = a->part_ms[k] / a->step_ms;
        if (share < 0.005)
            continue;
        fprintf(out, "<span class=\"part p%d\" style=\"width:%.2f%%\" title=\"%s: %.2f ms (%.1f%%)\">", k, 100 * share,
                report_part_names[k], a->part_ms[k], 100 * share);
        if (share >= 0.08) /* (a narrow part has its name in the legend) */
            fprintf(out, "%s %.0f%%", report_part_names[k], 100 * share);
        fputs("</span>", out);
    }
    fputs("</div>\n<p class=\"legend\">", out);
    for (int k = 0; k < PARTS; k++)
        if (a->part_ms[k] >= 0.005 * a->step_ms)
            fprintf(out, "<span><i class=\"p%d\"></i>%s %.1f%% (%.2f ms)</span> ", k, report_part_names[k],
                    100 * a->part_ms[k] / a->step_ms, a->part_ms[k]);
    fprintf(out, "</p>\n<p class=\"note\">The mean of the middle half of %" PRIu64 " steps by time (the first step "
                 "left out); below, the program's lines that cost 5%% of it or more, with the call that costs the most "
                 "at each.</p>\n", a->steps);
    if (a->nlines > 0) {
        fputs("<table><thead><tr><th>line</th><th>runs</th><th>of a step</th><th>ms</th></tr></thead><tbody>\n", out);
        for (size_t i = 0; i < a->nlines; i++) {
            fputs("<tr><td><code>", out);
            report_html_text(out, a->lines[i].where, strlen(a->lines[i].where));
            fputs("</code></td><td>", out);
            report_html_name(out, a->lines[i].runs, strlen(a->lines[i].runs));
            fprintf(out, "</td><td>%.1f%%</td><td>%.2f</td></tr>\n", 100 * a->lines[i].share, a->lines[i].ms);
        }
        fputs("</tbody></table>\n", out);
    }
    fputs("</section>\n", out);
}

void report_findings_write_html(const finding_t *findings, size_t count, const step_anatomy_t *anatomy, FILE *out)
{
    anatomy_html(anatomy, out);
    fprintf(out, "<section id=\"findings\"><h2>Findings (%zu)</h2>\n", count);
    if (count == 0)
        fputs("<p class=\"note\">Nothing in this run matches a known problem (tw-report --findings lists the "
              "rules).</p>\n", out);
    for (size_t i = 0; i < count; i++) {
        const finding_t *x = &findings[i];
        fprintf(out, "<div class=\"finding %s\"><p><b>%s</b> <code>%s</code>", x->severity, x->severity, x->kind);
        if (x->share >= 0)
            fprintf(out, " &middot; %.1f%% of the run", 100 * x->share);
        fputs("</p><p>", out);
        report_html_text(out, x->message, strlen(x->message));
        fputs("</p>", out);
        if (x->nwhere > 0) {
            fputs("<p>at ", out);
            for (size_t k = 0; k < x->nwhere; k++) {
                fputs(k ? ", <code>" : "<code>", out);
                report_html_text(out, x->where[k], strlen(x->where[k]));
                fputs("</code>", out);
            }
            fputs("</p>", out);
        }
        fputs("<p>Fix: ", out);
        report_html_text(out, x->fix, strlen(x->fix));
        fputs("</p>", out);
        if (x->source != NULL) {
            fputs("<p class=\"note\">Source: ", out);
            report_html_text(out, x->source, strlen(x->source));
            fputs("</p>", out);
        }
        fputs("</div>\n", out);
    }
    fputs("</section>\n", out);
}
