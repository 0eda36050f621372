# SPDX-License-Identifier: MIT
"""What GPU timing (CUPTI) costs per call, on a real GPU (make bench; says so and exits without one).

A wrapped torch.add on small CUDA tensors (a launch-bound call), GPU timing off and on, against the
unwrapped call in the same process: interleaved blocks, median of REPS. Written to
build/bench-gpu.json."""
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import torchwrapper as tw
from torchwrapper._profile import cupti_candidates

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from modes import sized  # noqa: E402  (this folder's: BENCH)

REPS = sized(3, 41, 101)
BUILD = os.environ.get("top_builddir", ".")


def main():
    if not torch.cuda.is_available():
        print("bench_gpu: no CUDA GPU here (torch.cuda.is_available() is False): skipped")
        return None
    a = torch.ones(10, device="cuda")
    b = torch.ones(10, device="cuda")
    wrapped = tw.wrap(torch.add, "torch.add")
    n = 1000
    for _ in range(n):  # warm up
        torch.add(a, b)
    paths = cupti_candidates()

    def block(fn):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn(a, b)
        elapsed = time.perf_counter_ns() - t0
        torch.cuda.synchronize()
        return elapsed / n

    times = {"plain": [], "off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="tw-bench-gpu-") as tmp:
        for rep in range(REPS):
            order = ["plain", "off", "on"]
            order = order[rep % 3:] + order[:rep % 3]
            for mode in order:
                if mode == "plain":
                    times[mode].append(block(torch.add))
                    continue
                session = tw.Session(out_dir=os.path.join(tmp, f"{mode}-{rep}"), gpu=mode, gpu_device=True,
                                     cupti_paths=paths)
                session.start()
                try:
                    times[mode].append(block(wrapped))
                finally:
                    session.stop()
                if mode == "on" and session.stats()["gpu"] != "on":
                    sys.exit(f"bench_gpu: GPU timing did not start: {session.stats()}")
    plain = statistics.median(times["plain"])
    off = statistics.median(times["off"]) - plain
    on = statistics.median(times["on"]) - plain
    figures = {"torch.add_cuda_unprofiled_ns": plain, "gpu_off_ns": off, "gpu_on_ns": on,
               "gpu_timing_extra_ns": on - off, "reps": REPS, "device": torch.cuda.get_device_name()}
    print(f"torch.add on CUDA: {plain:.0f} ns unprofiled; profiled +{off:.0f} ns (GPU timing off), "
          f"+{on:.0f} ns (on): GPU timing adds {on - off:.0f} ns per call")
    os.makedirs(os.path.join(BUILD, "build"), exist_ok=True)
    with open(os.path.join(BUILD, "build", "bench-gpu.json"), "w") as f:
        json.dump(figures, f, indent=1)
    return figures


if __name__ == "__main__":
    main()
