# SPDX-License-Identifier: MIT
"""The profiler's own cost as a run's manifests say it ("own_cost" and "writer", written at stop):
the line `run`'s summary prints, as tw-report prints it under its tables (src/report/own_cost.c)."""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional


def _duration(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.1f} us"


def totals(manifests: Iterable[Dict[str, Any]]) -> Optional[Dict[str, float]]:
    """The own cost summed over manifests (processes); None when none says it."""
    out: Optional[Dict[str, float]] = None
    for m in manifests:
        detail = m.get("detail") or {}
        own, writer = m.get("own_cost"), m.get("writer") or {}
        if not isinstance(own, dict):
            continue
        if out is None:
            rates = own.get("call_ns") or {}
            out = {"call_ns_detail": rates.get("detail", 0), "call_ns_plain": rates.get("plain", 0),
                   "node_ns": own.get("node_ns", 0), "calls_ns": 0, "hooks_ns": 0, "nodes_ns": 0, "nodes": 0,
                   "run_ns": 0, "help_ns": 0, "close_ns": 0, "writer_cpu_ns": 0,
                   "detail_first": detail.get("first", 0) if detail.get("sampled") else 0,
                   "detail_every": detail.get("every", 0) if detail.get("sampled") else 0}
        for key in ("calls_ns", "hooks_ns", "nodes_ns", "nodes", "run_ns"):
            out[key] += own.get(key, 0)
        out["help_ns"] += writer.get("help_ns", 0)
        out["close_ns"] += writer.get("close_ns", 0)
        out["writer_cpu_ns"] += writer.get("thread_cpu_ns", 0)
    if out is not None:
        out["program_ns"] = out["calls_ns"] + out["hooks_ns"] + out["nodes_ns"] + out["help_ns"] + out["close_ns"]
    return out


def text(manifests: Iterable[Dict[str, Any]]) -> str:
    """"torchwrapper's own cost: 1.20% of the recording (...)", or "" when no manifest says it."""
    t = totals(manifests)
    if t is None:
        return ""
    share = 100.0 * t["program_ns"] / t["run_ns"] if t["run_ns"] else 0.0
    per_call = t["call_ns_detail"] or t["call_ns_plain"]
    line = (f"torchwrapper's own cost: {share:.2f}% of the recording ({_duration(t['program_ns'])} of "
            f"{_duration(t['run_ns'])}) on the program's threads: calls {_duration(t['calls_ns'])} "
            f"({per_call:.0f} ns a call")
    if t["call_ns_detail"] and t["call_ns_plain"]:
        line += f" with detail, {t['call_ns_plain']:.0f} without"
    line += ", measured on 1 in 64)"
    if t["nodes"]:
        line += f", autograd nodes {_duration(t['nodes_ns'])} ({t['node_ns']:.0f} ns a node)"
    if t["hooks_ns"]:
        line += f", model watch {_duration(t['hooks_ns'])}"
    line += f", writing {_duration(t['help_ns'] + t['close_ns'])}; its writer thread {_duration(t['writer_cpu_ns'])} of CPU"
    if t["detail_every"]:
        line += (f". Argument summaries, autograd nodes and FLOPs in steps 0-{t['detail_first'] - 1:.0f} and one in "
                 f"{t['detail_every']:.0f} after (detail \"sampled\"; detail \"all\" for every step)")
    return line
