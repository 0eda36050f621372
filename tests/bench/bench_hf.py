# SPDX-License-Identifier: MIT
"""The overhead on models of the `transformers` package (Hugging Face), trained from random
initialisation (small configs, nothing downloaded): BertForSequenceClassification (whose forward
makes a CrossEntropyLoss() module on every call), GPT2LMHeadModel and LlamaForCausalLM (RMSNorm,
rotary positions, gated SiLU MLP, grouped-query attention), each trained with AdamW on generated
tokens (loss.backward(), opt.step(), opt.zero_grad()), at torch's default thread count (only the
in-process part's second pass sets one thread). Measured:

  in-process: tw.profile(out_dir, format="csv") with args "none" and with args "summary"; each
    repetition times a block of STEPS profiled steps (after a warm-up block in the same session)
    next to a block of plain steps, adjacent, which one first alternating, the order of the modes
    rotating; the median over REPS of profiled / plain, and of profiled - plain a step (the
    profiler's own work, in ms). Then the same at one torch thread (torch.set_num_threads(1)): the
    profiler's work runs on the calling thread either way, so alike extra ms at both thread counts
    say its writer takes nothing from torch's threads, and the ratio at torch's threads is that
    work over a step they may have made shorter.
  through `python -m torchwrapper run`, with its defaults and with `--set args=none`: this file
    run as a program (`bench_hf.py --worker MODEL STEPS BLOCKS`, which prints each block's loop
    time and the process's CPU time, every thread's: the writer's too), plain and profiled processes
    interleaved (the order rotating); of blocks 1.. (block 0 warms up), each profiled process's loop
    time over the plain one's of the same repetition, median and min, and its CPU time likewise
    (median). Beside them, instructions per step (callgrind, one process each, blocks of a few
    steps, instrumentation on from the first block: callgrind_control): the profiler's work, which
    the machine's load does not move, where the wall ratio shows what it costs where it runs. The
    callgrind processes run with OMP_WAIT_POLICY=passive, so that the count has no spin-waiting of
    torch's idle intra-op threads in it, and with flush_interval=3600, so that it has no work that
    comes once a second of wall time (under callgrind, every step). BENCH_HF_AGAINST=DIR adds the same two
    `run` modes with another build's package on PYTHONPATH (DIR: e.g. the main branch's build/python),
    in the same rotation, for a before/after. Each profiled process's records dropped (its manifests)
    are summed beside its ratios: a bench whose profiler dropped records measured less than its work.
    Beside the measured ratios, the profiler's own estimate of its cost (the manifests' own_cost and
    writer: 1 / (1 - its time on the program's threads / the recording's), median) and the bytes it
    wrote a step. `run`'s defaults sample the detail (config detail "sampled"); `--set args=none`,
    set explicitly, keeps autograd nodes and FLOPs in every step. BENCH_HF_PROC_STEPS and
    BENCH_HF_PROC_BLOCKS set the blocks (1000 and 11: 10,000 steps after the warm-up block).
  a long run: each model under `run` with its defaults for LONG_BLOCKS blocks of 1,000 steps after a
    warm-up block (10,000 steps), next to the same plain program, the pair's order alternating over
    LONG_REPS: its wall and CPU time over the plain one's (medians over the pairs), the profiler's
    own estimate, the bytes it wrote a step and the records it dropped; per process, the last block's
    time per step over the first's, the median of the last three over that of the first three, and
    the slope of a line through all blocks. A profiled ratio above the plain one is a per-step cost
    that grows with the step count (a module made in each step once did so).
  soak (BENCH=full or BENCH_SOAK=1): 20,000 steps in-process under tw.profile (CSV, args none) of a
    toy MLP calling nn.CrossEntropyLoss()(model(x), y) and of the BERT model; time per step and RSS
    of the first and the last block of 1,000 steps.

Prints a table, then one JSON line with every figure and the machine (CPU, thread count, torch and
transformers versions, the load average at the start and the end); `make bench` tees it into
build/bench-hf.txt. At torch's default thread count (one per core) another busy process makes
steps many times slower, now and then: figures are only worth taking on an otherwise idle machine.
Without `transformers` it prints a SKIP line (and a JSON line saying so) and exits 0.
BENCH=quick (the default: about 14,000 training steps and 31 processes, a few minutes on an idle
machine), full (more repetitions, a longer long run, the soak) or smoke (a few steps of each, the
soak's too, and one model through `run` and in the long run: checks that the script runs; its
figures mean nothing).
BENCH_HF_MODELS=bert,gpt2 picks models; BENCH_REPS overrides the in-process repetitions,
BENCH_HF_PROC_REPS those of the processes through `run`;
BENCH_HF_PARTS=run measures only that part (of in_process, run, long, soak), BENCH_HF_RUN_MODES=defaults
only that mode through `run` (of defaults, args none); BENCH_HF_CALLGRIND=0
or 1 leaves out or counts the instructions (BENCH=smoke leaves them out: minutes of CPU).
BENCH_HF_DEVICE=cuda trains on the GPU (each block's time ends with torch.cuda.synchronize()): a small
model's step there is bound by the CPU's launches, where every call's own cost adds to the step.
"""
from __future__ import annotations

