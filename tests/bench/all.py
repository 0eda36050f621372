# SPDX-License-Identifier: MIT
"""make bench (and make bench-smoke): every benchmark in turn, then one table of their figures.

Each bench's output is shown as it comes and kept in BUILD/build/bench-NAME.txt; its result files
from an earlier run are removed first, so that the table and build/bench.md (tests/bench/to_markdown.py)
hold this run's figures only. A bench that fails does not stop the others: the run goes on, and
exits 1 at the end naming every one that failed. The last thing printed is the table
(tests/bench/summary.py): each bench's wall time, CPU time (its processes') and headline figures.

    python tests/bench/all.py [NAME ...]     (make bench sets PYTHONPATH, BENCH and top_builddir)

NAME picks benches (writer, run, training, report, findings, ranks, trace, load, transformer, hf, gpu, sites,
schedule, backward, trainer, flops, memory, compress). BENCH=smoke also runs torch on one thread
(OMP_NUM_THREADS=1 unless set): on a small shared machine torch's default threads, one per core,
contend with each other and with other work and make each step many times slower.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from modes import MODE, sized  # noqa: E402  (this folder's: BENCH)
import summary  # noqa: E402  (this folder's: the table of figures)

BUILD = os.environ.get("top_builddir", ".")
OUT = os.path.join(BUILD, "build")

# (name, the script in this folder or None for the C writer, the result files it writes in OUT),
# in the order they run: bench_transformer reads run.py's bench.json.
BENCHES: List[Tuple[str, str, Tuple[str, ...]]] = [
    ("writer", None, ()),
    ("run", "run.py", ("bench.json",)),
    ("training", "bench_training.py", ("bench-training.json",)),
    ("report", "bench_report.py", ("bench-report.json",)),
    ("findings", "bench_findings.py", ()),
    ("ranks", "bench_ranks.py", ("bench-ranks.json",)),
    ("model_watch", "bench_model_watch.py", ("bench-model-watch.json",)),
    ("load", "bench_load.py", ("bench-load.json",)),
    ("transformer", "bench_transformer.py", ("bench-transformer.json",)),
    ("hf", "bench_hf.py", ()),
    ("gpu", "bench_gpu.py", ("bench-gpu.json",)),
    ("sites", "bench_sites.py", ("bench-sites.json",)),
    ("schedule", "bench_schedule.py", ()),
    ("backward", "bench_backward.py", ()),
    ("trainer", "bench_trainer.py", ()),
    ("flops", "bench_flops.py", ()),
    ("memory", "bench_memory.py", ()),
    ("compress", "bench_compress.py", ()),
]
WRITER_RECORDS = sized(200_000, 5_000_000, 20_000_000)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_one(name: str, script: str, outputs: Tuple[str, ...], env: Dict[str, str]) -> Tuple[int, float, float]:
    """Runs one bench, its standard output to ours and to OUT/bench-NAME.txt (its standard error to
    ours only: the .txt ends with the bench's JSON line); (exit status, wall s, CPU s)."""
    for stale in outputs + (f"bench-{name}.txt",):
        try:
            os.unlink(os.path.join(OUT, stale))
        except FileNotFoundError:
            pass
    if script is None:
        argv = [os.path.join(BUILD, "tests", "bench", "bench_writer"), str(WRITER_RECORDS)]
    else:   # -u: each line as it is printed, not at the end
        argv = [sys.executable, "-u", os.path.join(HERE, script)]
    print(f"==> {name}: {' '.join(argv[1:] if script else argv)} (BENCH={MODE})", flush=True)
    cpu0, start = children_cpu(), time.perf_counter()
    with open(os.path.join(OUT, f"bench-{name}.txt"), "w") as kept:
        try:
            child = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        except OSError as error:
            print(f"{name}: cannot start {argv[0]}: {error}", flush=True)
            return 127, 0.0, 0.0
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            kept.write(line)
        status = child.wait()
    return status, time.perf_counter() - start, children_cpu() - cpu0


def main(argv: List[str]) -> int:
    unknown = [n for n in argv if n not in [b[0] for b in BENCHES]]
    if unknown:
        sys.exit(f"all.py: no bench named {', '.join(unknown)}; the benches: {' '.join(b[0] for b in BENCHES)}")
    os.makedirs(OUT, exist_ok=True)
    env = dict(os.environ, BENCH=MODE)
    if MODE == "smoke":
        env.setdefault("OMP_NUM_THREADS", "1")
    timings: Dict[str, Tuple[int, float, float]] = {}
    start = time.perf_counter()
    for name, script, outputs in BENCHES:
        if argv and name not in argv:
            continue
        timings[name] = run_one(name, script, outputs, env)
        if timings[name][0] != 0:
            print(f"==> {name} FAILED (exit status {timings[name][0]})", flush=True)
    failed = [name for name, (status, _, _) in timings.items() if status != 0]
    markdown = os.path.join(OUT, "bench.md")
    with open(markdown, "w") as f:
        done = subprocess.run([sys.executable, os.path.join(HERE, "to_markdown.py"), OUT], stdout=f)
    if done.returncode != 0:
        failed.append("to_markdown.py")
    else:
        print(f"Markdown table: {markdown}")
    print()
    if not summary.main(OUT, timings, time.perf_counter() - start):
        failed.append("summary.py")
    if failed:
        print(f"FAILED: {' '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
