/* SPDX-License-Identifier: MIT */
/*
 * tw-report --diff, the output and the command: the diff (diff.c) as a table, Markdown, CSV or JSON,
 * and what --fail-above prints.
 */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torchwrapper/common.h"

#include "diff.h"
#include "util.h"

/* ---- output -------------------------------------------------------------------------------------- */

/* The columns of CSV and JSON (and torchwrapper.diff's DataFrame), in order. */
enum { COL_TEXT, COL_NUMBER, COL_COUNT };
static const struct {
    const char *name;
    int kind;
} columns[] = {
    {"api", COL_TEXT}, {"verdict", COL_TEXT}, {"change_ns", COL_NUMBER}, {"change_pct_of_step", COL_NUMBER},
    {"p_value", COL_NUMBER}, {"u", COL_NUMBER}, {"base_calls_per_step", COL_NUMBER},
    {"new_calls_per_step", COL_NUMBER}, {"base_total_ns_per_step", COL_NUMBER},
    {"new_total_ns_per_step", COL_NUMBER}, {"total_change_pct", COL_NUMBER}, {"base_self_ns_per_step", COL_NUMBER},
    {"new_self_ns_per_step", COL_NUMBER}, {"self_change_pct", COL_NUMBER}, {"base_median_self_ns", COL_NUMBER},
    {"new_median_self_ns", COL_NUMBER}, {"base_p50_ns", COL_COUNT}, {"new_p50_ns", COL_COUNT},
    {"base_p99_ns", COL_COUNT}, {"new_p99_ns", COL_COUNT}, {"fail_above", COL_COUNT},
};
#define NCOLUMNS (sizeof columns / sizeof columns[0])

static double column_number(const diff_row_t *r, size_t c)
{
    const double values[] = {0, 0, r->change_ns, r->change_pct, r->p_value, r->u, r->base.calls, r->new_.calls,
                             r->base.total_ns, r->new_.total_ns, r->total_change_pct, r->base.self_ns,
                             r->new_.self_ns, r->self_change_pct, r->base.median_self_ns, r->new_.median_self_ns,
                             (double)r->base.p50_ns, (double)r->new_.p50_ns, (double)r->base.p99_ns,
                             (double)r->new_.p99_ns, r->fails};
    return values[c];
}

/* A number as CSV and JSON write it: integers whole, p values in %g, the rest to 0.1 ns / 0.0001 %;
 * empty (CSV) or null (JSON) when there is none (a change in percent of nothing, a test of no steps). */
static void put_number(FILE *out, double v, size_t c, int json)
{
    if (isnan(v) || isinf(v))
        fputs(json ? "null" : "", out);
    else if (columns[c].kind == COL_COUNT)
        fprintf(out, "%.0f", v);
    else if (strcmp(columns[c].name, "p_value") == 0)
        fprintf(out, "%.6g", v);
    else if (strstr(columns[c].name, "pct") != NULL || strstr(columns[c].name, "calls") != NULL)
        fprintf(out, "%.4f", v);
    else
        fprintf(out, "%.1f", v);
}

static void write_csv(FILE *out, const diff_t *d, size_t shown)
{
    for (size_t c = 0; c < NCOLUMNS; c++)
        fprintf(out, "%s%s", c ? "," : "", columns[c].name);
    fputc('\n', out);
    for (size_t i = 0; i < shown; i++) {
        const diff_row_t *r = &d->rows[i];
        report_csv_text(out, r->api);
        fprintf(out, ",%s", report_diff_verdict_name(r->verdict));
        for (size_t c = 2; c < NCOLUMNS; c++) {
            fputc(',', out);
            put_number(out, column_number(r, c), c, 0);
        }
        fputc('\n', out);
    }
}

static void write_json_run(FILE *out, const diff_run_t *r)
{
    fputs("{\"inputs\":[", out);
    for (size_t i = 0; i < r->ninputs; i++) {
        fputs(i ? "," : "", out);
        report_json_text(out, r->inputs[i]);
    }
    fprintf(out, "],\"files\":%zu,\"records\":%" PRIu64 ",\"steps\":%zu,\"first_step\":%" PRId64
                 ",\"last_step\":%" PRId64 ",\"last_step_seen\":%" PRId64 ",",
            r->files, r->records, r->steps, r->first_step, r->last_step, r->seen_last_step);
    report_json_double(out, "step_ns", r->step_ns, "%.1f");
    fputc(',', out);
    report_json_double(out, "mean_step_ns", r->mean_step_ns, "%.1f");
    fputc('}', out);
}