import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from types import ModuleType
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from modes import MODE, sized  # noqa: E402  (this folder's: BENCH; imports nothing of torchwrapper)

SIZES = {
    #        in-process       processes through `run`           long run                     soak
    "smoke": dict(reps=2, steps=3, proc_reps=1, proc_steps=3, proc_blocks=3, long_block=5, long_blocks=3,
                  long_reps=1, soak_steps=40, soak_block=10, cg_steps=1, cg_blocks=2),
    "quick": dict(reps=7, steps=20, proc_reps=7, proc_steps=20, proc_blocks=4, long_block=1000, long_blocks=10,
                  long_reps=1, soak_steps=20000, soak_block=1000, cg_steps=3, cg_blocks=3),
    "full": dict(reps=15, steps=20, proc_reps=11, proc_steps=20, proc_blocks=6, long_block=1000, long_blocks=10,
                 long_reps=3, soak_steps=20000, soak_block=1000, cg_steps=5, cg_blocks=4),
}[MODE]
REPS = int(os.environ.get("BENCH_REPS", 0)) or SIZES["reps"]
SIZES["proc_reps"] = int(os.environ.get("BENCH_HF_PROC_REPS", 0)) or SIZES["proc_reps"]
# a long run through `run` (the 10,000 steps: BENCH_HF_PROC_STEPS=1000 BENCH_HF_PROC_BLOCKS=11)
SIZES["proc_steps"] = int(os.environ.get("BENCH_HF_PROC_STEPS", 0)) or SIZES["proc_steps"]
SIZES["proc_blocks"] = int(os.environ.get("BENCH_HF_PROC_BLOCKS", 0)) or SIZES["proc_blocks"]
# instructions with the detail sampled as `run`'s defaults sample it (steps 0-9, then one in 20): blocks
# of 20 steps past the first (BENCH_HF_CG_STEPS=20 BENCH_HF_CG_BLOCKS=3) hold one step with it each
SIZES["cg_steps"] = int(os.environ.get("BENCH_HF_CG_STEPS", 0)) or SIZES["cg_steps"]
SIZES["cg_blocks"] = int(os.environ.get("BENCH_HF_CG_BLOCKS", 0)) or SIZES["cg_blocks"]
SOAK = MODE in ("full", "smoke") or os.environ.get("BENCH_SOAK") == "1"
MODELS = os.environ.get("BENCH_HF_MODELS", "bert,gpt2,llama").split(",")
# in separate processes through `run` (each one imports torch and transformers): smoke, the first only
RUN_MODELS = MODELS[:sized(1, len(MODELS), len(MODELS))]
LONG_MODELS = RUN_MODELS
# instructions per step under callgrind: BENCH=smoke counts them only when asked (each process takes
# a minute or two of CPU even so)
CALLGRIND = os.environ.get("BENCH_HF_CALLGRIND", sized("0", "1", "1")) == "1" and shutil.which("valgrind") is not None
AGAINST = os.environ.get("BENCH_HF_AGAINST")   # another build's build/python: its `run` modes beside ours
# BENCH_HF_PARTS=run (e.g.): the parts measured, of in_process, run, long and soak (all by default)
PARTS = os.environ.get("BENCH_HF_PARTS", "in_process,run,long,soak").split(",")
# BENCH_HF_RUN_MODES=defaults (e.g.): the `run` modes measured, of defaults and "args none" (both by default)
RUN_MODES = os.environ.get("BENCH_HF_RUN_MODES", "defaults,args none").split(",")
VOCAB, HIDDEN, HEADS, LAYERS, INTERMEDIATE, POSITIONS, SEQ, BATCH = 1000, 128, 4, 2, 256, 64, 32, 4
DEVICE = os.environ.get("BENCH_HF_DEVICE", "cpu")   # the workers' too: they inherit the environment


# ---- the workloads ---------------------------------------------------------------------------------

