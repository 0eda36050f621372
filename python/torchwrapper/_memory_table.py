# SPDX-License-Identifier: MIT
"""Memory per API, module or step (config memory): tw-report's groups, as a DataFrame."""
from typing import Any

from ._flops import report_groups

__all__ = ["memory_table"]

_COLUMNS = ["calls", "mem_alloc", "mem_self", "mem_freed", "mem_peak", "bwd_mem"]


def memory_table(frame: Any, by: str = "api"):
    """Bytes the allocators reported per API, module or step of a load() frame (or an out_dir), as
    ``tw-report --by BY`` shows them (tw-report counts; this reads its JSON).

    by="api": each API's calls: ``mem_alloc`` (with the calls inside them), ``mem_self``,
    ``mem_freed`` (sums), ``mem_peak`` (the highest of their peaks), and ``bwd_mem``, what the autograd
    nodes charged to them allocated (nodes keep rows of their own too). by="module": each module's
    forward calls (the modules and calls inside them included) and the nodes charged to it or to a
    module inside it (its path; the model's is its class). by="step": the calls of each step
    (``calls``: all of them, on every thread), the bytes of its outermost calls (nested calls' bytes
    are theirs already) and the highest peak in it. Rows without any memory are left out; sorted by
    mem_alloc + bwd_mem, largest first."""
    import pandas

    groups = report_groups(frame, by, "torchwrapper.memory_table")
    rows = {key: [row.get(column, 0) for column in _COLUMNS] for key, row in groups.items()}
    out = pandas.DataFrame.from_dict(rows, orient="index", columns=_COLUMNS, dtype="int64").sort_index()
    out.index.name = by
    out = out[(out["mem_alloc"] | out["mem_freed"] | out["bwd_mem"]) != 0]
    order = (out["mem_alloc"] + out["bwd_mem"]).sort_values(ascending=False, kind="stable").index
    return out.loc[order, _COLUMNS]
