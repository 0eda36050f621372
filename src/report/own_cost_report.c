/* SPDX-License-Identifier: MIT */
/*
 * The profiler's own cost in the reports (own_cost_report.h).
 */
#include "config.h"
#include "own_cost_report.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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
        n += (size_t)snprintf(buf + n, size - n, ", writing %s; its writer thread %s of CPU", writing, writer);
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