def import_transformers() -> Optional[ModuleType]:
    """The PyPI package, or None: this folder holds a transformers.py of its own (the hand-written
    models of bench_transformer.py), which `python tests/bench/X.py` and `run` put first on
    sys.path, so that folder leaves sys.path before the import."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    local = sys.modules.get("transformers")
    if local is not None and os.path.dirname(os.path.abspath(getattr(local, "__file__", "") or "")) == HERE:
        del sys.modules["transformers"]
    try:
        import transformers
    except ImportError:
        return None
    transformers.logging.set_verbosity_error()   # config notices (e.g. the default loss) on every build
    return transformers


def _bert(hf: ModuleType):
    config = hf.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                           intermediate_size=INTERMEDIATE, max_position_embeddings=POSITIONS, num_labels=4)
    inputs = {"input_ids": torch.randint(0, VOCAB, (BATCH, SEQ)), "labels": torch.randint(0, 4, (BATCH,))}
    return hf.BertForSequenceClassification(config), inputs


def _gpt2(hf: ModuleType):
    # bos/eos inside the small vocabulary (GPT-2's are 50256), which the config checks
    config = hf.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS,
                           bos_token_id=0, eos_token_id=0)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return hf.GPT2LMHeadModel(config), {"input_ids": ids, "labels": ids}


def _llama(hf: ModuleType):
    config = hf.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            num_key_value_heads=HEADS // 2, intermediate_size=INTERMEDIATE,
                            max_position_embeddings=POSITIONS)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return hf.LlamaForCausalLM(config), {"input_ids": ids, "labels": ids}


BUILDERS = {"bert": _bert, "gpt2": _gpt2, "llama": _llama}
TITLES = {"bert": "BertForSequenceClassification", "gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM",
          "mlp": "toy MLP, nn.CrossEntropyLoss() each step"}


def training_step(model: nn.Module, inputs: Dict[str, torch.Tensor]) -> Callable[[], None]:
    """The loop body users write: forward with labels (the model computes its loss), backward,
    AdamW step, gradients cleared."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        loss = model(**inputs).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def make_step(hf: Optional[ModuleType], name: str) -> Callable[[], None]:
    torch.manual_seed(0)
    if name == "mlp":
        return mlp_step()
    model, inputs = BUILDERS[name](hf)
    return training_step(model.to(DEVICE), {key: value.to(DEVICE) for key, value in inputs.items()})


