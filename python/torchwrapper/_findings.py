# SPDX-License-Identifier: MIT
"""torchwrapper.findings(): tw-report --findings as Python data (tw-report computes; this reads its JSON)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._diff import Source, _inputs, _report_json

def findings(path: Source, *, jobs: Optional[int] = None) -> List[Dict[str, Any]]:
    """What is wrong in a profiled run, where, what it costs and how to fix it: tw-report
    --findings' list, most severe first, then by share. Each finding is a dict with ``kind`` (a
    stable identifier, one of the catalogue's rules: ``tw-report --rules``, docs/findings.md),
    ``severity`` (``high``, ``medium``, ``low``), ``share`` (of the run's time, None where the
    finding is not a time), ``where`` (the program's lines, ``"train.py:54 <module>"``, most costly
    first; module paths where that is the unit), ``evidence`` (the numbers it rests on),
    ``message``, ``fix`` and ``source`` (where the advice comes from).
    path: a profile's output directory, a record file, or a list of them."""
    return findings_output(path, "json", jobs=jobs)["findings"]


def step_anatomy(path: Source, *, jobs: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """A typical step of a profiled run (the mean of the middle half of its steps, the first left
    out): ``{"steps", "step_ms", "parts_ms": {"data", "forward", "backward", "optimizer",
    "evaluation", "other torch", "Python"}, "lines": [{"where", "runs", "share", "ms"}]}``, the
    program's lines that cost 5% of a step or more with the call that costs the most at each; None
    under three steps."""
    return findings_output(path, "json", jobs=jobs)["anatomy"]


def findings_output(path: Source, fmt: str = "text", *, jobs: Optional[int] = None) -> Any:
    """tw-report --findings' output in fmt: "json" (parsed: {"findings": [...], "steps", "run_ms"}),
    "text" or "markdown" (as printed: run's end-of-run summary, the notebook, the callbacks' log)."""
    from . import _core

    argv = ["torchwrapper.findings", "--findings", "--format", "table" if fmt == "text" else fmt]
    if jobs is not None:
        argv += ["-j", str(jobs)]
    argv += ["--", *_inputs(path, "path")]
    if fmt == "json":
        return _report_json(argv, failed=lambda status, output: status != 0 or not output)
    status, output, messages = _core.report_output(argv)
    if status != 0:
        raise ValueError(messages.strip().replace("tw-report: ", ""))
    return output


def anatomy_text(anatomy: Optional[Dict[str, Any]], lines_shown: int = 3) -> str:
    """A typical step in a line or a few: its time, its parts' shares, its costliest lines. "" for
    None (under three steps)."""
    if not anatomy or anatomy["step_ms"] <= 0:
        return ""
    step = anatomy["step_ms"]
    parts = ", ".join(f"{name} {100 * ms / step:.0f}%" for name, ms in anatomy["parts_ms"].items()
                      if ms >= 0.005 * step)
    lines = [f"A typical step: {step:.2f} ms: {parts}"]
    for line in anatomy["lines"][:lines_shown]:
        lines.append(f"  {100 * line['share']:.1f}% of a step at {line['where']}: {line['runs']}")
    return "\n".join(lines) + "\n"


def summary_text(path: Source, shown: int = 3) -> str:
    """The step's anatomy and the findings in a few lines, for the end of a run, a notebook cell, a
    trainer's log: a typical step's parts and costliest lines, then the high and medium findings (at
    most shown) with their first line and fix, the rest counted. "" when there is nothing to say,
    or when the files cannot be read (the report above says why)."""
    try:
        result = findings_output(path, "json")
    except (ValueError, OSError):
        return ""
    text = anatomy_text(result.get("anatomy"))
    found = result["findings"]
    if not found:
        return text
    serious = [f for f in found if f["severity"] in ("high", "medium")]
    lines = [f"Findings: {len(serious)} high or medium, {len(found) - len(serious)} low "
             f"(tw-report --findings {path} for all):"]
    for f in (serious or found)[:shown]:
        where = f" at {f['where'][0]}" if f["where"] else ""
        lines.append(f"  [{f['severity']}] {f['kind']}{where}: {f['message']}")
        lines.append(f"      fix: {f['fix']}")
    return text + "\n".join(lines) + "\n"
