/* SPDX-License-Identifier: MIT */
/*
 * The profiler's own cost in the reports (own_cost_report.h).
 */
#include "config.h"
#include "own_cost_report.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "torchwrapper/report.h"

/* A non-negative number of o's key, or 0. */
static double number_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0.0;
}

void report_own_add(report_own_t *own, const cJSON *root)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "own_cost");
    if (!cJSON_IsObject(o))
        return;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "writer");
    const cJSON *rates = cJSON_GetObjectItemCaseSensitive(o, "call_ns");
    if (own->manifests++ == 0) {
        const cJSON *detail = cJSON_GetObjectItemCaseSensitive(root, "detail");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(detail, "sampled"))) {
            own->detail_first = (int64_t)number_of(detail, "first");
            own->detail_every = (int64_t)number_of(detail, "every");
        }
        own->call_ns_detail = number_of(rates, "detail");
        own->call_ns_plain = number_of(rates, "plain");
        own->node_ns = number_of(o, "node_ns");
    }
    own->calls += (uint64_t)number_of(o, "calls");
    own->calls_ns += (uint64_t)number_of(o, "calls_ns");
    own->hooks_ns += (uint64_t)number_of(o, "hooks_ns");
    own->nodes += (uint64_t)number_of(o, "nodes");
    own->nodes_ns += (uint64_t)number_of(o, "nodes_ns");
    own->run_ns += (uint64_t)number_of(o, "run_ns");
    own->help_ns += (uint64_t)number_of(w, "help_ns");
    own->close_ns += (uint64_t)number_of(w, "close_ns");
    own->writer_cpu_ns += (uint64_t)number_of(w, "thread_cpu_ns");
}


int tw_report_own_cost_text(const char *const *manifests, size_t count, char *buf, size_t size)
{
    report_own_t own = {0};
    for (size_t i = 0; i < count; i++) {
        cJSON *root = cJSON_Parse(manifests[i]);
        if (root == NULL)
            continue; /* a manifest that does not parse says nothing, as in tw-report */
        report_own_add(&own, root);
        cJSON_Delete(root);
    }
    if (size == 0)
        return 0;
    report_own_text(&own, buf, size);
    return (int)strlen(buf);
}

uint64_t report_own_program_ns(const report_own_t *o)
{
    return o->calls_ns + o->hooks_ns + o->nodes_ns + o->help_ns + o->close_ns;
}

/* ns as "12.3 ms" (or s, or us) */
static void duration(char *buf, size_t size, uint64_t ns)
{
    if (ns >= 1000000000u)
        snprintf(buf, size, "%.2f s", (double)ns / 1e9);
    else if (ns >= 1000000u)
        snprintf(buf, size, "%.1f ms", (double)ns / 1e6);
    else
        snprintf(buf, size, "%.1f us", (double)ns / 1e3);
}

void report_own_text(const report_own_t *o, char *buf, size_t size)
{
    buf[0] = '\0';
    if (o->manifests == 0 || size == 0)
        return;
    uint64_t program = report_own_program_ns(o);
    char total[32], run[32], calls[32], nodes[32], hooks[32], writing[32], writer[32];
    duration(total, sizeof total, program);
    duration(run, sizeof run, o->run_ns);
    duration(calls, sizeof calls, o->calls_ns);
    duration(nodes, sizeof nodes, o->nodes_ns);
    duration(hooks, sizeof hooks, o->hooks_ns);
    duration(writing, sizeof writing, o->help_ns + o->close_ns);
    duration(writer, sizeof writer, o->writer_cpu_ns);
    double per_call = o->call_ns_detail > 0 ? o->call_ns_detail : o->call_ns_plain;
    size_t n = (size_t)snprintf(buf, size, "torchwrapper's own cost: %.2f%% of the recording (%s of %s) on the "
                                "program's threads: calls %s (%.0f ns a call",
                                o->run_ns ? 100.0 * (double)program / (double)o->run_ns : 0.0, total, run, calls,
                                per_call);
    if (n < size && o->call_ns_detail > 0 && o->call_ns_plain > 0)
        n += (size_t)snprintf(buf + n, size - n, " with detail, %.0f without", o->call_ns_plain);
    if (n < size)
        n += (size_t)snprintf(buf + n, size - n, ", measured on 1 in 64)");
    if (n < size && o->nodes > 0)
        n += (size_t)snprintf(buf + n, size - n, ", autograd nodes %s (%.0f ns a node)", nodes, o->node_ns);
    if (n < size && o->hooks_ns > 0)
        n += (size_t)snprintf(buf + n, size - n, ", model watch %s", hooks);
    if (n < size)
        n += (size_t)snprintf(buf + n, size - n, ", writing %s; its writer thread %s of CPU; not counted: torch's own "
                              "code slowed beside it (caches they share)", writing, writer);
    if (n < size && o->detail_every > 0) /* what the tables and findings built from the detail stand on */
        n += (size_t)snprintf(buf + n, size - n, ". Argument summaries, autograd nodes and FLOPs in steps 0-%" PRId64
                              " and one in %" PRId64 " after (detail \"sampled\"; detail \"all\" for every step)",
                              o->detail_first - 1, o->detail_every);
    if (n >= size && size > 4)
        memcpy(buf + size - 4, "...", 4);
}

uint64_t report_own_step_ns(const report_own_t *o, int detail, uint64_t calls, uint64_t nodes)
{
    double per_call = detail || o->call_ns_plain <= 0 ? o->call_ns_detail : o->call_ns_plain;
    return (uint64_t)(per_call * (double)calls + o->node_ns * (double)nodes + 0.5);
}

int report_row_is_node(const tw_row_t *row)
{
    static const char prefix[] = "torch::autograd::";
    return row->fwd_call_id != 0 ||
           (row->api.len >= sizeof prefix - 1 && memcmp(row->api.ptr, prefix, sizeof prefix - 1) == 0);
}

int report_detail_step(int64_t first, int64_t every, int64_t step)
{
    return every <= 0 || step < first || step % every == 0;
}

int report_own_detail_step(const report_own_t *o, int64_t step)
{
    return report_detail_step(o->detail_first, o->detail_every, step);
}