def mlp_step() -> Callable[[], None]:
    """The idiom the soak is about: a loss module made anew in every step."""
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def step() -> None:
        loss = nn.CrossEntropyLoss()(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return step


# ---- measuring --------------------------------------------------------------------------------------

def timed(step: Callable[[], None], steps: int) -> int:
    """Wall time of `steps` calls of step, in ns (on a GPU, until its last kernel has run)."""
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        step()
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter_ns() - t0


def rss_kb() -> int:
    """This process's resident set now (VmRSS), in KiB; the peak (ru_maxrss) where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(name: str, steps: int, blocks: int) -> None:
    """The program that `run` profiles: BLOCKS blocks of STEPS steps, one JSON line per block."""
    hf = import_transformers()
    if hf is None and name != "mlp":
        raise SystemExit("bench_hf.py --worker: the transformers package is not importable")
    step = make_step(hf, name)
    # Under callgrind (started with --instr-atstart=no --dump-before=os_getppid*): instrumentation
    # goes on before the first block, and os.getppid() marks each block's start and the last one's
    # end, so that each dump holds one block's instructions, every thread's (the writer's too).
    mark = lambda: 0  # noqa: E731
    if os.environ.get("BENCH_HF_CALLGRIND_WORKER"):
        subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL, env=child_env())
        mark = os.getppid
    for block in range(blocks):
        mark()
        cpu0 = time.process_time_ns()   # every thread of the process: the writer's too
        ns = timed(step, steps)
        cpu = time.process_time_ns() - cpu0
        print(json.dumps({"block": block, "ns": ns, "cpu_ns": cpu, "rss_kb": rss_kb()}), flush=True)
    mark()


def profiled_block(tw: ModuleType, step: Callable[[], None], steps: int, out_dir: str, args: str) -> Tuple[int, float]:
    """A fresh session (CSV files, `args`), a warm-up block in it (first calls, first chunks), then
    the timed block; (ns, records per step)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    prof = tw.profile(out_dir=out_dir, format="csv", args=args)
    prof.start()
    try:
        timed(step, steps)
        ns = timed(step, steps)
    finally:
        prof.stop()
    return ns, prof.stats()["records"] / (2 * steps)


def interleaved(tw: ModuleType, step: Callable[[], None], steps: int, out_dir: str) -> dict:
    """Each args mode's profiled blocks against plain blocks beside them, REPS times: the median ratio
    and the median extra time a step (ms), which is what the profiler's own work costs whatever the
    step's length."""
    for _ in range(3):
        timed(step, steps)
    modes = ["args none", "args summary"]
    pairs: Dict[str, List[Tuple[int, int]]] = {m: [] for m in modes}
    records: Dict[str, float] = {}
    for rep in range(REPS):
        gc.collect()
        for mode in modes[rep % 2:] + modes[:rep % 2]:
            args = mode.split()[1]
            # each profiled block against a plain block beside it; which one first alternates
            if rep % 2:
                plain = timed(step, steps)
                profiled, records[mode] = profiled_block(tw, step, steps, out_dir, args)
            else:
                profiled, records[mode] = profiled_block(tw, step, steps, out_dir, args)
                plain = timed(step, steps)
            pairs[mode].append((profiled, plain))
    plains = [plain for mode in modes for _, plain in pairs[mode]]
    row = {"plain_ms_per_step": round(statistics.median(plains) / steps / 1e6, 3)}
    for mode in modes:
        row[mode] = {"ratio": round(statistics.median(p / q for p, q in pairs[mode]), 4),
                     "extra_ms_per_step": round(statistics.median(p - q for p, q in pairs[mode]) / steps / 1e6, 3),
                     "records_per_step": round(records[mode], 1)}
    return row


def in_process(tw: ModuleType, hf: ModuleType, name: str, tmp: str) -> dict:
    """At torch's default threads, and again at one thread: the profiler's work runs on the calling
    thread whatever torch's threads, so the extra time a step is alike at both when its writer stands
    in nobody's way, while the ratio grows where torch's threads shorten the step (#50)."""
    step = make_step(hf, name)
    out_dir = os.path.join(tmp, "in-process")
    row = interleaved(tw, step, SIZES["steps"], out_dir)
    threads = torch.get_num_threads()
    if threads > 1:
        torch.set_num_threads(1)
        try:
            row["one thread"] = interleaved(tw, step, SIZES["steps"], out_dir)
        finally:
            torch.set_num_threads(threads)
    return row


def child_env() -> Dict[str, str]:
    """This environment without torchwrapper's variables, so that the plain processes stay plain
    (e.g. when this benchmark itself is run under `run`)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TORCHWRAPPER_")}


def split_env(cmd: List[str]) -> Tuple[List[str], Dict[str, str]]:
    """A command of commands() and its environment: child_env(), with the PYTHONPATH of a leading
    "PYTHONPATH=DIR" (another build's, BENCH_HF_AGAINST)."""
    env = child_env()
    if cmd and cmd[0].startswith("PYTHONPATH="):
        env["PYTHONPATH"] = cmd[0].split("=", 1)[1]
        cmd = cmd[1:]
    return cmd, env


def dropped(out_dir: str) -> Tuple[int, int]:
    """Records the profiler dropped, every kind's, by the manifests in out_dir (0 where none), and
    the most bytes that waited for the writer (past half of buffer_size, the program's threads write
    for it)."""
    total = peak = 0
    for file in os.listdir(out_dir) if os.path.isdir(out_dir) else ():
        if file.startswith("manifest") and file.endswith(".json"):
            with open(os.path.join(out_dir, file)) as f:
                manifest = json.load(f)
            total += sum(kind.get("dropped", 0) for kind in manifest.get("records", {}).values())
            peak = max(peak, manifest.get("memory", {}).get("peak_bytes", 0))
    return total, peak


def own_cost(out_dir: str) -> Tuple[float, int]:
    """What the profiler says it cost, by the manifests in out_dir: its time on the program's threads
    over the recording's (its own calls, nodes, hooks, writing), and the bytes it wrote."""
    own = run = written = 0
    for file in os.listdir(out_dir) if os.path.isdir(out_dir) else ():
        if file.startswith("manifest") and file.endswith(".json"):
            with open(os.path.join(out_dir, file)) as f:
                manifest = json.load(f)
            cost, writer = manifest.get("own_cost") or {}, manifest.get("writer") or {}
            own += cost.get("total_ns", 0) + writer.get("help_ns", 0) + writer.get("close_ns", 0)
            run += cost.get("run_ns", 0)
            written += sum(kind.get("bytes_written", 0) for kind in manifest.get("records", {}).values())
    return (own / run if run else 0.0), written


def run_worker(cmd: List[str]) -> List[dict]:
    """Runs one worker process; its blocks ({"block", "ns", "rss_kb"})."""
    cmd, env = split_env(cmd)
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}): {result.stderr[-2000:]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def commands(name: str, steps: int, blocks: int, out_dir: str, pythonpath: Optional[str] = None,
             options: Tuple[str, ...] = ()) -> Dict[str, List[str]]:
    """The worker plain, under `run` with its defaults and under `run --set args=none`. --no-report:
    the report is printed after the program has ended, outside the loop time measured. pythonpath:
    another build's package (split_env reads it)."""
    python = sys.executable
    program = [os.path.abspath(__file__), "--worker", name, str(steps), str(blocks)]
    env = [f"PYTHONPATH={pythonpath}"] if pythonpath else []
    run = [*env, python, "-m", "torchwrapper", "run", "--no-report", "-o", out_dir, *options]
    return {"plain": [*env, python, *program],
            "run, defaults": [*run, "--", *program],
            "run, args none": [*run, "--set", "args=none", "--", *program]}


def run_modes(cmds: Dict[str, List[str]]) -> Dict[str, List[str]]:
    """The commands of the `run` modes BENCH_HF_RUN_MODES asks for, and the plain one."""
    return {key: cmd for key, cmd in cmds.items() if key == "plain" or key[len("run, "):] in RUN_MODES}


def instructions_per_block(cmd: List[str], tmp: str) -> float:
    """Instructions per block of the worker cmd under callgrind: the mean of its blocks 1.. (each block
    a dump, every thread's instructions in it)."""
    out = os.path.join(tmp, "callgrind")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cmd, env = split_env(cmd)
    env.update(BENCH_HF_CALLGRIND_WORKER="1", OMP_WAIT_POLICY="passive", PYTHONHASHSEED="0")
    result = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-before=os_getppid*",
                             f"--callgrind-out-file={out}/cg.%p", *cmd], capture_output=True, text=True, env=env,
                            timeout=7200)
    if result.returncode != 0:
        raise RuntimeError(f"callgrind: {' '.join(cmd)} failed ({result.returncode}): {result.stderr[-2000:]}")
    blocks = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    totals = {}
    for file in os.listdir(out):   # cg.PID.N: the Nth dump (1: before the first mark)
        parts = file.split(".")
        if len(parts) == 3:
            with open(os.path.join(out, file)) as f:
                totals[int(parts[2])] = next(int(line.split()[1]) for line in f if line.startswith("totals:"))
    shutil.rmtree(out, ignore_errors=True)
    # dump 1 is the time before the first mark; dump k + 2 is block k
    per_block = [totals[k + 2] for k in range(1, len(blocks)) if k + 2 in totals]
    if not per_block:
        raise RuntimeError(f"callgrind: no block dumps for {' '.join(cmd)} ({sorted(totals)})")
    return statistics.mean(per_block)


