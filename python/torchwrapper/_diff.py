# SPDX-License-Identifier: MIT
"""torchwrapper.diff(base, new): tw-report --diff as a pandas DataFrame.

The C report does the work (one streaming pass per run, the per-step test); this module passes the
options through and reads its JSON, so the program and the function cannot disagree.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable, List, Optional, Union

from . import _core

Source = Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]

# tw-report --diff --format csv's header, in order (the DataFrame's columns even when it has no rows).
DIFF_COLUMNS = ["api", "verdict", "change_ns", "change_pct_of_step", "p_value", "u", "base_calls_per_step",
                "new_calls_per_step", "base_total_ns_per_step", "new_total_ns_per_step", "total_change_pct",
                "base_self_ns_per_step", "new_self_ns_per_step", "self_change_pct", "base_median_self_ns",
                "new_median_self_ns", "base_p50_ns", "new_p50_ns", "base_p99_ns", "new_p99_ns", "fail_above"]


def _report_json(argv: List[str], failed: Callable[[int, str], bool]) -> Any:
    """tw-report's JSON output for argv (run in this process), or ValueError with its message when
    failed(status, output) says it failed. Usage errors name the option and what it accepts; others
    name the file and what is wrong."""
    status, output, messages = _core.report_output(argv)
    if failed(status, output):
        raise ValueError(messages.strip().replace("\n(tw-report --help lists the options)", "")
                         .replace("tw-report: ", ""))
    return json.loads(output)


def _inputs(source: Source, which: str) -> List[str]:
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not items:
        raise ValueError(f"{which}: no record files or directory given")
    paths = [os.fspath(item) for item in items]
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{which}: no such record file or directory: {path}")
    return paths


def diff(base: Source, new: Source, *, steps: Optional[str] = None, api: Union[None, str, Iterable[str]] = None,
         alpha: Optional[float] = None, min_change: Optional[float] = None, fail_above: Optional[float] = None,
         top: Optional[int] = None) -> Any:
    """Per API, what a step costs in run ``base`` and in run ``new``, the change, and whether it is beyond
    the runs' step-to-step noise: ``tw-report --diff BASE NEW`` as a pandas DataFrame, one row per API,
    the largest change of a step's time first (columns: ``DIFF_COLUMNS``; ``verdict`` is regression,
    improvement, same, appeared or vanished).

    base, new: an output directory, a record file, or a list of them. steps: "FIRST:LAST" for both runs
    (default: the first step, a warm-up, and the last, maybe cut off, are left out). api: glob(s) of APIs
    to keep. alpha (default 0.001), min_change (percent of BASE's step time, default 4): when a change
    counts as beyond noise. fail_above: percent of BASE's step time; rows over it have ``fail_above`` 1
    and ``frame.attrs["failed"]`` is True. ``frame.attrs`` also holds ``base`` and ``new`` (inputs, steps
    compared, step time in ns), ``step_change_pct`` and ``step_p_value``.
    """
    import pandas

    argv = ["torchwrapper.diff"]
    for path in _inputs(base, "base"):
        argv += ["--diff", path]
    options = {"--steps": steps, "--alpha": alpha, "--min-change": min_change, "--fail-above": fail_above,
               "--top": top}
    for name, value in options.items():
        if value is not None:
            argv += [name, str(value)]
    for glob in [api] if isinstance(api, str) else list(api or []):
        argv += ["--api", glob]
    argv += ["--format", "json", "--", *_inputs(new, "new")]
    # (exit status 1 with output: a regression beyond --fail-above, still a result)
    result = _report_json(argv, failed=lambda status, output: status != 0 and not output)
    frame = pandas.DataFrame(result["rows"], columns=DIFF_COLUMNS)
    frame.attrs.update({key: value for key, value in result.items() if key != "rows"})
    return frame
