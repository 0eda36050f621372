# SPDX-License-Identifier: MIT
"""FLOPs per call (config ``flops``) and MFU: the peak a run is measured against.

``peak_flops`` given in the config wins; else, on a CUDA device whose name is in the table below,
its dense bf16/fp16 tensor-core peak (the vendor's datasheet, without sparsity); else none (on a CPU
MFU needs ``peak_flops``)."""
import sys
from typing import List, Optional, Tuple

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


def manifest_peak(record_paths) -> Optional[float]:
    """The peak_flops of the first manifest beside the record files that names one, or None."""
    import json
    import os

    for folder in dict.fromkeys(os.path.dirname(os.path.abspath(p)) for p in record_paths):
        for name in sorted(os.listdir(folder)):
            if name.startswith("manifest") and name.endswith(".json"):
                try:
                    with open(os.path.join(folder, name)) as f:
                        peak = json.load(f).get("peak_flops")
                except (OSError, ValueError):
                    continue
                if isinstance(peak, (int, float)) and peak > 0:
                    return float(peak)
    return None


def enclosing_modules(path: str) -> List[str]:
    """The module paths a backward node charged to path counts for: path and every module around it,
    from the model (the path's first component, its class) in. "" comes first: files written before
    every model was named by its class name their first model "" and its modules plainly."""
    parts = path.split(".") if path else []
    return [""] + [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def flops_table(frame, by: str = "api", peak_flops: Optional[float] = None):
    """FLOPs per API, module or step of a load() frame (or an out_dir), with the achieved FLOP/s and
    MFU, as tw-report shows them.

    by="api": each API's calls' own FLOPs (``flops``), the backward nodes' charged to them
    (``bwd_flops``), ``total_flops``, ``time_ns`` (the calls' and those nodes' time: GPU time when the
    run has some, else CPU time), ``flop_s`` and ``mfu`` (against ``peak_flops``, else the manifest's;
    NaN without a peak). by="module": each module path's forward calls' flops_total and the backward
    nodes of it and of the modules inside it (the model's row, its class, holds every node charged in
    the model), keyed as FlopCounterMode's get_flop_counts() keys modules (``GPT2LMHeadModel``,
    ``GPT2LMHeadModel.transformer.h.0.attn``); time is its forward calls'. by="step": every record's own FLOPs in the step over the time of its
    outermost calls. Sorted by total_flops, largest first."""
    import pandas

    if not isinstance(frame, pandas.DataFrame):
        from ._files import load

        frame = load(frame)
    if by not in ("api", "module", "step"):
        raise ValueError(f"by={by!r} is not accepted: give 'api', 'module' or 'step'")
    peak = peak_flops if peak_flops is not None else frame.attrs.get("peak_flops")
    if peak is not None and not peak > 0:
        raise ValueError(f"peak_flops={peak!r} is not accepted: give FLOP/s, a number more than 0")
    node = frame["fwd_call_id"] != 0
    time = frame["gpu_ns"] if frame["gpu_ns"].sum() > 0 else frame["cost_ns"]
    if by == "api":
        fwd = pandas.DataFrame({"flops": frame["flops"][~node].groupby(frame["api"][~node].astype(str)).sum(),
                                "time_ns": time[~node].groupby(frame["api"][~node].astype(str)).sum()})
        bwd = pandas.DataFrame({"bwd_flops": frame["flops"][node].groupby(frame["fwd_api"][node]).sum(),
                                "bwd_time_ns": time[node].groupby(frame["fwd_api"][node]).sum()})
        out = fwd.join(bwd, how="outer").fillna(0)
        out["time_ns"] = out["time_ns"] + out.pop("bwd_time_ns")
    elif by == "module":
        forward = ~node & frame["module"].notna() & frame["api"].astype(str).str.endswith(".forward")
        out = pandas.DataFrame({"flops": frame["flops_total"][forward].groupby(frame["module"][forward]).sum(),
                                "time_ns": time[forward].groupby(frame["module"][forward]).sum()})
        out["bwd_flops"] = 0
        charged = frame[node & frame["module"].notna() & (frame["flops"] != 0)]
        for module, flops in charged.groupby("module")["flops"].sum().items():
            for prefix in enclosing_modules(module):
                if prefix in out.index:
                    out.loc[prefix, "bwd_flops"] += flops
    else:
        outer = frame["depth"] == 0
        out = pandas.DataFrame({"flops": frame["flops"].groupby(frame["step"]).sum(),
                                "time_ns": time[outer].groupby(frame["step"][outer]).sum()}).fillna(0)
        out["bwd_flops"] = frame["flops"][node].groupby(frame["step"][node]).sum()
        out["bwd_flops"] = out["bwd_flops"].fillna(0)
        out["flops"] = out["flops"] - out["bwd_flops"]
    out = out.astype({"flops": "int64", "bwd_flops": "int64", "time_ns": "int64"})
    out["total_flops"] = out["flops"] + out["bwd_flops"]
    out["flop_s"] = out["total_flops"] / (out["time_ns"].where(out["time_ns"] > 0) / 1e9)
    out["mfu"] = out["flop_s"] / peak if peak else float("nan")
    out.index.name = by
    out = out[out["total_flops"] > 0]
    return out[["flops", "bwd_flops", "total_flops", "time_ns", "flop_s", "mfu"]].sort_values(
        "total_flops", ascending=False, kind="stable")
