# SPDX-License-Identifier: MIT
"""What the benches share: the BENCH mode every one of them reads (MODE, sized()); and for the
training-loop benches (bench_backward, bench_flops, bench_memory) a block of training steps timed,
a profiled mode of it, and the modes run against the unprofiled block in turns (the order reversed
every other round, so that a drifting machine costs each mode alike)."""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from typing import Callable, Dict, List, Tuple, TypeVar

# BENCH=quick (the default), full (more repetitions, larger inputs) or smoke: every bench on the
# same code paths with tiny sizes and one repetition, in seconds, to check that it runs (make
# bench-smoke, in CI); its figures mean nothing.
MODES = ("smoke", "quick", "full")
MODE = os.environ.get("BENCH", "quick")
if MODE not in MODES:
    sys.exit(f"BENCH={MODE!r}: accepted values are 'smoke', 'quick' and 'full'")

T = TypeVar("T")


def sized(smoke: T, quick: T, full: T) -> T:
    """The value given for the BENCH mode."""
    return {"smoke": smoke, "quick": quick, "full": full}[MODE]


def block_timer(step: Callable[[], None], steps: int, clock: Callable[[], int] = time.perf_counter_ns
                ) -> Callable[[], int]:
    """A function timing `steps` calls of step with clock (ns)."""
    def timed() -> int:
        t0 = clock()
        for _ in range(steps):
            step()
        return clock() - t0
    return timed


def profiled(step: Callable[[], None], timed: Callable[[], int], out: str, **config) -> Callable[[], int]:
    """A mode: the block timed under a fresh profile writing CSV to out (args none, then config),
    after one step inside it to warm the profile's own state."""
    import torchwrapper as tw

    def run() -> int:
        shutil.rmtree(out, ignore_errors=True)
        with tw.profile(out_dir=out, format="csv", args="none", **config):
            step()
            return timed()
    return run


def interleaved(timed: Callable[[], int], modes: Dict[str, Callable[[], int]], reps: int
                ) -> Tuple[Dict[str, float], List[int]]:
    """Each mode's median ratio to the unprofiled block timed just before it, and those blocks' times."""
    ratios: Dict[str, List[float]] = {m: [] for m in modes}
    plains = []
    for rep in range(reps):
        order = list(modes) if rep % 2 == 0 else list(reversed(modes))
        plain = timed()
        plains.append(plain)
        for m in order:
            ratios[m].append(modes[m]() / plain)
    return {m: statistics.median(v) for m, v in ratios.items()}, plains


def result_json(key: str, results: dict, clock: Callable[[], int]) -> str:
    """The one JSON line a bench prints last: its results, torch's version, the clock it timed with
    and the machine's load (the figures' context on a shared machine)."""
    import json

    import torch

    return json.dumps({key: results, "torch": torch.__version__,
                       "clock": "wall" if clock is time.perf_counter_ns else "thread cpu",
                       "loadavg": os.getloadavg()})


def out_dir(tmp: str, *names: object) -> str:
    return os.path.join(tmp, "-".join(str(n) for n in names))
