# SPDX-License-Identifier: MIT
"""Run by tests/check-tsan.sh under ThreadSanitizer: backward passes on four threads (autograd
releases the GIL, so the nodes' hooks run without it) while the main thread starts and stops
sessions, so that stops land in the middle of nodes. With TW_CUPTI_LIBRARY set (check-tsan points
it at the fake CUPTI), every other session times the GPU too, as if torch had seen a device: the
nodes then push and pop their CUPTI ids on those threads. Every third session records every operator
too (aten "all": the operators' hooks run on those threads as well). Every other session measures
memory too (the allocator's reports reach the hooks of the threads that record, and the node
threads' records read their counters). Exits non-zero if a check
fails; TSan's reports are read by the script."""
import os
import tempfile
import threading
import warnings

import torch
import torch.nn as nn

import torchwrapper as tw
import torchwrapper._profile as profile_module

FAKE_CUPTI = os.environ.get("TW_CUPTI_LIBRARY")
if FAKE_CUPTI:
    profile_module._cuda_available = lambda: True  # GPU timing "on" against the fake
torch.set_num_threads(1)
stop = threading.Event()
errors = []
# the profiler's warnings (a file it cannot write, a model it cannot find) are failures here
warnings.showwarning = lambda message, category, *rest, **kw: errors.append(f"{category.__name__}: {message}")


def train(seed: int) -> None:
    try:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
        x = torch.randn(16, 32)
        while not stop.is_set():
            model(x).pow(2).mean().backward()
    except Exception as error:  # noqa: BLE001 - reported by the main thread
        errors.append(error)


workers = [threading.Thread(target=train, args=(seed,)) for seed in range(4)]
for w in workers:
    w.start()
nodes = gpu_sessions = operators = memory_sessions = 0
for round_ in range(30):
    gpu = bool(FAKE_CUPTI) and round_ % 2 == 1
    aten = "all" if round_ % 3 == 2 else "backward"
    memory = round_ % 4 < 2
    out_dir = tempfile.mkdtemp(prefix="tw-tsan-") if gpu else None
    with tw.profile(aten=aten, memory=memory,
                    **(dict(out_dir=out_dir, format="csv", gpu="on") if gpu else {})) as prof:
        for _ in range(3):
            torch.ones(4, requires_grad=True).sum().backward()
    stats = prof.session.stats()
    assert stats["backward"] == "on", stats
    memory_sessions += memory
    if gpu:
        assert stats["gpu"] == "on", stats
        gpu_sessions += 1
        apis = list(tw.load(out_dir)["api"])
    else:
        apis = [r.api for r in prof.records()]
    nodes += sum(api == "AddmmBackward0" for api in apis)
    operators += sum(api == "aten::mm" for api in apis)
stop.set()
for w in workers:
    w.join()
if errors:
    raise SystemExit(f"a training thread failed, or the profiler warned: {errors[0]!r}")
if nodes == 0 or operators == 0:
    raise SystemExit(f"{nodes} backward nodes and {operators} operators recorded on the training threads")
print(f"tsan_backward: {nodes} AddmmBackward0 nodes and {operators} aten::mm operators recorded across 30 sessions "
      f"({gpu_sessions} timing the GPU against the fake CUPTI, {memory_sessions} measuring memory)")
