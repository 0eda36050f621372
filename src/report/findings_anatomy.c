/* SPDX-License-Identifier: MIT */
/*
 * The step's anatomy (findings.h step_anatomy_t), the base of every finding: a typical step of the
 * steps' thread split into its parts (findings.c counted them per step from the outermost calls and
 * the gaps between them), and the program's lines that cost the most of it, each with what it runs
 * there. A line's cost is the self time of its calls (the autograd nodes charged to it included) and
 * the Python before them: the parts of a step, cut by line instead of by kind, so that a costly line
 * is named inside the forward as well as outside it, whatever a rule knows of its cause.
 */
#include "config.h"
#include "findings_anatomy.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "findings_tally.h"

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t step_total(const step_parts_t *p)
{
    uint64_t sum = 0;
    for (int k = 0; k < PARTS; k++)
        sum += p->ns[k];
    return sum;
}

/* The typical step: the mean of the middle half of the steps by their time (a garbage collection, an
 * evaluation every N steps or a checkpoint moves the mean of all, not this), parts summing to it. */
static void typical_parts(findings_t *f, const thread_state_t *t, step_anatomy_t *a)
{
    uint64_t from = f->skip_first ? 1 : 0, n = 0;
    uint64_t *keys = malloc((t->nparts + 1) * sizeof *keys);
    if (keys == NULL) {
        f->oom = 1;
        return;
    }
    /* (total << 20 | step): sorted by time, the step kept in the low bits (steps < FIND_STEPS = 2^16) */
    for (uint64_t s = from; s < t->nparts; s++)
        if (t->parts[s].used)
            keys[n++] = step_total(&t->parts[s]) << 20 | s;
    if (n >= 3) {
        qsort(keys, n, sizeof *keys, compare_u64);
        uint64_t lo = n / 4, hi = n - n / 4;
        for (uint64_t i = lo; i < hi; i++)
            for (int k = 0; k < PARTS; k++)
                a->part_ms[k] += (double)t->parts[keys[i] & 0xFFFFF].ns[k] / 1e6;
        for (int k = 0; k < PARTS; k++) {
            a->part_ms[k] /= (double)(hi - lo);
            a->step_ms += a->part_ms[k];
        }
        a->steps = n;
        a->valid = a->step_ms > 0;
    }
    free(keys);
}

static int by_total_desc(const void *x, const void *y)
{
    const group_t *a = *(group_t *const *)x, *b = *(group_t *const *)y;
    if (a->stats.total_ns != b->stats.total_ns)
        return a->stats.total_ns < b->stats.total_ns ? 1 : -1;
    return strcmp(a->key, b->key);
}

/* Time by line on the steps' thread (its calls' self time, then the Python before its outermost
 * calls), the first step left out when settle leaves it out; each line's costliest call its label
 * (group_t.detail, stats.max_ns its cost). */
static void lines_of(findings_t *f, const thread_state_t *t, group_table_t *lines)
{
    for (size_t i = 0; i < f->series.capacity; i++) {
        const series_entry_t *e = f->series.slots[i];
        if (e == NULL || e->pid != t->pid || e->tid != t->tid)
            continue;
        const char *text = findings_line_text(f, e);
        group_t *g = report_group_get(lines, text, strlen(text));
        if (g == NULL) {
            f->oom = 1;
            return;
        }
        uint64_t self = e->self_ns - (f->skip_first ? e->first_self : 0);
        uint64_t cost = e->cost_ns - (f->skip_first ? e->first_cost : 0);
        g->stats.total_ns += self;
        g->stats.calls += e->calls - (f->skip_first ? e->first_calls : 0);
        g->stats.errors = (uint64_t)e->library; /* (the group's errors: whether the line is a library's) */
        if (!e->node && cost > g->stats.max_ns) { /* what the line runs: its costliest call */
            char *label = malloc(e->api_len + 1);
            if (label != NULL) {
                free(g->detail);
                g->detail = memcpy(label, e->api, e->api_len + 1);
                g->stats.max_ns = cost;
            }
        }
    }
    /* the Python before each outermost call, keyed "LINE\tPID:TID" (findings.c) */
    char suffix[48];
    snprintf(suffix, sizeof suffix, "\t%" PRId64 ":%" PRIu64, t->pid, t->tid);
    size_t n;
    group_t **gaps = report_group_list(&f->gaps.all, &n);
    for (size_t i = 0; gaps != NULL && i < n; i++) {
        size_t len = strcspn(gaps[i]->key, "\t");
        if (strcmp(gaps[i]->key + len, suffix) != 0)
            continue;
        group_t *g = report_group_get(lines, gaps[i]->key, len);
        if (g != NULL)
            g->stats.total_ns += gaps[i]->stats.total_ns; /* (the first step's already out: tally_settle) */
    }
    free(gaps);
}

void findings_anatomy(findings_t *f, settle_context_t *c)
{
    step_anatomy_t *a = &f->anatomy;
    memset(a, 0, sizeof *a);
    const thread_state_t *t = c->thread;
    if (t == NULL || t->parts == NULL || c->run_ns == 0)
        return;
    typical_parts(f, t, a);
    if (!a->valid)
        return;
    group_table_t lines = {0};
    lines_of(f, t, &lines);
    size_t n;
    group_t **list = report_group_list(&lines, &n);
    if (list != NULL) {
        qsort(list, n, sizeof *list, by_total_desc);
        for (size_t i = 0; i < n && a->nlines < ANATOMY_LINES; i++) {
            double share = (double)list[i]->stats.total_ns / (double)c->run_ns;
            if (share < 0.05) /* a line of the step's twentieth at least */
                break;
            if (strcmp(list[i]->key, "(no site)") == 0)
                continue;
            snprintf(a->lines[a->nlines].where, sizeof a->lines[a->nlines].where, "%s", list[i]->key);
            snprintf(a->lines[a->nlines].runs, sizeof a->lines[a->nlines].runs, "%s",
                     list[i]->detail != NULL ? list[i]->detail : "Python");
            a->lines[a->nlines].share = share;
            a->lines[a->nlines].ms = share * a->step_ms;
            a->lines[a->nlines].library = list[i]->stats.errors != 0;
            a->nlines++;
        }
    } else if (lines.count > 0) {
        f->oom = 1;
    }
    free(list);
    report_group_table_free(&lines);
}