def through_run(name: str, tmp: str) -> dict:
    """Blocks 1.. of the worker under `run` against the plain worker, processes interleaved (the order
    rotating): loop time over the plain one's of the same repetition (median, min), CPU time likewise
    (median); and instructions per step under callgrind, one process each."""
    out_dir = os.path.join(tmp, "run")
    steps = SIZES["proc_steps"]
    cmds = run_modes(commands(name, steps, SIZES["proc_blocks"], out_dir))
    if AGAINST:
        against = run_modes(commands(name, steps, SIZES["proc_blocks"], out_dir, AGAINST))
        cmds.update({f"against: {key}": cmd for key, cmd in against.items() if key != "plain"})
    loops: Dict[str, List[Tuple[int, int]]] = {key: [] for key in cmds}
    drops = {key: 0 for key in cmds}
    peaks = {key: 0 for key in cmds}
    owns: Dict[str, List[float]] = {key: [] for key in cmds}
    written: Dict[str, List[int]] = {key: [] for key in cmds}
    load = [os.getloadavg()[0]]   # the machine's (shared: other jobs' too), at the start and end
    for rep in range(SIZES["proc_reps"]):
        keys = list(cmds)
        for key in keys[rep % len(keys):] + keys[:rep % len(keys)]:
            shutil.rmtree(out_dir, ignore_errors=True)
            blocks = run_worker(cmds[key])[1:]
            loops[key].append((sum(b["ns"] for b in blocks), sum(b["cpu_ns"] for b in blocks)))
            lost, peak = dropped(out_dir)
            drops[key] += lost
            peaks[key] = max(peaks[key], peak)
            share, n = own_cost(out_dir)
            owns[key].append(share)
            written[key].append(n)
    load.append(os.getloadavg()[0])
    plain = loops.pop("plain")
    steady_steps = steps * (SIZES["proc_blocks"] - 1)
    row = {"plain_ms_per_step": round(statistics.median(p[0] for p in plain) / steady_steps / 1e6, 3),
           "plain_cpu_ms_per_step": round(statistics.median(p[1] for p in plain) / steady_steps / 1e6, 3)}
    for key, values in loops.items():
        wall = [v[0] / p[0] for v, p in zip(values, plain)]
        cpu = [v[1] / p[1] for v, p in zip(values, plain)]
        row[key] = {"wall": round(statistics.median(wall), 4), "wall_min": round(min(wall), 4),
                    "cpu": round(statistics.median(cpu), 4), "dropped": drops[key],
                    "memory_peak_mib": round(peaks[key] / 2**20, 2),
                    # the profiler's own word: the recording's time over what it would have been
                    # without its own share, beside the measured wall ratio
                    "own_estimate": round(1 / (1 - statistics.median(owns[key])), 4) if owns[key] else None,
                    "bytes_per_step": round(statistics.median(written[key]) / (steps * SIZES["proc_blocks"]))}
    row["load_average"] = [round(v, 2) for v in load]
    if CALLGRIND:
        # The work of a flush interval (summary.json rewritten: ~7 M instructions for these models,
        # 0.1% of a second's steps) comes once a second of wall time: under callgrind, 50 times
        # slower, in every step. Left out: the count is per step, whatever the machine's speed.
        options = ("--set", "flush_interval=3600")
        cg = run_modes(commands(name, SIZES["cg_steps"], SIZES["cg_blocks"], out_dir, options=options))
        if AGAINST:
            against = run_modes(commands(name, SIZES["cg_steps"], SIZES["cg_blocks"], out_dir, AGAINST, options))
            cg.update({f"against: {key}": cmd for key, cmd in against.items() if key != "plain"})
        counts = {}
        for key, cmd in cg.items():
            shutil.rmtree(out_dir, ignore_errors=True)
            counts[key] = instructions_per_block(cmd, tmp) / SIZES["cg_steps"]
        row["plain_instructions_per_step"] = round(counts.pop("plain"))
        for key, n in counts.items():
            row[key]["instructions_per_step"] = round(n)
            row[key]["instructions"] = round(n / row["plain_instructions_per_step"], 4)
    return row


