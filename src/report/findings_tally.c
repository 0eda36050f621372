/* SPDX-License-Identifier: MIT */
/* What every findings rule uses at settle (findings_state.h): tallies ranked, findings made from a
 * catalogue entry, their lines and evidence. */
#include "config.h"
#include "findings_tally.h"

#include <stdlib.h>
#include <string.h>

#include "site_texts.h"

void findings_tally_settle(findings_t *f, tally_t *t)
{
    if (!f->skip_first || t->first_step_too)
        return;
    size_t n;
    group_t **first = report_group_list(&t->first, &n);
    for (size_t i = 0; first != NULL && i < n; i++) {
        group_t *g = report_group_get(&t->all, first[i]->key, first[i]->key_len);
        if (g == NULL)
            continue;
        g->stats.calls -= first[i]->stats.calls;
        g->stats.total_ns -= first[i]->stats.total_ns;
        g->stats.self_ns -= first[i]->stats.self_ns;
    }
    free(first);
}

static int by_time_desc(const void *a, const void *b)
{
    const group_t *x = *(group_t *const *)a, *y = *(group_t *const *)b;
    if (x->stats.total_ns != y->stats.total_ns)
        return x->stats.total_ns < y->stats.total_ns ? 1 : -1;
    return strcmp(x->key, y->key);
}

group_t **findings_ranked_groups(findings_t *f, tally_t *t, size_t *n, uint64_t *total_ns, uint64_t *count)
{
    group_t **list = report_group_list(&t->all, n);
    *total_ns = *count = 0;
    if (list == NULL) {
        if (t->all.count > 0)
            f->oom = 1;
        *n = 0;
        return NULL;
    }
    size_t kept = 0; /* (a line of the first step alone is empty once that step is left out) */
    for (size_t i = 0; i < *n; i++)
        if (list[i]->stats.calls > 0)
            list[kept++] = list[i];
    *n = kept;
    if (*n == 0) {
        free(list);
        return NULL;
    }
    qsort(list, *n, sizeof *list, by_time_desc);
    for (size_t i = 0; i < *n; i++) {
        *total_ns += list[i]->stats.total_ns;
        *count += list[i]->stats.calls;
    }
    return list;
}

const char *findings_severity(double share, double high, double medium)
{
    return share >= high ? "high" : share >= medium ? "medium" : "low";
}

finding_t *findings_add(findings_t *f, const rule_t *rule, double share)
{
    finding_t *more = realloc(f->found, (f->nfound + 1) * sizeof *more);
    if (more == NULL) {
        f->oom = 1;
        return NULL;
    }
    f->found = more;
    finding_t *x = &f->found[f->nfound++];
    memset(x, 0, sizeof *x);
    x->kind = rule->kind;
    x->share = share;
    x->severity = findings_severity(share, rule->high, rule->medium);
    x->source = rule->source;
    if (rule->fix != NULL)
        snprintf(x->fix, sizeof x->fix, "%s", rule->fix);
    return x;
}

void findings_add_where_text(finding_t *x, const char *text)
{
    for (size_t k = 0; k < x->nwhere; k++)
        if (strcmp(x->where[k], text) == 0)
            return;
    if (x->nwhere < FINDING_WHERE_MAX && strcmp(text, "(no site)") != 0) {
        char *w = malloc(strlen(text) + 1);
        if (w != NULL)
            x->where[x->nwhere++] = strcpy(w, text);
    }
}

void findings_add_where(finding_t *x, group_t **list, size_t n)
{
    char text[WHERE_TEXT_MAX + 1];
    for (size_t i = 0; i < n && x->nwhere < FINDING_WHERE_MAX; i++) {
        size_t len = strcspn(list[i]->key, "\t");
        memcpy(text, list[i]->key, len);
        text[len] = '\0';
        findings_add_where_text(x, text);
    }
}

void findings_evidence(finding_t *x, const char *key, double value)
{
    if (x->nevidence < FINDING_EVIDENCE_MAX) {
        x->evidence_keys[x->nevidence] = key;
        x->evidence[x->nevidence++] = value;
    }
}

double findings_ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

const char *findings_line_text(const findings_t *f, const series_entry_t *e)
{
    const char *text = e->site != 0 && f->sites != NULL ? report_site_text(f->sites, e->pid, e->site) : NULL;
    return text != NULL ? text : "(no site)";
}

int findings_api_in(const char *api, size_t len, const char *list)
{
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '|');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n > 0 && p[n - 1] == '*') {
            if (len >= n - 1 && memcmp(api, p, n - 1) == 0)
                return 1;
        } else if (len == n && memcmp(api, p, n) == 0) {
            return 1;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    return 0;
}

static int severity_rank(const char *severity)
{
    return strcmp(severity, "high") == 0 ? 0 : strcmp(severity, "medium") == 0 ? 1 : 2;
}

static int by_severity_then_share(const void *a, const void *b)
{
    const finding_t *x = a, *y = b;
    int rx = severity_rank(x->severity), ry = severity_rank(y->severity);
    if (rx != ry)
        return rx - ry;
    if (x->share != y->share)
        return x->share < y->share ? 1 : -1;
    return strcmp(x->kind, y->kind);
}

void findings_sort(findings_t *f)
{
    qsort(f->found, f->nfound, sizeof *f->found, by_severity_then_share);
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double findings_median_u64(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, compare_u64);
    return n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2;
}
