# SPDX-License-Identifier: MIT
"""torchwrapper.findings(): tw-report --findings as Python data (tw-report computes; this reads its JSON)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ._diff import Source, _inputs, _report_json

def findings(path: Source, *, jobs: Optional[int] = None) -> List[Dict[str, Any]]:
    """What is wrong in a profiled run, where, what it costs and how to fix it: tw-report
    --findings' list, most severe first. Each finding is a dict with ``kind`` (a stable identifier:
    ``input_bound``, ``host_sync``, ``python_outside_torch``, ``many_small_ops``,
    ``optimizer_single_tensor``, ``zero_grad_fills``, ``conv_bias_before_batchnorm``,
    ``recompilation``, ``step_time_drift``, ``memory_growth``, ``straggler``), ``severity`` (``high``, ``medium``, ``low``), ``share``
    (of the run's time, None where the finding is not a time), ``where`` (the program's lines,
    ``"train.py:54 <module>"``, most costly first; module paths where that is the unit),
    ``evidence`` (the numbers it rests on), ``message`` and ``fix``.
    path: a profile's output directory, a record file, or a list of them."""
    return findings_output(path, "json", jobs=jobs)["findings"]


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


def summary_text(path: Source, shown: int = 3) -> str:
    """The findings in a few lines, for the end of a run, a notebook cell, a trainer's log: the
    high and medium ones (at most shown) with their first line and fix, the rest counted. "" when
    there are none, or when the files cannot be read (the report above says why)."""
    try:
        result = findings_output(path, "json")
    except (ValueError, OSError):
        return ""
    found = result["findings"]
    if not found:
        return ""
    serious = [f for f in found if f["severity"] in ("high", "medium")]
    lines = [f"Findings: {len(serious)} high or medium, {len(found) - len(serious)} low "
             f"(tw-report --findings {path} for all):"]
    for f in (serious or found)[:shown]:
        where = f" at {f['where'][0]}" if f["where"] else ""
        lines.append(f"  [{f['severity']}] {f['kind']}{where}: {f['message']}")
        lines.append(f"      fix: {f['fix']}")
    return "\n".join(lines) + "\n"
