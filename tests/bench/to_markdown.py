# SPDX-License-Identifier: MIT
"""Turns the result files of `make bench` (BUILD/build/bench*.json, bench-writer.txt) into the
Markdown table of docs/performance.md: python3 tests/bench/to_markdown.py BUILD_DIR/build"""
from __future__ import annotations

import json
import os
import platform
import sys


def load(directory, name):
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        if name.endswith(".txt"):  # a bench prints its JSON on the last line; none when it failed
            lines = [line for line in f if line.startswith("{")]
            return json.loads(lines[-1]) if lines else None
        return json.load(f)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def add_hf(add, hf):
    """The rows of bench_hf.py (transformers package models): in-process, through `run`, long run, soak."""
    titles = {"bert": "BERT", "gpt2": "GPT-2", "llama": "Llama"}
    threads = hf["machine"]["torch_threads"]
    def ratio(run, key, figure="wall"):   # "—": not measured (BENCH=smoke runs the first model only)
        return f"{run[key][figure]:.3f}x" if figure in run.get(key, {}) else "—"

    for name, row in hf["in_process"].items():
        run = hf["run"].get(name, {})
        add(f"`transformers` {titles.get(name, name)}, random init, {threads} threads "
            f"({row['args none']['records_per_step']:.0f} records/step, {row['plain_ms_per_step']:.1f} ms/step): "
            "tw.profile args none / summary; `run` args none / defaults",
            f"{row['args none']['ratio']:.3f}x / {row['args summary']['ratio']:.3f}x; "
            f"{ratio(run, 'run, args none')} / {ratio(run, 'run, defaults')}",
            "1.03x / 1.10x; 1.03x / 1.10x")
        one = row.get("one thread")
        if one and "extra_ms_per_step" in row["args none"]:
            add(f"`transformers` {titles.get(name, name)} in-process, the profiler's extra ms a step at {threads} "
                f"threads / at one thread (plain {one['plain_ms_per_step']:.1f} ms/step), args none; summary",
                "; ".join(f"{row[mode]['extra_ms_per_step']:+.2f} / {one[mode]['extra_ms_per_step']:+.2f} "
                          f"({one[mode]['ratio']:.3f}x at one thread)" for mode in ("args none", "args summary")),
                "alike")
    for name, run in hf["run"].items():
        add(f"`transformers` {titles.get(name, name)} through `run`, args none / defaults (separate processes, "
            f"interleaved): wall median, min; CPU time; instructions per step (callgrind)",
            "; ".join(f"{ratio(run, 'run, args none', figure)} / {ratio(run, 'run, defaults', figure)}"
                      for figure in ("wall", "wall_min", "cpu", "instructions")), "1.03x")
    for name, row in hf["long"].items():
        add(f"`transformers` {titles.get(name, name)} under `run` with its defaults, {row['steps']:,} steps: wall; "
            "CPU; its own estimate; bytes a step",
            f"{row['ratio']:.3f}x; {row['cpu_ratio']:.3f}x; {row['own_estimate']:.3f}x; {row['bytes_per_step']:,}",
            "1.02x")
        add(f"`transformers` {titles.get(name, name)} under `run` with its defaults, {row['steps']:,} steps: "
            "last block / first (last 3 / first 3), plain / profiled",
            f"{row['plain']['last_over_first']:.3f} ({row['plain']['last3_over_first3']:.3f}) / "
            f"{row['run, defaults']['last_over_first']:.3f} ({row['run, defaults']['last3_over_first3']:.3f})",
            "equal")
    for name, row in (hf.get("soak") or {}).items():
        add(f"soak, {titles.get(name, 'toy MLP' if name == 'mlp' else name)}, {row['steps']:,} steps profiled: "
            "ms/step and RSS, first block → last",
            f"{row['ms_per_step_first']:.2f} → {row['ms_per_step_last']:.2f} ms, "
            f"{row['rss_mb_first']:.0f} → {row['rss_mb_last']:.0f} MB", "flat")


def add_memory(add, m):
    """The rows of bench_memory.py: per allocation, and per model memory off / on / torch.profiler."""
    a = m["per_allocation"]
    add("config memory, per allocation and free (`torch.empty(64)`, one thread)",
        f"{a['per_call_ns']:+.0f} ns (call {a['empty_profiled_ns']:.0f} ns)")
    for name, row in m.items():
        if name == "per_allocation":
            continue
        r = row["ratios"]
        add(f"{name}, one thread: memory off / on; torch.profiler / with profile_memory",
            f"{r['memory off']:.3f}x / {r['memory on']:.3f}x; {r['torch.profiler']:.3f}x / "
            f"{r['torch.profiler profile_memory']:.3f}x", "— / 1.05x")


