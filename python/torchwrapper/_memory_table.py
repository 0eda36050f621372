# SPDX-License-Identifier: MIT
"""Memory per API, module or step of a load() frame (config memory), as tw-report shows it."""
from typing import Any

from ._flops import enclosing_modules

__all__ = ["memory_table"]

_COLUMNS = ["calls", "mem_alloc", "mem_self", "mem_freed", "mem_peak", "bwd_mem"]


def memory_table(frame: Any, by: str = "api"):
    """Bytes the allocators reported per API, module or step of a load() frame (or an out_dir).

    by="api": each API's calls: ``mem_alloc`` (with the calls inside them), ``mem_self``,
    ``mem_freed`` (sums), ``mem_peak`` (the highest of their peaks), and ``bwd_mem``, what the autograd
    nodes charged to them allocated (nodes keep rows of their own too), as ``tw-report --by api``.
    by="module": each module's forward calls (the modules and calls inside them included) and the
    nodes charged to it or to a module inside it (its path; the model's is its class), as ``tw-report
    --by module``. by="step": the
    outermost calls of each step (on every thread; nested calls' bytes are theirs already) and the
    highest peak in it, as ``tw-report --by step``. Rows without any
    memory are left out; sorted by mem_alloc + bwd_mem, largest first."""
    import pandas

    if not isinstance(frame, pandas.DataFrame):
        from ._files import load

        frame = load(frame)
    if by not in ("api", "module", "step"):
        raise ValueError(f"by={by!r} is not accepted: give 'api', 'module' or 'step'")
    node = frame["fwd_call_id"] != 0
    if by == "api":
        keys, rows = frame["api"].astype(str), frame
        bwd = frame["mem_alloc"][node].groupby(frame["fwd_api"][node].astype(str)).sum()
    elif by == "module":
        forward = ~node & frame["module"].notna() & frame["api"].astype(str).str.endswith(".forward")
        rows = frame[forward]
        keys = rows["module"].astype(str)
        # a node's bytes count for its module and every module around it, the model included
        charged = frame[node & frame["module"].notna() & (frame["mem_alloc"] != 0)]
        totals = {}
        for module, size in charged.groupby(charged["module"].astype(str))["mem_alloc"].sum().items():
            for prefix in enclosing_modules(module):
                totals[prefix] = totals.get(prefix, 0) + int(size)
        bwd = pandas.Series(totals, dtype="int64")
    else:
        rows = frame[frame["parent_id"] == 0]
        keys = rows["step"]
        bwd = frame["mem_alloc"][:0].groupby(frame["step"][:0]).sum()
    grouped = rows.groupby(keys)
    out = pandas.DataFrame({"calls": grouped.size(), "mem_alloc": grouped["mem_alloc"].sum(),
                            "mem_self": grouped["mem_self"].sum(), "mem_freed": grouped["mem_freed"].sum(),
                            "mem_peak": grouped["mem_peak"].max()})
    if by == "step":  # the highest peak of any call in the step, nested ones included
        out["mem_peak"] = frame["mem_peak"].groupby(frame["step"]).max()
    out = out.join(bwd.rename("bwd_mem"), how="left" if by == "module" else "outer").fillna(0).astype("int64")
    out.index.name = by
    out = out[(out["mem_alloc"] | out["mem_freed"] | out["bwd_mem"]) != 0]
    order = (out["mem_alloc"] + out["bwd_mem"]).sort_values(ascending=False, kind="stable").index
    return out.loc[order, _COLUMNS]
