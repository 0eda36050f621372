# SPDX-License-Identifier: MIT
"""The call tree of one training step: tw-report --tree's JSON, as text."""
from __future__ import annotations

from typing import Any, List, Optional

from ._tw_report import ReportError, first_tid, in_memory, record_paths, report_json


def call_tree(source: Any, step: Optional[int] = None, boundary: Optional[str] = None,
              max_depth: Optional[int] = None, tid: Optional[int] = None, backward: str = "charged") -> str:
    """The calls of one step as an indented tree: each call with its module path, cost and self time,
    as ``tw-report --tree`` prints them (tw-report computes the tree; this reads its JSON).

    source: a Profile, a TorchWrapper, records, ``TorchWrapper.dataframe()`` or ``load()``'s DataFrame,
    or an out_dir / record file (or a list of them). step=None prints every call; else the calls of
    that step (from 0): by the records' step column, as the session decided the steps (optimizer
    steps, prof.step(), a schedule), or, for records without it or with ``boundary`` given, steps
    that end with an outermost call whose API matches ``boundary`` (default "torch.optim.*.step").
    Only the calls of thread ``tid`` (default: the first call's) of one process. max_depth: that
    many levels at most (1: the outermost calls). backward: where autograd nodes go (config aten
    "backward"): "charged" (the default: under the forward call that created them, when it is shown,
    marked "(backward)") or "timeline" (where they ran, under the backward call), as ``tw-report
    --tree --backward``. IndexError when the step is not in the records; ReportError (a
    RuntimeError) naming tw-report when it cannot read them.
    """
    if backward not in ("charged", "timeline"):
        raise ValueError(f"backward={backward!r} is not accepted: give 'charged' or 'timeline'")
    if max_depth is not None and max_depth < 1:
        raise ValueError(f"max_depth={max_depth!r} is not accepted: give 1 or more levels (None: all)")
    argv = ["torchwrapper.call_tree", "--tree", "all" if step is None else str(step), "--format", "json",
            "--backward", backward]
    if boundary is not None:
        argv += ["--boundary", boundary]
    if max_depth is not None:
        argv += ["--max-depth", str(max_depth)]
    records = in_memory(source)
    if records is not None:
        if not hasattr(records, "columns"):
            records = list(records)
        # the first call's thread: the one that started first (tw-report's, reading files, is the
        # first written; records in memory need not be in the files' order)
        tid = first_tid(records) if tid is None else tid
        source = records
    with record_paths(source) as paths:
        if paths is None:
            return ""
        if tid is not None:
            argv += ["--tid", str(tid)]
        try:
            tree = report_json(argv + ["--", *paths])
        except ReportError as e:
            if "is not in the records" in str(e):
                raise IndexError(str(e).split(": ", 1)[1].replace("tw-report failed (exit status 1): ", "")) from None
            raise
    title = "all calls" if step is None else f"step {step}"
    lines: List[str] = [f"{title}: {tree['shown']} calls shown, {tree['total_ns'] / 1e6:.3f} ms"]
    for call in tree["calls"]:
        module = f" [{call['module']}]" if call["module"] else ""
        mark = "  (backward)" if call["backward"] else ""
        lines.append(f"{'  ' * (call['level'] + 1)}{call['api']}{module}{mark}  {call['cost_ns'] / 1e6:.3f} ms  "
                     f"(self {call['self_ns'] / 1e6:.3f} ms)")
    return "\n".join(lines) + "\n"


__all__ = ["call_tree"]
