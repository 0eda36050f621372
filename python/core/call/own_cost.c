/* SPDX-License-Identifier: MIT */
/*
 * The profiler's own cost on the threads that call torch (own_cost.h): the counters the measured
 * calls fill, and the figures a run reports from them.
 */
#include "own_cost.h"

#include <stdio.h>
#include <string.h>

#include "below/backward.h"

tw_own_calls_t tw_own_calls;

/* ns in clock's ticks */
static uint64_t ticks_of(const tw_clock_t *clock, uint64_t ns)
{
    return (uint64_t)((double)ns * (clock->ticks_per_ns > 0 ? clock->ticks_per_ns : 1.0));
}

void tw_own_begin(const tw_clock_t *clock)
{
    memset(&tw_own_calls, 0, sizeof tw_own_calls);
    tw_own_calls.max_ticks = ticks_of(clock, TW_OWN_SAMPLE_MAX_NS);
    tw_backward_own_bound(tw_own_calls.max_ticks);
}

static double per_ns(const tw_clock_t *clock, uint64_t ticks, uint64_t count)
{
    return count == 0 ? 0.0 : (double)tw_clock_duration_ns(clock, ticks) / (double)count;
}

void tw_own_figures(const tw_clock_t *clock, uint64_t gen, int with_nodes, uint64_t run_ticks,
                    tw_own_figures_t *out)
{
    *out = (tw_own_figures_t){0};
    double calls_ns = 0.0;
    for (int k = 0; k < TW_OWN_KINDS; k++) {
        uint64_t calls = tw_own_calls.periods[k] * TW_OWN_PERIOD;
        out->calls += calls;
        out->samples += tw_own_calls.samples[k];
        out->call_ns[k] = per_ns(clock, tw_own_calls.ticks[k], tw_own_calls.samples[k]);
        calls_ns += out->call_ns[k] * (double)calls;
    }
    out->calls_ns = (uint64_t)(calls_ns + 0.5);
    out->hooks_ns = tw_clock_duration_ns(clock, tw_own_calls.hook_ticks);
    tw_backward_own_t nodes = {0};
    if (with_nodes)
        tw_backward_own_cost(gen, &nodes);
    out->nodes = nodes.nodes;
    out->node_ns = per_ns(clock, nodes.ticks, nodes.samples);
    out->outliers = tw_own_calls.outliers + nodes.outliers;
    out->nodes_ns = (uint64_t)(out->node_ns * (double)nodes.nodes + 0.5);
    out->total_ns = out->calls_ns + out->hooks_ns + out->nodes_ns;
    out->run_ns = tw_clock_duration_ns(clock, run_ticks);
}

int tw_own_json(const tw_own_figures_t *f, char *out, size_t size)
{
    int n = snprintf(out, size,
                     "{\"sample_every\":%d,\"calls\":%llu,\"samples\":%llu,\"outliers\":%llu,\"call_ns\":{\"detail\":%.1f,"
                     "\"plain\":%.1f},\"calls_ns\":%llu,\"hooks_ns\":%llu,\"nodes\":%llu,\"node_ns\":%.1f,"
                     "\"nodes_ns\":%llu,\"total_ns\":%llu,\"run_ns\":%llu}",
                     TW_OWN_PERIOD, (unsigned long long)f->calls, (unsigned long long)f->samples,
                     (unsigned long long)f->outliers, f->call_ns[TW_OWN_DETAIL], f->call_ns[TW_OWN_PLAIN], (unsigned long long)f->calls_ns,
                     (unsigned long long)f->hooks_ns, (unsigned long long)f->nodes, f->node_ns,
                     (unsigned long long)f->nodes_ns, (unsigned long long)f->total_ns,
                     (unsigned long long)f->run_ns);
    return n < 0 || (size_t)n >= size ? -1 : n;
}

PyObject *tw_own_dict(const tw_own_figures_t *f)
{
    return Py_BuildValue("{sisKsKsKs{sdsd}sKsKsKsdsKsKsK}", "sample_every", TW_OWN_PERIOD, "calls",
                         (unsigned long long)f->calls, "samples", (unsigned long long)f->samples, "outliers",
                         (unsigned long long)f->outliers, "call_ns",
                         "detail", f->call_ns[TW_OWN_DETAIL], "plain", f->call_ns[TW_OWN_PLAIN], "calls_ns",
                         (unsigned long long)f->calls_ns, "hooks_ns", (unsigned long long)f->hooks_ns, "nodes",
                         (unsigned long long)f->nodes, "node_ns", f->node_ns, "nodes_ns",
                         (unsigned long long)f->nodes_ns, "total_ns", (unsigned long long)f->total_ns, "run_ns",
                         (unsigned long long)f->run_ns);
}
