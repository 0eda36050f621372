# SPDX-License-Identifier: MIT
"""FLOPs per call (config ``flops``) and MFU: the peak a run is measured against.

``peak_flops`` given in the config wins; else, on a CUDA device whose name is in the table below,
its dense bf16/fp16 tensor-core peak (the vendor's datasheet, without sparsity); else none (on a CPU
MFU needs ``peak_flops``)."""
import sys
from typing import Optional, Tuple

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


def peak_flops(given: Optional[float]) -> Tuple[Optional[float], str]:
    """(peak FLOP/s, where it came from): the config's, the GPU table's, or (None, why not)."""
    if given is not None:
        return float(given), "config"
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_available():
            return None, "no peak_flops given (on a CPU, MFU needs one)"
        name = cuda.get_device_name()
    except Exception:  # a broken driver: no MFU, the program goes on
        return None, "no peak_flops given and no CUDA device name"
    peak = gpu_peak(name)
    if peak is None:
        return None, f"no peak_flops given and {name!r} is not in the table of known GPUs"
    return peak, f"table: {name}"