def slope_pct_per_1000(per_step: List[float], block: int) -> float:
    """The least-squares line through the blocks' time per step, as % of the mean per 1,000 steps."""
    n = len(per_step)
    if n < 2:
        return 0.0
    xs = [i * block for i in range(n)]
    mx, my = sum(xs) / n, sum(per_step) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, per_step)) / sum((x - mx) ** 2 for x in xs)
    return 100.0 * slope * 1000 / my


def drift(blocks: List[dict], block: int) -> dict:
    """Blocks after the warm-up: last over first time per step; the median of the last three over
    that of the first three (one block slowed by a neighbour on a shared machine moves the first
    figure, not this one); the slope; RSS first and last."""
    steady = blocks[1:]
    per_step = [b["ns"] / block / 1e6 for b in steady]
    k = max(1, min(3, len(per_step) // 2))
    return {"last_over_first": round(per_step[-1] / per_step[0], 4),
            "last3_over_first3": round(statistics.median(per_step[-k:]) / statistics.median(per_step[:k]), 4),
            "slope_pct_per_1000_steps": round(slope_pct_per_1000(per_step, block), 2),
            "ms_per_step": [round(v, 3) for v in per_step],
            "rss_mb_first": round(steady[0]["rss_kb"] / 1024, 1), "rss_mb_last": round(steady[-1]["rss_kb"] / 1024, 1)}


def long_run(name: str, tmp: str) -> dict:
    """The plain worker and the worker under `run` with its defaults, LONG_BLOCKS blocks of LONG_BLOCK
    steps after a warm-up block; the medians over the process pairs, and the last pair's blocks."""
    out_dir = os.path.join(tmp, "long")
    block, blocks = SIZES["long_block"], SIZES["long_blocks"] + 1
    cmds = commands(name, block, blocks, out_dir)
    cmds = {"plain": cmds["plain"], "run, defaults": cmds["run, defaults"]}
    runs: Dict[str, List[dict]] = {key: [] for key in cmds}
    totals: Dict[str, List[Tuple[int, int]]] = {key: [] for key in cmds}
    owns: List[float] = []
    written: List[int] = []
    lost = 0
    load = [load_average()]
    for rep in range(SIZES["long_reps"]):
        for key in (list(cmds) if rep % 2 == 0 else list(cmds)[::-1]):
            shutil.rmtree(out_dir, ignore_errors=True)
            blocks_run = run_worker(cmds[key])
            runs[key].append(drift(blocks_run, block))
            totals[key].append((sum(b["ns"] for b in blocks_run[1:]), sum(b["cpu_ns"] for b in blocks_run[1:])))
            if key != "plain":
                share, n = own_cost(out_dir)
                owns.append(share)
                written.append(n)
                lost += dropped(out_dir)[0]
    shutil.rmtree(out_dir, ignore_errors=True)
    load.append(load_average())
    row = {"steps": block * SIZES["long_blocks"], "block": block, "load_average": load}
    for key, drifts in runs.items():
        row[key] = dict(drifts[-1], last_over_first=statistics.median(d["last_over_first"] for d in drifts),
                        last3_over_first3=statistics.median(d["last3_over_first3"] for d in drifts),
                        slope_pct_per_1000_steps=statistics.median(d["slope_pct_per_1000_steps"] for d in drifts),
                        last_over_first_each=[d["last_over_first"] for d in drifts])
    pairs = list(zip(totals["run, defaults"], totals["plain"]))
    row["plain_ms_per_step"] = round(statistics.median(p[0] for _, p in pairs) / row["steps"] / 1e6, 3)
    row["ratio"] = round(statistics.median(r[0] / p[0] for r, p in pairs), 4)
    row["cpu_ratio"] = round(statistics.median(r[1] / p[1] for r, p in pairs), 4)
    # the profiler's word for the same runs, and what it wrote (the warm-up block's steps counted in)
    row["own_estimate"] = round(1 / (1 - statistics.median(owns)), 4)
    row["bytes_per_step"] = round(statistics.median(written) / (block * blocks))
    row["dropped"] = lost
    return row


def soak(tw: ModuleType, hf: Optional[ModuleType], name: str, tmp: str) -> dict:
    """SOAK_STEPS steps in one session (CSV, args none) after a warm-up block; time per step and RSS
    of each block of SOAK_BLOCK steps, first and last reported."""
    step = make_step(hf, name)
    block, blocks = SIZES["soak_block"], SIZES["soak_steps"] // SIZES["soak_block"]
    out_dir = os.path.join(tmp, "soak")
    shutil.rmtree(out_dir, ignore_errors=True)
    timed(step, block)
    per_step: List[float] = []
    rss: List[int] = []
    with tw.profile(out_dir=out_dir, format="csv", args="none"):
        for _ in range(blocks):
            per_step.append(timed(step, block) / block / 1e6)
            rss.append(rss_kb())
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"steps": block * blocks, "block": block,
            "ms_per_step_first": round(per_step[0], 4), "ms_per_step_last": round(per_step[-1], 4),
            "last_over_first": round(per_step[-1] / per_step[0], 4),
            "ms_per_step_min": round(min(per_step), 4), "ms_per_step_max": round(max(per_step), 4),
            "slope_pct_per_1000_steps": round(slope_pct_per_1000(per_step, block), 2),
            "rss_mb_first": round(rss[0] / 1024, 1), "rss_mb_last": round(rss[-1] / 1024, 1)}


# ---- reporting --------------------------------------------------------------------------------------

def machine(hf: ModuleType) -> dict:
    # the load average, at the start and (load_end) at the end: at torch's default thread count, one
    # busy core elsewhere makes every step many times slower, so figures from a loaded machine say so
    return {"cpu": cpu_name(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name() if DEVICE.startswith("cuda") else DEVICE,
            "python": platform.python_version(), "torch": torch.__version__, "transformers": hf.__version__,
            "load_start": load_average()}


def load_average() -> Optional[float]:
    """The 1-minute load average, None where the system has none."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def print_model(name: str, inproc: Optional[dict], run: Optional[dict]) -> None:
    print(f"  {TITLES[name]}: plain" +
          (f" {inproc['plain_ms_per_step']:.2f} ms/step in-process," if inproc else "") +
          (f" {run['plain_ms_per_step']:.2f} ms/step ({run['plain_cpu_ms_per_step']:.2f} ms of CPU) as its own process"
           if run else "") +
          (f", {run['plain_instructions_per_step'] / 1e6:.1f} M instructions/step" if run and CALLGRIND else "") +
          (f"; load average {run['load_average'][0]:.1f} -> {run['load_average'][1]:.1f}" if run else ""),
          flush=True)
    for mode in ("args none", "args summary") if inproc else ():
        v, one = inproc[mode], inproc.get("one thread", {}).get(mode)
        print(f"    tw.profile, CSV, {mode:13} {v['ratio']:.3f}x  ({v['records_per_step']:.0f} records/step, "
              f"{v['extra_ms_per_step']:+.2f} ms/step" +
              (f"; one torch thread {one['ratio']:.3f}x, {one['extra_ms_per_step']:+.2f} ms/step "
               f"of {inproc['one thread']['plain_ms_per_step']:.2f}" if one else "") + ")")
    for key, v in (run or {}).items():
        if isinstance(v, dict):   # loop time and CPU time (separate processes), instructions
            print(f"    python -m torchwrapper {key:24} wall {v['wall']:.3f}x (min {v['wall_min']:.3f}x), "
                  f"CPU {v['cpu']:.3f}x" + (f", instructions {v['instructions']:.3f}x" if "instructions" in v else "") +
                  (f"; its own estimate {v['own_estimate']:.3f}x" if v.get("own_estimate") else "") +
                  f"; {v['bytes_per_step']:,} bytes/step; {v['dropped']} records dropped "
                  f"(peak {v['memory_peak_mib']:.1f} MiB waiting)", flush=True)


def print_long(name: str, row: dict) -> None:
    print(f"  {TITLES[name]}, {row['steps']:,} steps in blocks of {row['block']} (after a warm-up block), "
          f"`run` with its defaults / plain ({row['plain_ms_per_step']:.2f} ms/step): wall {row['ratio']:.3f}x, "
          f"CPU {row['cpu_ratio']:.3f}x; its own estimate {row['own_estimate']:.3f}x; "
          f"{row['bytes_per_step']:,} bytes/step; {row['dropped']} records dropped; load average "
          f"{row['load_average'][0]} -> {row['load_average'][1]}")
    for key in ("plain", "run, defaults"):
        v = row[key]
        print(f"    {key:15} last block / first {v['last_over_first']:.3f} (last 3 / first 3 "
              f"{v['last3_over_first3']:.3f}), slope "
              f"{v['slope_pct_per_1000_steps']:+.2f} %/1000 steps, RSS {v['rss_mb_first']:.0f} -> "
              f"{v['rss_mb_last']:.0f} MB", flush=True)


def print_soak(name: str, row: dict) -> None:
    print(f"  {TITLES[name]}, {row['steps']:,} steps under tw.profile (CSV, args none), blocks of {row['block']}: "
          f"{row['ms_per_step_first']:.3f} -> {row['ms_per_step_last']:.3f} ms/step ({row['last_over_first']:.3f}x; "
          f"blocks {row['ms_per_step_min']:.3f}..{row['ms_per_step_max']:.3f}), RSS {row['rss_mb_first']:.0f} -> "
          f"{row['rss_mb_last']:.0f} MB", flush=True)


def main() -> None:
    hf = import_transformers()
    if hf is None:
        print("SKIP bench_hf.py: the transformers package is not importable (pip install transformers)")
        print(json.dumps({"bench": "hf", "skipped": "transformers not importable"}))
        return
    import torchwrapper as tw
    results = {"bench": "hf", "mode": MODE, "reps": REPS, "steps_per_block": SIZES["steps"],
               "process_reps": SIZES["proc_reps"], "machine": machine(hf),
               "in_process": {}, "run": {}, "long": {}, "soak": None}
    print(f"transformers models, random init, {torch.get_num_threads()} torch threads (BENCH={MODE}; in-process: "
          f"median of {REPS} interleaved repetitions of {SIZES['steps']} steps; `run`: median (and min) of "
          f"{SIZES['proc_reps']} process repetitions, instructions per step "
          f"{'by callgrind' if CALLGRIND else 'not counted (BENCH_HF_CALLGRIND=1, valgrind)'}; profiled / plain):",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="tw-bench-hf-") as tmp:
        for name in MODELS:
            if "in_process" in PARTS:
                results["in_process"][name] = in_process(tw, hf, name, tmp)
            if name in RUN_MODELS and "run" in PARTS:
                results["run"][name] = through_run(name, tmp)
            print_model(name, results["in_process"].get(name), results["run"].get(name))
        if "long" in PARTS:
            print("long run (a per-step cost that grows shows as a profiled last/first above the plain one):")
        for name in LONG_MODELS if "long" in PARTS else ():
            results["long"][name] = long_run(name, tmp)
            print_long(name, results["long"][name])
        if SOAK and "soak" in PARTS:
            print("soak:")
            results["soak"] = {}
            for name in ["mlp"] + [m for m in ("bert",) if m in MODELS]:
                results["soak"][name] = soak(tw, hf, name, tmp)
                print_soak(name, results["soak"][name])
    results["machine"]["load_end"] = load_average()
    print(f"load average {results['machine']['load_start']} at the start, {results['machine']['load_end']} at the end "
          f"({os.cpu_count()} CPUs)")
    print(json.dumps(results))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