/* The whole diff as one JSON object: what --format json prints, and what an HTML page can embed. */
static void write_json_rows(FILE *out, const diff_t *d, size_t shown)
{
    fputs("{\"base\":", out);
    write_json_run(out, &d->base);
    fputs(",\n\"new\":", out);
    write_json_run(out, &d->new_);
    fputs(",\n", out);
    report_json_double(out, "step_change_pct", d->step_change_pct, "%.4f");
    fputc(',', out);
    report_json_double(out, "step_p_value", d->step_p_value, "%.6g");
    fprintf(out, ",\"alpha\":%g,\"min_change_pct\":%g,", d->alpha, d->min_change_pct);
    report_json_double(out, "fail_above_pct", d->fail_above_pct >= 0 ? d->fail_above_pct : NAN, "%g");
    fprintf(out, ",\"failed\":%s,\"rows\":[", d->failed ? "true" : "false");
    for (size_t i = 0; i < shown; i++) {
        const diff_row_t *r = &d->rows[i];
        fputs(i ? ",\n{\"api\":" : "\n{\"api\":", out);
        report_json_text(out, r->api);
        fprintf(out, ",\"verdict\":\"%s\"", report_diff_verdict_name(r->verdict));
        for (size_t c = 2; c < NCOLUMNS; c++) {
            fprintf(out, ",\"%s\":", columns[c].name);
            put_number(out, column_number(r, c), c, 1);
        }
        fputc('}', out);
    }
    fputs("\n]}\n", out);
}

void report_diff_write_json(FILE *out, const diff_t *d)
{
    write_json_rows(out, d, d->count);
}

static void put_inputs(FILE *out, const diff_run_t *r)
{
    for (size_t i = 0; i < r->ninputs; i++)
        fprintf(out, "%s%s", i ? " " : "", r->inputs[i]);
}

/* "12.34" in us, signed when asked; "-" for none. */
static void us(char *buf, size_t size, double ns, int sign)
{
    if (isnan(ns))
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, sign ? "%+.2f" : "%.2f", ns / 1e3);
}

static void write_summary(FILE *out, const diff_t *d, int md)
{
    const diff_run_t *runs[2] = {&d->base, &d->new_};
    for (int r = 0; r < 2; r++) {
        fputs(r ? "NEW   " : "BASE  ", out);
        put_inputs(out, runs[r]);
        fprintf(out, ": %zu step%s compared", runs[r]->steps, runs[r]->steps == 1 ? "" : "s");
        if (runs[r]->steps)
            fprintf(out, " (%" PRId64 "-%" PRId64 ")", runs[r]->first_step, runs[r]->last_step);
        if (!isnan(runs[r]->step_ns))
            fprintf(out, ", %.1f us per step", runs[r]->step_ns / 1e3);
        if (r == 1 && !isnan(d->step_change_pct))
            fprintf(out, " (%+.1f%%, p=%.2g)", d->step_change_pct, d->step_p_value);
        fputs(md ? "  \n" : "\n", out);
    }
    fprintf(out, "(a step's time: the median over steps of the recorded calls' self time; a change is beyond "
                 "noise when p < %g and it is at least %g%% of BASE's step time)\n\n", d->alpha, d->min_change_pct);
}

#define TABLE_COLUMNS 15

