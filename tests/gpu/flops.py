# SPDX-License-Identifier: MIT
"""FLOPs and MFU on a real GPU (#37), in one run:

  counts    a GPT-2-class LM in bf16 (scaled_dot_product_attention: the flash kernel, which
            FlopCounterMode has formulas for on CUDA) and the ResNet-class CNN of
            tests/python/test_flops.py: per step, forward and backward FLOPs against FlopCounterMode's;
  table     the LM's training steps with GPU timing on, and tw-report's table of that run (GFLOP,
            TFLOP/s from GPU time, MFU % against the GPU table's peak) as text;
  overhead  the LM's loop with flops off and on, interleaved blocks against the unprofiled one,
            median of ROUNDS.

python3 tests/gpu/flops.py OUT_DIR [--small --device cpu]: writes OUT_DIR/flops.json and
OUT_DIR/flops-table.txt; --small --device cpu runs the same code on the CPU with tiny sizes, to
check it where there is no GPU. Each section is kept apart: one that fails is written as its error
and the others go on."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from test_flops import GPT, ResNet, counter  # noqa: E402  (the models the CPU tests check)

import torchwrapper as tw  # noqa: E402

ROUNDS = 5


def lm(device, small):
    torch.manual_seed(0)
    sizes = dict(vocab=64, context=16, width=32, heads=4, layers=2) if small else \
        dict(vocab=8192, context=1024, width=1024, heads=16, layers=8)
    model = GPT(**sizes).to(device)
    if device == "cuda":
        model = model.to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    idx = torch.randint(0, sizes["vocab"], (2 if small else 8, sizes["context"]), device=device)

    def loss():
        out = model(idx)
        return F.cross_entropy(out.float().reshape(-1, out.shape[-1]), idx.reshape(-1))

    def step():
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()
    return model, loss, opt, step


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def counts(device, small):
    out = {}
    for name in ("lm", "resnet"):
        if name == "lm":
            model, loss, opt, _ = lm(device, small)
        else:
            torch.manual_seed(0)
            model = ResNet().to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            x = torch.randn(32 if not small else 4, 3, 32 if not small else 12, 32 if not small else 12,
                            device=device)
            labels = torch.randint(0, 10, (x.shape[0],), device=device)

            def loss():
                return F.cross_entropy(model(x), labels)
        with counter() as fwd:
            value = loss()
        with counter() as bwd:
            value.backward()
        opt.zero_grad(set_to_none=True)
        with tw.profile(flops=True) as prof:
            loss().backward()
        records = prof.records()
        ours_fwd = sum(r.flops for r in records if r.fwd_call_id == 0 and "Backward" not in r.api)
        ours_bwd = sum(r.flops for r in records if r.fwd_call_id != 0)
        out[name] = {"forward": [ours_fwd, fwd.get_total_flops()], "backward": [ours_bwd, bwd.get_total_flops()],
                     "equal": ours_fwd == fwd.get_total_flops() and ours_bwd == bwd.get_total_flops(),
                     "ops": sorted({str(k) for ops in bwd.get_flop_counts().values() for k in ops})}
    return out


def table(device, small, out_dir):
    _, _, _, step = lm(device, small)
    for _ in range(3):
        step()
    sync(device)
    run = os.path.join(out_dir, "run")
    shutil.rmtree(run, ignore_errors=True)
    with tw.profile(out_dir=run, format="csv") as prof:
        for _ in range(5 if small else 20):
            step()
        sync(device)
    report = os.path.join(os.path.dirname(tw.__file__), "..", "..", "tw-report")
    report = shutil.which("tw-report") or report
    text = subprocess.run([report, run, "--top", "14", "--sort", "gpu" if device == "cuda" else "self"],
                          capture_output=True, text=True).stdout
    with open(os.path.join(out_dir, "flops-table.txt"), "w") as f:
        f.write(text)
    frame = tw.load(run)
    steps = tw.flops_table(frame, by="step")
    return {"peak_flops": prof.peak_flops, "peak_source": prof.peak_flops_source,
            "per_api": tw.flops_table(frame).head(10).reset_index().to_dict("records"),
            "per_step": steps.reset_index().to_dict("records"), "table": text}


def overhead(device, small):
    _, _, _, step = lm(device, small)
    for _ in range(3):
        step()
    steps = 3 if small else 10

    def timed():
        sync(device)
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            step()
        sync(device)
        return time.perf_counter_ns() - t0

    def profiled(flops):
        with tw.profile(flops=flops):
            step()
            return timed()

    ratios = {"flops off": [], "flops on": []}
    for r in range(ROUNDS):
        plain = timed()
        for mode in (("flops off", "flops on") if r % 2 == 0 else ("flops on", "flops off")):
            ratios[mode].append(profiled(mode == "flops on") / plain)
    return {m: statistics.median(v) for m, v in ratios.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--device", default="cuda")
    a = parser.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    results = {"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "torch": torch.__version__}
    tmp = tempfile.mkdtemp(prefix="tw-gpu-flops-")
    for name, section in (("counts", lambda: counts(a.device, a.small)),
                          ("table", lambda: table(a.device, a.small, tmp)),
                          ("overhead", lambda: overhead(a.device, a.small))):
        try:
            results[name] = section()
        except Exception:  # noqa: BLE001 - written, the other sections go on
            results[name] = {"error": traceback.format_exc()}
        print(name, json.dumps(results[name], default=str)[:2000], flush=True)
    shutil.copy(os.path.join(tmp, "flops-table.txt"), a.out_dir) if os.path.exists(
        os.path.join(tmp, "flops-table.txt")) else None
    shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(a.out_dir, "flops.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
