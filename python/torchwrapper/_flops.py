# SPDX-License-Identifier: MIT
"""FLOPs per call (config ``flops``) and MFU: the peak a run is measured against.

``peak_flops`` given in the config wins; else, on a CUDA device whose name is in the table below,
its dense bf16/fp16 tensor-core peak (the vendor's datasheet, without sparsity); else none (on a CPU
MFU needs ``peak_flops``)."""
import sys
from typing import Optional, Tuple

from . import _outdir

__all__ = ["GPU_PEAK_FLOPS", "peak_flops"]

# Substrings of torch.cuda.get_device_name(), most specific first: dense bf16/fp16 FLOP/s.
GPU_PEAK_FLOPS: Tuple[Tuple[str, float], ...] = (
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),        # SXM
    ("GH200", 989e12),
    ("B200", 2250e12),
    ("B100", 1750e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("H800", 989e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("A6000", 155e12),       # RTX A6000
    ("V100", 125e12),
    ("T4", 65e12),
    ("RTX 4090", 165e12),
    ("RTX 3090", 71e12),
)


def gpu_peak(device_name: str) -> Optional[float]:
    """The table's peak for a device name, or None."""
    for key, peak in GPU_PEAK_FLOPS:
        if key in device_name:
            return peak
    return None


def _nvml_device_name() -> Optional[str]:
    """The name of the first visible GPU from NVML (the driver's library), or None. Asking torch
    would initialize CUDA in a program that may not have yet (before it forks DataLoader workers)."""
    import ctypes
    import os

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        handle = ctypes.c_void_p()
        if not first.isdigit() or nvml.nvmlDeviceGetHandleByIndex_v2(int(first), ctypes.byref(handle)) != 0:
            return None
        name = ctypes.create_string_buffer(96)
        if nvml.nvmlDeviceGetName(handle, name, ctypes.c_uint(96)) != 0:
            return None
        return name.value.decode(errors="replace")
    finally:
        nvml.nvmlShutdown()


def peak_flops(given: Optional[float]) -> Tuple[Optional[float], str]:
    """(peak FLOP/s, where it came from): the config's, the GPU table's, or (None, why not)."""
    if given is not None:
        return float(given), "config"
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_available():
            return None, "no peak_flops given (on a CPU, MFU needs one)"
        name = cuda.get_device_name() if cuda.is_initialized() else _nvml_device_name()
    except Exception:  # a broken driver: no MFU, the program goes on
        name = None
    if name is None:
        return None, "no peak_flops given and no CUDA device name"
    peak = gpu_peak(name)
    if peak is None:
        return None, f"no peak_flops given and {name!r} is not in the table of known GPUs"
    return peak, f"table: {name}"


def _table_source(source):
    """(source as tw-report reads it, the peak its manifest names or a DataFrame's attrs hold)."""
    import pandas

    if isinstance(source, pandas.DataFrame):
        return source, source.attrs.get("peak_flops")
    from ._tw_report import _path_list

    return source, _outdir.manifest_peak(_outdir_records(_path_list(source)))


def _outdir_records(paths):
    return [path for path in _outdir.paths(paths) if _outdir.kind(path) in ("calls", "gpu")] or paths


def report_groups(source, by: str, caller: str):
    """tw-report --by BY --format json's rows for source (a load() frame, an out_dir, a record file or
    a list of them), keyed by group: a step's key as an int (-1: calls without a step)."""
    return _report_groups(source, by, caller)[1]


def _report_groups(source, by: str, caller: str):
    """(whether the run has GPU time, report_groups' rows)."""
    from ._tw_report import record_paths, report_json

    if by not in ("api", "module", "step"):
        raise ValueError(f"by={by!r} is not accepted: give 'api', 'module' or 'step'")
    with record_paths(source) as paths:
        if paths is None:
            return False, {}
        report = report_json([caller, "--by", by, "--format", "json", "--sort", "name", "--", *paths])
    rows = report["rows"]
    if by == "step":
        return report["gpu"], {(-1 if row["key"] == "(no step)" else int(row["key"])): row for row in rows}
    return report["gpu"], {row["key"]: row for row in rows}


def flops_table(frame, by: str = "api", peak_flops: Optional[float] = None):
    """FLOPs per API, module or step of a load() frame (or an out_dir), with the achieved FLOP/s and
    MFU: tw-report's groups (``tw-report --by BY``; tw-report counts, this reads its JSON).

    by="api": each API's calls' own FLOPs (``flops``), the backward nodes' charged to them
    (``bwd_flops``), ``total_flops``, ``time_ns`` (the calls' and those nodes' time), ``flop_s`` and
    ``mfu`` (against ``peak_flops``, else the manifest's; NaN without a peak). by="module": each
    module path's forward calls' flops_total and the backward nodes of it and of the modules inside
    it (the model's row, its class, holds every node charged in the model), keyed as
    FlopCounterMode's get_flop_counts() keys modules (``GPT2LMHeadModel``,
    ``GPT2LMHeadModel.transformer.h.0.attn``); time is its forward calls' (the calls inside
    included). by="step": the step's records' own FLOPs, the autograd nodes' as bwd_flops, over the
    step's time (its calls' self times, which add up to its outermost calls'). On a run with GPU time
    every time is GPU time: the work each call or node launched itself (by="api": the API's calls'
    and the nodes charged to them; by="module": that of the forward calls and of every call inside
    them; by="step": that of every call and node of the step). flop_s is total_flops over time_ns.
    Sorted by total_flops, largest first."""
    import pandas

    source, peak = _table_source(frame)
    peak = peak_flops if peak_flops is not None else peak
    if peak is not None and not peak > 0:
        raise ValueError(f"peak_flops={peak!r} is not accepted: give FLOP/s, a number more than 0")
    gpu, groups = _report_groups(source, by, "torchwrapper.flops_table")
    table = {}
    for key, row in groups.items():
        flops, bwd = row.get("flops") or 0, row.get("bwd_flops") or 0   # null: no formula for the API
        node = row.get("node_flops") or 0
        if by == "api":     # a node's own FLOPs count for its forward API (bwd_flops), not its own row
            time = row["gpu_ns"] + row.get("bwd_gpu_ns", 0) if gpu else row["total_ns"] + row.get("bwd_ns", 0)
            flops -= node
        elif by == "module":
            time = row["gpu_ns"] if gpu else row["total_ns"]
        else:
            flops, bwd, time = flops - node, node, row["gpu_ns"] if gpu else row["self_ns"]
        table[key] = (flops, bwd, time)
    out = pandas.DataFrame.from_dict(table, orient="index", columns=["flops", "bwd_flops", "time_ns"],
                                     dtype="int64").sort_index()
    out["total_flops"] = out["flops"] + out["bwd_flops"]
    out["flop_s"] = out["total_flops"] / (out["time_ns"].where(out["time_ns"] > 0) / 1e9)
    out["mfu"] = out["flop_s"] / peak if peak else float("nan")
    out.index.name = by
    out = out[out["total_flops"] > 0]
    return out[["flops", "bwd_flops", "total_flops", "time_ns", "flop_s", "mfu"]].sort_values(
        "total_flops", ascending=False, kind="stable")