static void write_table(FILE *out, const diff_t *d, size_t shown, int md)
{
    static const char *const heads[TABLE_COLUMNS] = {"api", "verdict", "change us", "step %", "p", "self us",
                                                     "new", "total us", "new", "calls", "new", "p50 us", "new",
                                                     "p99 us", "new"};
    write_summary(out, d, md);
    char (*cells)[TABLE_COLUMNS - 1][24] = calloc(shown ? shown : 1, sizeof *cells);
    if (cells == NULL)
        return;
    size_t width[TABLE_COLUMNS];
    for (int c = 0; c < TABLE_COLUMNS; c++)
        width[c] = strlen(heads[c]);
    for (size_t i = 0; i < shown; i++) {
        const diff_row_t *r = &d->rows[i];
        snprintf(cells[i][0], 24, "%s", report_diff_verdict_name(r->verdict));
        us(cells[i][1], 24, r->change_ns, 1);
        if (isnan(r->change_pct))
            snprintf(cells[i][2], 24, "-");
        else
            snprintf(cells[i][2], 24, "%+.2f", r->change_pct);
        if (isnan(r->p_value))
            snprintf(cells[i][3], 24, "-");
        else
            snprintf(cells[i][3], 24, "%.2g", r->p_value);
        us(cells[i][4], 24, r->base.self_ns, 0);
        us(cells[i][5], 24, r->new_.self_ns, 0);
        us(cells[i][6], 24, r->base.total_ns, 0);
        us(cells[i][7], 24, r->new_.total_ns, 0);
        snprintf(cells[i][8], 24, "%.2f", r->base.calls);
        snprintf(cells[i][9], 24, "%.2f", r->new_.calls);
        us(cells[i][10], 24, (double)r->base.p50_ns, 0);
        us(cells[i][11], 24, (double)r->new_.p50_ns, 0);
        us(cells[i][12], 24, (double)r->base.p99_ns, 0);
        us(cells[i][13], 24, (double)r->new_.p99_ns, 0);
        if (strlen(r->api) > width[0])
            width[0] = strlen(r->api);
        for (int c = 1; c < TABLE_COLUMNS; c++)
            if (strlen(cells[i][c - 1]) > width[c])
                width[c] = strlen(cells[i][c - 1]);
    }
    const char *sep = md ? " | " : "  ";
    fprintf(out, "%s%-*s%s%-*s", md ? "| " : "", (int)width[0], heads[0], sep, (int)width[1], heads[1]);
    for (int c = 2; c < TABLE_COLUMNS; c++)
        fprintf(out, "%s%*s", sep, (int)width[c], heads[c]);
    fputs(md ? " |\n" : "\n", out);
    if (md) {
        for (int c = 0; c < TABLE_COLUMNS; c++) {
            fputc('|', out);
            for (size_t k = 0; k < width[c] + 1; k++)
                fputc('-', out);
            fputc(c < 2 ? '-' : ':', out);
        }
        fputs("|\n", out);
    }
    for (size_t i = 0; i < shown; i++) {
        fprintf(out, "%s%-*s%s%-*s", md ? "| " : "", (int)width[0], d->rows[i].api, sep, (int)width[1], cells[i][0]);
        for (int c = 2; c < TABLE_COLUMNS; c++)
            fprintf(out, "%s%*s", sep, (int)width[c], cells[i][c - 1]);
        fputs(md ? " |\n" : "\n", out);
    }
    free(cells);
    size_t counts[5] = {0};
    for (size_t i = 0; i < d->count; i++)
        counts[d->rows[i].verdict]++;
    fprintf(out, "\n%zu API%s: %zu regression%s, %zu improvement%s, %zu appeared, %zu vanished, %zu within noise",
            d->count, d->count == 1 ? "" : "s", counts[DIFF_REGRESSION], counts[DIFF_REGRESSION] == 1 ? "" : "s",
            counts[DIFF_IMPROVEMENT], counts[DIFF_IMPROVEMENT] == 1 ? "" : "s", counts[DIFF_APPEARED],
            counts[DIFF_VANISHED], counts[DIFF_SAME]);
    if (shown < d->count)
        fprintf(out, "; %zu more row%s (--top)", d->count - shown, d->count - shown == 1 ? "" : "s");
    fputc('\n', out);
}

/* ---- --diff's options, and the command -------------------------------------------------------- */


int report_diff_main(const options_t *o, FILE *out, FILE *err, int *failed)
{
    *failed = 0;
    diff_t d;
    int rc = report_diff_run(o, &d, err);
    if (rc != 0)
        return rc;
    if (o->html != NULL && (rc = report_diff_write_html(&d, o->html, err)) != 0) {
        report_diff_free(&d);
        return rc;
    }
    size_t shown = o->top && o->top < d.count ? o->top : d.count;
    if (o->format == OUT_CSV)
        write_csv(out, &d, shown);
    else if (o->format == OUT_JSON)
        write_json_rows(out, &d, shown);
    else
        write_table(out, &d, shown, o->format == OUT_MARKDOWN);
    for (size_t i = 0; i < d.count; i++) {
        const diff_row_t *r = &d.rows[i];
        if (r->fails)
            fprintf(err, "tw-report: --fail-above %g: %s %s: %+.2f us per step, %.2f%% of BASE's step time "
                         "(p=%.2g)\n", d.fail_above_pct, r->api, r->verdict == DIFF_APPEARED ? "appeared" : "is slower",
                    r->change_ns / 1e3, r->change_pct, r->p_value);
    }
    *failed = d.failed;
    report_diff_free(&d);
    return 0;
}
