# SPDX-License-Identifier: MIT
"""The call tree of one training step, from the records' depth and parent ids."""
from __future__ import annotations

import fnmatch
from typing import Any, Dict, List, Optional, Sequence


def _records(source: Any) -> List[Any]:
    """Record-like rows (attributes call_id, api, start_ns, cost_ns, self_ns, tid, depth, parent_id,
    module) from a Profile, a TorchWrapper, a list of Records, or a dataframe() DataFrame."""
    from ._files import Record

    if hasattr(source, "_profile") and hasattr(source, "callRecords"):   # TorchWrapper
        source = source._need_profile()
    if hasattr(source, "records") and callable(source.records):          # Profile
        return source.records()
    if hasattr(source, "columns"):                                        # DataFrame of dataframe()
        frame = source
        out = []
        for row in frame.itertuples(index=False):
            values = dict(zip(frame.columns, row))
            module = values.get("Module")
            out.append(Record(call_id=values["Call ID"], api=values["API Name"], start_ns=values["Start Timestamp"],
                              cost_ns=int(round(values["Cost Time (ms)"] * 1e6)),
                              self_ns=int(round(values["Self Time (ms)"] * 1e6)),
                              gpu_ns=int(round(values["GPU Time (ms)"] * 1e6)), tid=values["Thread"],
                              depth=values["Depth"], parent_id=values["Parent ID"], error=bool(values["Error"]),
                              args=values["Arguments"], module=module if isinstance(module, str) else None,
                              step=values.get("Step", -1), pid=values.get("PID", 0),
                              fwd_call_id=int(values.get("Forward Call ID", 0) or 0)))
        return out
    return list(source)


def call_tree(source: Any, step: Optional[int] = None, boundary: Optional[str] = None,
              max_depth: Optional[int] = None, tid: Optional[int] = None, backward: str = "charged") -> str:
    """The calls of one step as an indented tree: each call with its module path, cost and self time.

    source: a Profile, a TorchWrapper, records, or ``TorchWrapper.dataframe()``. step=None prints
    every call; else the calls of that step (from 0): by the records' step column, as the session
    decided the steps (optimizer steps, prof.step(), a schedule), or, for records without it or
    with ``boundary`` given, steps that end with an outermost call whose API matches ``boundary``
    (default "torch.optim.*.step"). Only the calls of thread ``tid`` (default: the first call's).
    backward: where autograd nodes go (config aten "backward"): "charged" (the default: under the
    forward call that created them, when it is shown, marked "(backward)") or "timeline" (where
    they ran, under the backward call), as ``tw-report --tree --backward``.
    """
    if backward not in ("charged", "timeline"):
        raise ValueError(f"backward={backward!r} is not accepted: give 'charged' or 'timeline'")
    records = sorted(_records(source), key=lambda r: (r.start_ns, r.call_id))
    if not records:
        return ""
    tid = records[0].tid if tid is None else tid
    records = [r for r in records if r.tid == tid]
    roots = [r for r in records if r.depth == 0]
    if step is not None and boundary is None and roots and getattr(roots[0], "step", -1) >= 0:
        chosen = [r for r in roots if r.step == step]
        if not chosen:
            raise IndexError(f"step {step} is not in the records: {max(r.step for r in roots) + 1} step(s) "
                             "by the step column (boundary= counts boundary calls instead)")
        roots = chosen
    elif step is not None:
        boundary = boundary or "torch.optim.*.step"
        steps: List[List[Any]] = [[]]
        for r in roots:
            steps[-1].append(r)
            if fnmatch.fnmatchcase(r.api, boundary):
                steps.append([])
        if steps[-1] == [] and len(steps) > 1:
            steps.pop()
        if not 0 <= step < len(steps):
            raise IndexError(f"step {step} is not in the records: {len(steps)} step(s), ending with calls of "
                             f"{boundary!r}")
        roots = steps[step]
    children: Dict[int, List[Any]] = {}
    for r in records:
        if r.depth > 0:
            children.setdefault(r.parent_id, []).append(r)
    if backward == "charged":   # nodes move below their forward call when it is shown
        shown: Dict[int, Any] = {}
        pending = list(roots)
        while pending:
            r = pending.pop()
            shown[r.call_id] = r
            pending.extend(children.get(r.call_id, ()))
        charged: Dict[int, List[Any]] = {}
        for r in sorted(shown.values(), key=lambda r: (r.start_ns, r.call_id)):
            fwd = getattr(r, "fwd_call_id", 0)
            parent = fwd if fwd and fwd in shown else r.parent_id if r.parent_id in shown else None
            if parent is not None:
                charged.setdefault(parent, []).append(r)
            elif r.depth > 0:   # a shown call whose parent is not: a root of its own, as tw-report shows it
                roots.append(r)
        children = charged
        roots.sort(key=lambda r: (r.start_ns, r.call_id))
    lines: List[str] = []
    total = sum(r.cost_ns for r in roots)
    count = [0]

    def walk(r: Any, level: int) -> None:
        count[0] += 1
        # a module forward's path, as tw-report --tree shows it ("" is an older file's first model: none)
        module = f" [{r.module}]" if getattr(r, "module", None) else ""
        mark = "  (backward)" if backward == "charged" and getattr(r, "fwd_call_id", 0) else ""
        lines.append(f"{'  ' * level}{r.api}{module}{mark}  {r.cost_ns / 1e6:.3f} ms  (self {r.self_ns / 1e6:.3f} ms)")
        if max_depth is None or level + 1 < max_depth:
            for child in children.get(r.call_id, ()):
                walk(child, level + 1)

    for r in roots:
        walk(r, 1)
    title = "all calls" if step is None else f"step {step}"
    return "\n".join([f"{title}: {count[0]} calls shown, {total / 1e6:.3f} ms"] + lines) + "\n"


__all__ = ["call_tree"]
