# SPDX-License-Identifier: MIT
"""torchwrapper.ranks(path): tw-report --ranks as a pandas DataFrame.

The C report does the work (one streaming pass, on every core); this module reads its JSON, so the
program and the function cannot disagree.
"""
from __future__ import annotations

from typing import Any, Optional

from ._diff import Source, _inputs, _report_json

# One row per step and rank (tw-report --ranks --format csv's columns).
RANKS_COLUMNS = ["step", "rank", "pid", "step_ns", "wait_ns", "busy_ns", "slowest", "skew_ns", "start_ns", "end_ns"]


def ranks(path: Source, *, steps: Optional[str] = None, alpha: Optional[float] = None,
          min_change: Optional[float] = None, jobs: Optional[int] = None) -> Any:
    """Per step and rank of a distributed run: the step's recorded time (``step_ns``), the part of it
    spent waiting in collectives (``wait_ns``: torch.distributed calls, and DDP's allreduce waited
    for inside backward), the rest (``busy_ns``), whether the rank was the step's slowest
    (``slowest``, by busy time) and the step's skew (the slowest rank's busy time less the median
    rank's); ``start_ns``/``end_ns`` span the rank's calls in the step on rank 0's clock (the
    offset measured at run time, see ``clock_sync`` in the manifests). One row per step and rank,
    columns ``RANKS_COLUMNS``.

    ``frame.attrs["ranks"]``: per rank, how often and how much it was slowest, its medians, its busy
    time against the other ranks' (``change_ns``, ``p_value``), ``straggler`` (beyond noise: the rank
    test of ``diff`` in its paired form, Wilcoxon signed-rank over the steps; alpha, default 0.001, and
    min_change, percent of the median rank's step time, default 4; the test is exact up to 25 steps),
    ``likely`` (not a straggler yet, but slowest in more steps than chance makes likely: ``sign_p``,
    the sign test times the number of ranks, under 0.05, and at least min_change slower; about
    ``more_steps`` more steps like these would make it one), its clock offset and error, and for a
    straggler or a likely one ``apis``: the APIs that explain its extra time, the largest first
    (at p < alpha, or for a likely one p < 0.05). Also ``first_step``, ``last_step``, ``step_ns``,
    ``clock_error_ns``.
    steps: "FIRST:LAST" (default: all but the first and the last step).
    """
    import pandas

    argv = ["torchwrapper.ranks", "--ranks"]
    options = {"--steps": steps, "--alpha": alpha, "--min-change": min_change, "-j": jobs}
    for name, value in options.items():
        if value is not None:
            argv += [name, str(value)]
    argv += ["--format", "json", "--", *_inputs(path, "path")]
    result = _report_json(argv, failed=lambda status, output: status != 0 or not output)
    slowest = {s["step"]: (s["slowest_rank"], s["slowest_pid"], s["skew_ns"]) for s in result["steps"]}
    rows = [dict(cell, slowest=slowest[cell["step"]][1] == cell["pid"], skew_ns=slowest[cell["step"]][2])
            for cell in result["cells"]]
    frame = pandas.DataFrame(rows, columns=RANKS_COLUMNS)
    frame.attrs.update({key: value for key, value in result.items() if key != "cells"})
    return frame
