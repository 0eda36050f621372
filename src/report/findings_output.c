/* SPDX-License-Identifier: MIT */
/* tw-report --findings' outputs: text (the default), JSON and Markdown, from findings.c's list. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "findings.h"
#include "html.h"
#include "util.h"

static void print_json(const finding_t *findings, size_t count, double run_ms, uint64_t steps, FILE *out)
{
    fputs("{\"findings\": [", out);
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
        fputs("}", out);
    }
    fprintf(out, "%s], \"steps\": %" PRIu64 ", ", count ? "\n" : "", steps);
    report_json_double(out, "run_ms", run_ms, "%.6g");
    fputs("}\n", out);
}

static void print_text(const finding_t *findings, size_t count, double run_ms, uint64_t steps, int markdown,
                       FILE *out)
{
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

void report_findings_print(const options_t *o, const finding_t *findings, size_t count, double run_ms,
                           uint64_t steps, FILE *out)
{
    if (o->format == OUT_JSON)
        print_json(findings, count, run_ms, steps, out);
    else
        print_text(findings, count, run_ms, steps, o->format == OUT_MARKDOWN, out);
}

void report_findings_write_html(const report_sink_t *sink, FILE *out)
{
    size_t count;
    const finding_t *findings = report_findings_result(sink, &count);
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
        fputs("</p></div>\n", out);
    }
    fputs("</section>\n", out);
}
