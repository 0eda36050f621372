# SPDX-License-Identifier: MIT
"""The table that `make bench` prints last: one row per bench with its headline figures, read from
the files the benches left in BUILD/build (bench*.json, and the last JSON line of bench-NAME.txt),
and, when tests/bench/all.py ran them, each one's exit status, wall time and CPU time.
The full figures are in those files and in build/bench.md (tests/bench/to_markdown.py).

    python tests/bench/summary.py [BUILD_DIR/build]
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Dict, Optional, Tuple


def last_json(path: str) -> Dict[str, Any]:
    """The last line of path that is a JSON object (a bench prints its figures last)."""
    with open(path) as f:
        lines = [line for line in f if line.startswith("{")]
    if not lines:
        raise ValueError(f"{os.path.basename(path)} has no JSON line")
    return json.loads(lines[-1])


def read_json(path: str) -> Dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def writer(out: str) -> str:
    w = last_json(os.path.join(out, "bench-writer.txt"))
    return (f"writer thread CSV {w['csv_records_per_s'] / 1e6:.1f} / JSON {w['json_records_per_s'] / 1e6:.1f} "
            f"M records/s (gzip {w['csv_gzip_records_per_s'] / 1e6:.1f} / {w['json_gzip_records_per_s'] / 1e6:.1f}); "
            f"appending a record {w['append_ns']:.1f} ns")


def run(out: str) -> str:
    r = read_json(os.path.join(out, "bench.json"))["results"]
    one = next(c for c in r["single"] if c["call"].startswith("torch.add"))
    files = next(c for c in r["with_files"] if c["call"].startswith("torch.add"))
    first = r["wrapping"]["first_ms"]
    counted = r.get("call_instructions")   # None: not counted (no valgrind, or BENCH=smoke)
    instructions = f", {counted['extra']:+,} instructions on run's defaults" if counted else ""
    return (f"torch.add {one['overhead_ns']:+.0f} ns (one wrapper), {files['args_none_ns']:+.0f} ns (all + CSV)"
            f"{instructions}; train_mlp {r['whole_run']['ratio']:.3f}x; "
            f"first wrap {first['discover_s'] + first['install_s']:.0f} ms")


def training(out: str) -> str:
    loops = read_json(os.path.join(out, "bench-training.json"))["loops"]
    return "whole run " + ", ".join(f"{loop['loop'].split()[0]} {loop['torchwrapper']:.3f}x" for loop in loops) + \
        " (torch.profiler " + ", ".join(f"{loop['torch.profiler']:.3f}x" for loop in loops) + ")"


def report(out: str) -> str:
    r = read_json(os.path.join(out, "bench-report.json"))
    return (f"tw-report {r['tw_report_mb_s_wall']:.0f} MB/s on {r['input_mb']:.0f} MB, {r['speedup_vs_pandas']}x "
            f"pandas; max RSS {r['max_rss_mb_all_files']} MB")


def findings(out: str) -> str:
    r = last_json(os.path.join(out, "bench-findings.txt"))["bench_findings"]
    s, p = r["speed"], r["planted"]
    named = ", ".join(f"{tool} {count}/7" for tool, count in p["counts"].items())
    failed = ", ".join(f"{tool}: {state.split(':')[0]}" for tool, state in p["status"].items() if state != "ok")
    return (f"--findings {s['findings_over_table_wall']:.2f}x the table's wall time on {s['input_mb']:.0f} MB "
            f"({s['findings_over_table_j1_wall']:.2f}x at -j 1, {s['findings_over_table_cpu']:.2f}x CPU), max RSS "
            f"{s['findings_max_rss_mb_tenth']} -> {s['max_rss_mb']['findings']} MB; planted mistakes named: {named}"
            + (f" ({failed})" if failed else ""))


def ranks(out: str) -> str:
    r = read_json(os.path.join(out, "bench-ranks.json"))
    found = "found" if r["stragglers"] == [17] else f"WRONG: {r['stragglers']}"
    return (f"--ranks {r['ranks_j1']['mb_s_wall']:.0f} MB/s on {r['ranks']} ranks' {r['input_mb']:.0f} MB; "
            f"straggler rank 17 {found}")


def model_watch(out: str) -> str:
    r = read_json(os.path.join(out, "bench-model-watch.json"))
    return (f"module path {r['probe_ns']:+.1f} ns a forward; tensor stats {r['extra_over_ops']:.2f}x their ops; "
            f".item() way {r['item_over_stats']:.1f}x ours")


def load(out: str) -> str:
    r = read_json(os.path.join(out, "bench-load.json"))
    f = r["formats"]
    return (f"load() of {r['rows']:,} calls: CSV {f['csv']['load_s']:.2f} s, JSON {f['json']['load_s']:.2f} s "
            f"(pandas.read_csv {f['csv']['pandas_read_csv_s']:.2f} s)")


def transformer(out: str) -> str:
    models = read_json(os.path.join(out, "bench-transformer.json"))["models"]
    return "files, args none / summary: " + ", ".join(
        f"{name} {row['files, args none']['ratio']:.3f}x / {row['files, args summary']['ratio']:.3f}x"
        for name, row in models.items())


def hf(out: str) -> str:
    r = last_json(os.path.join(out, "bench-hf.txt"))
    if r.get("skipped"):
        return f"skipped: {r['skipped']}"
    text = "args none / summary: " + ", ".join(
        f"{name} {row['args none']['ratio']:.3f}x / {row['args summary']['ratio']:.3f}x"
        for name, row in r["in_process"].items())
    def figure(row, key, name):   # "—": a mode or figure not measured (BENCH_HF_RUN_MODES, callgrind)
        return f"{row[key][name]:.3f}x" if name in row.get(key, {}) else "—"
    if r.get("run"):   # the loop time through `run` (median), the instructions where counted, drops
        text += "; run, args none / defaults: " + ", ".join(
            f"{name} {figure(row, 'run, args none', 'wall')} / {figure(row, 'run, defaults', 'wall')}"
            + (f" (instructions {figure(row, 'run, args none', 'instructions')} / "
               f"{figure(row, 'run, defaults', 'instructions')})" if "instructions" in row.get("run, defaults", {}) else "")
            for name, row in r["run"].items())
        lost = sum(v.get("dropped", 0) for row in r["run"].values() for v in row.values() if isinstance(v, dict))
        text += f"; {lost} records dropped"
    if r.get("long"):   # the long run through `run`'s defaults: wall, the profiler's own estimate, bytes
        text += "; long run, defaults: " + ", ".join(
            f"{name} {row['steps']:,} steps {row['ratio']:.3f}x (own estimate {row['own_estimate']:.3f}x, "
            f"{row['bytes_per_step']:,} B/step)" for name, row in r["long"].items())
    return text


def gpu(out: str) -> str:
    path = os.path.join(out, "bench-gpu.json")
    if not os.path.exists(path):
        with open(os.path.join(out, "bench-gpu.txt")) as f:
            text = f.read()
        if "skipped" not in text:
            raise ValueError("no bench-gpu.json, and bench-gpu.txt does not say skipped")
        return "skipped: no CUDA GPU"
    r = read_json(path)
    return f"GPU timing {r['gpu_timing_extra_ns']:+.0f} ns a call ({r['device']})"


def sites(out: str) -> str:
    r = read_json(os.path.join(out, "bench-sites.json"))
    whole = r["whole_run"]
    return (f"torch.add {r['micro']['torch.add(a, b)']['boundary_extra_ns']:+.0f} ns; boundary / all: " +
            ", ".join(f"{name} {row['boundary']['ratio']:.3f}x / {row['all']['ratio']:.3f}x"
                      for name, row in whole.items()))


def schedule(out: str) -> str:
    r = last_json(os.path.join(out, "bench-schedule.txt"))["bench_schedule"]
    configs = r["whole_run"]["configs"]
    return (f"torch.add outside active steps {r['per_call_ns']['idle-all']['torch.add']:+.0f} ns; "
            f"3-in-10 run {configs['3-in-10']['ratio']:.3f}x, active {configs['active']['ratio']:.3f}x")


def backward(out: str) -> str:
    r = last_json(os.path.join(out, "bench-backward.txt"))["bench_backward"]
    return (f"{r['per_node']['per_node_ns']:+.0f} ns a node; aten backward: " +
            ", ".join(f"{name} {r[name]['aten backward']:.3f}x" for name in ("gpt", "bert")))


def trainer(out: str) -> str:
    r = last_json(os.path.join(out, "bench-trainer.txt"))
    if not r["ratios"]:
        return "skipped: neither transformers nor lightning installed"
    return ", ".join(f"{name.replace('transformers.Trainer', 'HF').replace(' Trainer', '').replace(', ', ' ')} "
                     f"{ratio:.3f}x" for name, ratio in r["ratios"].items())


def flops(out: str) -> str:
    r = last_json(os.path.join(out, "bench-flops.txt"))["bench_flops"]
    return (f"{r['per_call']['grad']['per_call_ns']:+.0f} ns an F.linear; flops on / off: " +
            ", ".join(f"{name} {r[name]['ratios']['flops on']:.3f}x / {r[name]['ratios']['flops off']:.3f}x"
                      for name in ("gpt", "bert")))


def memory(out: str) -> str:
    r = last_json(os.path.join(out, "bench-memory.txt"))["bench_memory"]
    models = [name for name in r if name != "per_allocation"]
    return (f"{r['per_allocation']['per_call_ns']:+.0f} ns an allocation; memory on: " +
            ", ".join(f"{short(name)} {r[name]['ratios']['memory on']:.3f}x" for name in models))


def compress(out: str) -> str:
    r = last_json(os.path.join(out, "bench-compress.txt"))
    if r.get("skipped"):
        return f"skipped: {r['skipped']}"
    parts = []
    for name, row in r["models"].items():
        s = row["sizes"]
        parts.append(f"{name} JSON {s['json, args summary, none']['bytes_per_record']:.0f} -> "
                     f"{s['json, args summary, gzip']['bytes_per_record']:.0f} B/record, gzip +"
                     f"{100 * row['cost']['gzip_extra_cpu_share']:.1f}% CPU a step")
    return "; ".join(parts)


def short(model: str) -> str:
    """BertForSequenceClassification -> Bert, gpt (tests/bench/transformers.py) -> gpt."""
    name = model.split()[0]
    for tail in ("ForSequenceClassification", "LMHeadModel", "ForCausalLM"):
        name = name.replace(tail, "")
    return name


FIGURES: Dict[str, Callable[[str], str]] = {
    "writer": writer, "run": run, "training": training, "report": report, "findings": findings, "ranks": ranks,
    "model_watch": model_watch,
    "load": load, "transformer": transformer, "hf": hf, "gpu": gpu, "sites": sites, "schedule": schedule,
    "backward": backward, "trainer": trainer, "flops": flops, "memory": memory, "compress": compress,
}


def mode(out: str) -> str:
    try:
        return read_json(os.path.join(out, "bench.json"))["mode"]
    except (OSError, ValueError, KeyError):
        return os.environ.get("BENCH", "quick")


def main(out: str, timings: Optional[Dict[str, Tuple[int, float, float]]] = None,
         total_s: Optional[float] = None) -> bool:
    """Prints the table; False when a bench that ran left figures that could not be read.
    timings: {bench: (exit status, wall s, CPU s)} of those that ran (all.py); None: every bench."""
    names = list(timings) if timings is not None else list(FIGURES)
    bench_mode = os.environ.get("BENCH") if timings is not None else mode(out)
    ok = True
    rows = []
    for name in names:
        status, wall, cpu = timings[name] if timings is not None else (0, None, None)
        if status != 0:
            figures, state = f"(exit status {status}: see its output above)", "FAILED"
        else:
            try:
                figures, state = FIGURES[name](out), "ok"
            except (OSError, ValueError, KeyError, TypeError, StopIteration) as error:
                figures, state = f"unreadable: {type(error).__name__}: {error}", "NO FIGURES"
                ok = False
        rows.append((name, state, "" if wall is None else f"{wall:.1f}", "" if cpu is None else f"{cpu:.1f}",
                     figures))
    note = " (a few steps each, to check that every bench runs: the figures mean nothing)" \
        if bench_mode == "smoke" else ""
    print(f"make bench, BENCH={bench_mode}{note}; ratios are profiled / unprofiled:")
    header = ("bench", "status", "wall s", "CPU s", "figures")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(4)]
    for r in [header] + rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}  {r[4]}")
    if timings is not None:
        cpu = sum(t[2] for t in timings.values())
        print(f"{'all':<{widths[0]}}  {'':<{widths[1]}}  {total_s or 0:>{widths[2]}.1f}  {cpu:>{widths[3]}.1f}")
    return ok


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv[1] if len(sys.argv) > 1 else "build") else 1)