def main(directory):
    main_run = load(directory, "bench.json")
    training = load(directory, "bench-training.json")
    report = load(directory, "bench-report.json")
    writer = load(directory, "bench-writer.txt")
    watch = load(directory, "bench-model-watch.json")
    transformer = load(directory, "bench-transformer.json")
    hf = load(directory, "bench-hf.txt")
    loading = load(directory, "bench-load.json")
    memory = load(directory, "bench-memory.txt")
    found = load(directory, "bench-findings.txt")
    compressed = load(directory, "bench-compress.txt")
    rows = []

    def add(what, measured, target="—"):
        rows.append(f"| {what} | {measured} | {target} |")

    if main_run:
        r = main_run["results"]
        for c in r.get("single", []):
            add(f"per call, one wrapper, `{c['call']}`", f"{c['overhead_ns']:+.0f} ns (call {c['unprofiled_ns']:.0f} ns)",
                f"{c['target_ns']} ns")
        for c in r.get("everything", []):
            add(f"per call, everything wrapped, `{c['call']}`", f"{c['overhead_ns']:+.0f} ns", f"{c['target_ns']} ns")
        for c in r.get("with_files", []):
            add(f"per call, everything wrapped + CSV, `{c['call']}` (none / summary)",
                f"{c['args_none_ns']:+.0f} / {c['args_summary_ns']:+.0f} ns ({c['records_per_call']:.0f} records)")
        for c in r.get("args", []):
            add(f"per call, `{c['call']}`", f"{c['overhead_ns']:+.0f} ns", f"{c['target_ns']} ns")
        alt = {c["call"]: c for c in r.get("alternatives", [])}
        ours = alt.get("torch.add: torchwrapper")
        if ours:
            dec = alt["torch.add: Python decorator"]
            prof = alt["torch.add: torch.profiler"]
            add("`torch.add` under a Python decorator", f"{dec['overhead_ns']:+.0f} ns "
                f"({dec['overhead_ns'] / max(ours['overhead_ns'], 1e-9):.1f}x torchwrapper's)", "≥ 10x ours")
            total = prof["overhead_ns"] + prof["exit_ns_per_call"]
            add("`torch.add` under torch.profiler (in block + at exit)",
                f"{prof['overhead_ns']:+.0f} + {prof['exit_ns_per_call']:.0f} ns "
                f"({total / max(ours['overhead_ns'], 1e-9):.0f}x torchwrapper's)", "≥ 10x ours")
        w = r.get("wrapping")
        if w:
            add(f"wrap everything ({w['distinct']:,} callables, {w['places']:,} places), first start",
                f"{w['first_ms']['discover_s'] + w['first_ms']['install_s']:.0f} ms", "50 ms")
            add("unwrap", f"{w['first_ms']['restore_s']:.1f} ms", "10 ms")
            later = w.get("later_ms")
            if later:
                add("later starts (the plan reused): wrap / unwrap",
                    f"{later['discover_s'] + later['install_s']:.1f} / {later['restore_s']:.1f} ms", "2 ms")
        whole = r.get("whole_run")
        if whole:
            add(f"whole run, examples/train_mlp.py ({whole['records']:,} calls), everything wrapped",
                f"{whole['ratio']:.3f}x", "1.03x")
        counted = r.get("call_instructions")   # None: not counted (no valgrind, or BENCH=smoke)
        if counted:
            add("instructions a `torch.add` call, every thread, `run`'s defaults in a step without detail "
                "(callgrind): plain / profiled", f"{counted['plain']:,} / {counted['profiled']:,} "
                f"({counted['extra']:+,})")
        m = r.get("memory")
        if m:
            add(f"peak memory, {m['calls']:,} calls to capped files", f"+{m['extra_mb']:.0f} MB", "< 64 MB")
    if training:
        for loop in training["loops"]:
            add(f"whole run, {loop['loop']} ({loop['calls_recorded']:,} calls): torchwrapper / torch.profiler / "
                "Python decorator",
                f"{loop['torchwrapper']:.3f}x / {loop['torch.profiler']:.3f}x / {loop['Python decorator']:.3f}x",
                "1.03x")
    if transformer:
        for name, row in transformer["models"].items():
            what = {"gpt": "GPT-2-class LM", "bert": "BERT-class classifier"}.get(name, name)
            files, summary = row["files, args none"], row["files, args summary"]
            add(f"transformer training, {what} ({files['records_per_step']:.0f} records/step, "
                f"{row['plain_ms_per_step']:.1f} ms/step): files + args none / args summary",
                f"{files['ratio']:.3f}x / {summary['ratio']:.3f}x", "1.03x / 1.10x")
            add(f"the same: records in memory / first block with the start inside / torch.profiler",
                f"{row['memory, args none']['ratio']:.3f}x / {row['first block (start inside)']['ratio']:.3f}x / "
                f"{row['torch.profiler']['ratio']:.3f}x", "— / — / —")
            process = row.get("process", {})
            if process:
                add("the same under `python -m torchwrapper run` (separate processes): args none / default",
                    f"{process['run, args none']:.3f}x / {process['run, default args']:.3f}x", "1.03x / 1.10x")
    if hf and not hf.get("skipped"):
        add_hf(add, hf)
    if memory:
        add_memory(add, memory["bench_memory"])
    if watch:
        add("model watch: module path per module forward", f"{watch['probe_ns']:+.1f} ns", "no measurable cost")
        add(f"tensor statistics, CNN step ({watch['tensors_per_step']} tensors): extra / their own ops",
            f"{watch['extra_over_ops']:.2f}x", "≤ 2x")
        add("tensor statistics: the per-number .item() technique's extra / ours",
            f"{watch['item_over_stats']:.1f}x", "≥ 5x")
    if writer:
        add("writer thread, CSV / JSON", f"{writer['csv_records_per_s'] / 1e6:.1f} / "
            f"{writer['json_records_per_s'] / 1e6:.1f} M records/s", "2 / 1 M/s")
        if "csv_gzip_records_per_s" in writer:
            add("writer thread, compress gzip, CSV / JSON", f"{writer['csv_gzip_records_per_s'] / 1e6:.2f} / "
                f"{writer['json_gzip_records_per_s'] / 1e6:.2f} M records/s")
    if compressed and not compressed.get("skipped"):
        titles = {"bert": "BERT", "gpt2": "GPT-2"}
        for name, row in compressed["models"].items():
            s = row["sizes"]
            add(f"`transformers` {titles.get(name, name)} under `run`, bytes per call record, CSV / JSON "
                "(args summary): plain → compress gzip",
                f"{s['csv, args summary, none']['bytes_per_record']:.0f} → "
                f"{s['csv, args summary, gzip']['bytes_per_record']:.0f} / "
                f"{s['json, args summary, none']['bytes_per_record']:.0f} → "
                f"{s['json, args summary, gzip']['bytes_per_record']:.0f}")
            c = row["cost"]
            add(f"the same, tw.profile (JSON, args summary, torch on 1 thread): the writer's CPU a step, "
                "compress none / gzip; gzip's extra as a share of a step's CPU",
                f"{c['compress none']['writer_cpu_ms_per_step']:.2f} / "
                f"{c['compress gzip']['writer_cpu_ms_per_step']:.2f} ms; +{100 * c['gzip_extra_cpu_share']:.1f}%")
        add("appending one record on the calling thread", f"{writer['append_ns']:.1f} ns", "< 10 ns")
    if report:
        add(f"tw-report on {report['input_mb']:.0f} MB of CSV", f"{report['tw_report_mb_s_wall']:.0f} MB/s "
            f"({report['tw_report_mb_s_cpu']:.0f} MB/s of CPU time); {report['speedup_vs_pandas']}x pandas",
            "300 MB/s, 5x pandas")
        add("tw-report memory, one file → all files", f"{report['max_rss_mb_one_file']:.0f} → "
            f"{report['max_rss_mb_all_files']:.0f} MB", "flat")
        for name, row in report.get("views", {}).items():
            add(f"`tw-report --{name}` on {report['input_mb']:.0f} MB; memory one file → all files",
                f"{row['mb_s_wall']:.0f} MB/s; {row['max_rss_mb_one_file']:.0f} → {row['max_rss_mb_all_files']:.0f} MB",
                "300 MB/s, flat")
        if "diff_mb_s_wall" in report:
            add(f"tw-report --diff, {report['input_mb']:.0f} MB as BASE and as NEW",
                f"{report['diff_mb_s_wall']:.0f} MB/s, max RSS {report['diff_max_rss_mb']:.0f} MB")
        for engine, row in report.get("engines", {}).items():
            add(f"the same per-API table through {engine} (`torchwrapper.{'sql' if engine == 'duckdb' else 'load'}`)",
                f"{row['mb_s_wall']:.0f} MB/s, max RSS {row['max_rss_mb']:.0f} MB")
    if found:
        s, p = found["bench_findings"]["speed"], found["bench_findings"]["planted"]
        add(f"`tw-report --findings` on {s['input_mb']:.0f} MB: time / the per-API table's (-j 1); memory a tenth → all",
            f"{s['findings_over_table_wall']:.2f}x ({s['findings_over_table_j1_wall']:.2f}x); "
            f"{s['findings_max_rss_mb_tenth']:.1f} → {s['max_rss_mb']['findings']:.1f} MB", "1.2x, flat")
        add("planted.py's seven mistakes named (TorchWrapper / " + " / ".join(list(p["counts"])[1:]) + ")",
            " / ".join(f"{n}/7" for n in p["counts"].values()))
    if loading:
        for fmt, row in loading["formats"].items():
            add(f"`torchwrapper.load()` / `iter_rows`, {loading['rows'] / 1e6:.0f}M calls of {fmt.upper()} "
                f"({row['mb']:.0f} MB)", f"{row['load_s']:.2f} / {row['iter_rows_s']:.2f} s"
                + (f" (pandas.read_csv alone: {row['pandas_read_csv_s']:.2f} s)" if "pandas_read_csv_s" in row else ""))
    mode = main_run["mode"] if main_run else "?"
    print(f"Measured by `make bench` (BENCH={mode}) on {cpu_name()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, torch {main_run['torch'] if main_run else '?'}:\n")
    print("| what | measured | target |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build")
