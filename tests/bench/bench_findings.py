# SPDX-License-Identifier: MIT
"""tw-report --findings: its speed against the per-API table on the same large record files, and
what it says about a training loop with seven planted mistakes (tests/bench/planted.py) next to what
TraceML and TorchTidy say about the same loop. Run by `make bench` (BENCH=smoke: tiny sizes, a few
steps, to check that it runs).

1. Speed. The record files are bench_report.py's: a real profiled training loop's rows repeated
   (call ids, times and here steps shifted) into one 128 MB file, hard linked into as many names as
   the size asks (1 GB; the page cache holds one copy), with the run's sites.json beside them (the
   findings name the program's lines: without it every row would be "(no site)"). `tw-report DIR`
   (the table, default -j: one thread per CPU), `tw-report -j 1 DIR` and `tw-report --findings DIR`
   (one thread: its rows must be read in file order) run in turns, the order reversed every other
   round; median wall and CPU time of each. Memory: the findings' max RSS (GNU time) on all of it
   and on a tenth of it.

2. Side by side. planted.py runs three ways, torch on one thread in each (OMP_NUM_THREADS=1 unless
   set: the machine is small and shared):
   - `python -m torchwrapper run planted.py`, then `tw-report --findings` on its records;
   - `traceml run planted.py` (TraceML, package traceml-ai: ./quickstart bench installs it), the loop
     under its documented integration for a loop of one's own (traceml_ai.init, trace_step), its
     final_summary.json read for its issues;
   - torch.profiler with with_stack=True around the loop, then TorchTidy,
     torch.profiler._pattern_matcher.report_all_anti_patterns(prof). Where it raises, that is its
     result (the error and the pattern it was in); then each of its patterns is tried on its own,
     and the loop is profiled again with torch.compile left out (six mistakes; not in BENCH=smoke),
     to show what it finds where it does not crash.
   Each tool's own output is printed, then one table: for each mistake, what each tool calls it and
   at which of planted.py's lines (a line marked for another mistake, or for none, is counted
   apart). A tool that cannot be installed or run says why in its column.

The last line printed is the JSON of the figures (summary.py reads it).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from modes import MODE, sized  # noqa: E402  (this folder's: BENCH)
import bench_report  # noqa: E402  (the large record files, and a timed tw-report run)

TOTAL_MB = sized(8, 1024, 1024)
FILE_MB = sized(4, 128, 128)
REPS = sized(1, 5, 9)
STEPS = sized(6, 40, 80)
BUILD = os.environ.get("top_builddir", ".")
TW_REPORT = os.path.join(BUILD, "tw-report")
PLANTED = os.path.join(HERE, "planted.py")
TOOL_TIMEOUT_S = sized(600, 900, 1800)

# ---- 1. speed ---------------------------------------------------------------------------------------


def record_files(tmp: str) -> Tuple[str, str, float]:
    """The large input (a directory of hard links and sites.json) and a tenth of it (one file cut
    at a row's end, and sites.json): (big dir, small dir, big MB)."""
    header, rows = bench_report.real_rows(tmp)
    base = os.path.join(tmp, "base.csv")
    bench_report.make_file(base, header, rows, FILE_MB << 20, shift_steps=True)
    sites = os.path.join(tmp, "run", "sites.json")
    big = os.path.join(tmp, "big")
    os.mkdir(big)
    count = max(1, TOTAL_MB // FILE_MB)
    for i in range(count):
        os.link(base, os.path.join(big, f"tw-{i:04d}.csv"))
    shutil.copy(sites, big)
    total = os.path.getsize(base) * count
    small = os.path.join(tmp, "small")
    os.mkdir(small)
    with open(base, "rb") as f:
        head = f.read(total // 10)
    with open(os.path.join(small, "tw-0000.csv"), "wb") as f:
        f.write(head[:head.rindex(b"\n") + 1])
    shutil.copy(sites, small)
    return big, small, total / 1e6


def speed(tmp: str) -> dict:
    big, small, mb = record_files(tmp)
    modes = {"table": (), "table -j 1": ("-j", "1"), "findings": ("--findings",)}
    runs: Dict[str, List[Tuple[float, float, Optional[float]]]] = {m: [] for m in modes}
    for rep in range(REPS):
        for m in (list(modes) if rep % 2 == 0 else list(reversed(modes))):
            runs[m].append(bench_report.run_report([big], modes[m], fmt=None))
    _, _, rss_small = bench_report.run_report([small], ("--findings",), fmt=None)
    small_mb = sum(os.path.getsize(os.path.join(small, n)) for n in os.listdir(small) if n.endswith(".csv")) / 1e6
    wall = {m: statistics.median(r[0] for r in runs[m]) for m in modes}
    cpu = {m: statistics.median(r[1] for r in runs[m]) for m in modes}
    rss = {m: runs[m][0][2] and max(r[2] for r in runs[m]) for m in modes}
    return {
        "input_mb": round(mb, 1), "reps": REPS, "cpus": os.cpu_count(),
        "wall_s": {m: round(v, 3) for m, v in wall.items()},
        "cpu_s": {m: round(v, 3) for m, v in cpu.items()},
        "findings_over_table_wall": round(wall["findings"] / wall["table"], 3),
        "findings_over_table_j1_wall": round(wall["findings"] / wall["table -j 1"], 3),
        "findings_over_table_cpu": round(cpu["findings"] / cpu["table"], 3),
        "findings_mb_s_wall": round(mb / wall["findings"], 1),
        "max_rss_mb": {m: v and round(v, 1) for m, v in rss.items()},
        "findings_max_rss_mb_tenth": rss_small and round(rss_small, 1), "tenth_mb": round(small_mb, 1),
    }


def print_speed(s: dict) -> None:
    w, c, r = s["wall_s"], s["cpu_s"], s["max_rss_mb"]
    print(f"tw-report on {s['input_mb']:.0f} MB ({s['cpus']} CPUs, median of {s['reps']}, interleaved):")
    for m in w:
        print(f"  {m:<11} {w[m]:7.2f} s wall, {c[m]:7.2f} s CPU, max RSS {r[m]} MB")
    print(f"  --findings / the table: {s['findings_over_table_wall']:.2f}x wall "
          f"({s['findings_over_table_j1_wall']:.2f}x the table at -j 1), {s['findings_over_table_cpu']:.2f}x CPU; "
          f"max RSS {s['findings_max_rss_mb_tenth']} MB on {s['tenth_mb']:.0f} MB, "
          f"{r['findings']} MB on {s['input_mb']:.0f} MB")


# ---- 2. side by side --------------------------------------------------------------------------------

MISTAKES = ("dataset", "sync", "metric", "foreach", "zero_grad", "conv_bias", "recompile")
# What each tool calls each mistake (a kind it reports -> the mistake it names).
TORCHWRAPPER_KINDS = {"input_bound": "dataset", "host_sync": "sync", "python_outside_torch": "metric",
                      "optimizer_single_tensor": "foreach", "zero_grad_fills": "zero_grad",
                      "conv_bias_before_batchnorm": "conv_bias", "recompilation": "recompile"}
TRACEML_KINDS = {"INPUT_BOUND": "dataset"}   # its other issues name a phase of the step, no one mistake
TORCHTIDY_KINDS = {"Synchronized DataLoader Pattern": "dataset", "Optimizer Single Tensor Pattern": "foreach",
                   "Gradient Set To Zero Instead of None Pattern": "zero_grad",
                   "Enabling Bias in Conv2d Followed By BatchNorm Pattern": "conv_bias"}


def planted_lines() -> Dict[int, List[str]]:
    """planted.py's marked lines: {line: [mistakes]} (`# PLANTED:a,b`)."""
    marks = {}
    with open(PLANTED) as f:
        for number, text in enumerate(f, 1):
            found = re.search(r"# PLANTED:([a-z_,]+)", text)
            if found and number > 30:   # (the docstring names the mark itself)
                marks[number] = found.group(1).split(",")
    return marks


def child_env() -> Dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(BUILD, "build", "python"), HERE,
                                                    env.get("PYTHONPATH")) if p)
    return env


def run_child(argv: List[str], cwd: str, env: Dict[str, str]) -> Tuple[int, str, str, float]:
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        return 124, error.stdout or "", f"timed out after {TOOL_TIMEOUT_S} s", time.perf_counter() - start
    return done.returncode, done.stdout, done.stderr, time.perf_counter() - start


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def torchwrapper_side(tmp: str) -> dict:
    out = os.path.join(tmp, "tw-out")
    status, _, err, wall = run_child([sys.executable, "-m", "torchwrapper", "run", "-o", out, PLANTED, str(STEPS)],
                                     tmp, child_env())
    if status != 0:
        return {"status": f"failed: run exited {status}: {tail(err)}", "wall_s": round(wall, 1)}
    text = subprocess.run([TW_REPORT, "--findings", out], capture_output=True, text=True, check=True).stdout
    result = json.loads(subprocess.run([TW_REPORT, "--findings", "--format", "json", out], capture_output=True,
                                       text=True, check=True).stdout)
    issues = [{"kind": f["kind"], "severity": f["severity"],
               "lines": [int(m.group(1)) for w in f["where"] for m in [re.match(r"planted\.py:(\d+) ", w)] if m]}
              for f in result["findings"]]
    return {"status": "ok", "wall_s": round(wall, 1), "output": text.rstrip(), "issues": issues,
            "mapping": TORCHWRAPPER_KINDS}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def traceml_side(tmp: str) -> dict:
    traceml = os.path.join(os.path.dirname(sys.executable), "traceml")
    try:
        import traceml_ai
        version = traceml_ai.__version__
    except ImportError as error:
        return {"status": f"not installed ({error}): pip install traceml-ai (./quickstart bench installs it)"}
    if not os.path.exists(traceml):
        return {"status": f"traceml-ai {version} is installed but its command is not at {traceml}"}
    logs = os.path.join(tmp, "traceml-logs")
    env = child_env()
    env["PLANTED_TRACEML"] = "1"
    status, out, err, wall = run_child([traceml, "run", "--logs-dir", logs, "--run-name", "planted",
                                        "--aggregator-port", str(free_port()), "--master-port", str(free_port()),
                                        PLANTED, "--args", str(STEPS)], tmp, env)
    summary = os.path.join(logs, "planted", "final_summary.json")
    if status != 0 or not os.path.exists(summary):
        return {"status": f"failed: traceml run exited {status}: {tail(err or out)}", "version": version,
                "wall_s": round(wall, 1)}
    with open(summary) as f:
        report = json.load(f)
    with open(os.path.join(logs, "planted", "final_summary.txt")) as f:
        text = f.read().rstrip()
    issues = [{"kind": i["kind"], "severity": i["severity"], "summary": i["summary"], "lines": []}
              for i in report.get("step_time", {}).get("issues", [])]
    verdict = report.get("primary_diagnosis", {})
    return {"status": "ok", "version": version, "wall_s": round(wall, 1), "output": text, "issues": issues,
            "verdict": f"{verdict.get('status')} ({verdict.get('severity')}): {verdict.get('summary')}",
            "mapping": TRACEML_KINDS}


TIDY_SCRIPT = r"""
import json, os, sys, traceback
out, steps, eager = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "eager"
import torch
from torch.profiler import ProfilerActivity, profile
from torch.profiler import _pattern_matcher as pm
if eager:   # the loop with its compiled function called as a plain one
    torch.compile = lambda fn, **options: fn
import planted
with profile(activities=[ProfilerActivity.CPU], with_stack=True, record_shapes=True) as prof:
    planted.train(steps)
result = {"crash": None, "patterns": {}}
print("---- report_all_anti_patterns(prof)", flush=True)
try:
    pm.report_all_anti_patterns(prof, json_report_dir=out)
    with open(os.path.join(out, "torchtidy_report.json")) as f:
        for path, found in json.load(f).items():
            for item in found:
                result["patterns"].setdefault(item["name"], []).append(f"{path}:{item['line_number']}")
except Exception as error:
    pattern = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        if isinstance(frame.f_locals.get("self"), pm.Pattern):
            pattern = frame.f_locals["self"].name
    last = traceback.extract_tb(error.__traceback__)[-1]
    result["crash"] = {"error": f"{type(error).__name__}: {error}", "pattern": pattern,
                       "at": f"{os.path.basename(last.filename)}:{last.lineno} {last.line}"}
    traceback.print_exc(file=sys.stdout)
    # each pattern report_all_anti_patterns runs, on its own
    for cls in (pm.ExtraCUDACopyPattern, pm.FP32MatMulPattern, pm.OptimizerSingleTensorPattern,
                pm.SynchronizedDataLoaderPattern, pm.GradNotSetToNonePattern,
                pm.Conv2dBiasFollowedByBatchNorm2dPattern, pm.MatMulDimInFP16Pattern):
        found = cls(prof, False)
        try:
            events = found.matched_events()
            if events:
                result["patterns"][found.name] = sorted({pm.source_code_location(e) for e in events})
        except Exception as again:
            result.setdefault("patterns_crashed", {})[found.name] = f"{type(again).__name__}: {again}"
with open(os.path.join(out, "bench_result.json"), "w") as f:
    json.dump(result, f)
"""


def torchtidy_once(tmp: str, eager: bool) -> dict:
    out = os.path.join(tmp, "torchtidy-eager" if eager else "torchtidy")
    os.makedirs(out)
    status, text, err, wall = run_child([sys.executable, "-c", TIDY_SCRIPT, out, str(STEPS),
                                         "eager" if eager else "compiled"], tmp, child_env())
    path = os.path.join(out, "bench_result.json")
    if status != 0 or not os.path.exists(path):
        return {"status": f"failed: exited {status}: {tail(err or text)}", "wall_s": round(wall, 1)}
    with open(path) as f:
        result = json.load(f)
    issues = [{"kind": name, "lines": sorted({int(loc.rsplit(":", 1)[1]) for loc in locs
                                              if loc.rsplit(":", 1)[0].endswith("planted.py")})}
              for name, locs in result["patterns"].items()]
    crash = result["crash"]
    state = "ok" if crash is None else \
        f"crashed: {crash['error']} (in {crash['pattern']}'s match, at {crash['at']})"
    lines = [line for line in text.splitlines() if not line.startswith(("USDT:", "planted.py:"))]
    return {"status": state, "wall_s": round(wall, 1), "output": "\n".join(lines).strip(),
            "issues": [] if crash else issues, "patterns_alone": issues if crash else None,
            "patterns_crashed": result.get("patterns_crashed", {}), "mapping": TORCHTIDY_KINDS}


def torchtidy_side(tmp: str) -> dict:
    result = torchtidy_once(tmp, eager=False)
    if result["status"].startswith("crashed") and MODE != "smoke":
        result["without_compile"] = torchtidy_once(tmp, eager=True)
    return result


def named(tool: dict, marks: Dict[int, List[str]]) -> Dict[str, dict]:
    """{mistake: {"kind", "lines" (planted lines of that mistake), "other_lines"}} for what tool names."""
    found: Dict[str, dict] = {}
    for issue in tool.get("issues", []):
        mistake = tool["mapping"].get(issue["kind"])
        if mistake is None:
            continue
        row = found.setdefault(mistake, {"kind": issue["kind"], "lines": [], "other_lines": []})
        for line in issue["lines"]:
            (row["lines"] if mistake in marks.get(line, []) else row["other_lines"]).append(line)
    return found


def cell(found: Dict[str, dict], mistake: str) -> str:
    row = found.get(mistake)
    if row is None:
        return "-"
    lines = ",".join(str(n) for n in row["lines"][:4]) or "no line"
    other = f" (+{len(row['other_lines'])} other)" if row["other_lines"] else ""
    return f"{row['kind']} @ {lines}{other}"


def side_by_side(tmp: str) -> dict:
    marks = planted_lines()
    tools = {"TorchWrapper": torchwrapper_side(tmp), "TraceML": traceml_side(tmp), "TorchTidy": torchtidy_side(tmp)}
    for name, tool in tools.items():
        print(f"---- {name}: {tool['status']}" + (f" ({tool['wall_s']} s)" if "wall_s" in tool else ""))
        if tool.get("output"):
            print(tool["output"])
    tidy_eager = tools["TorchTidy"].get("without_compile")
    if tidy_eager:
        print(f"---- TorchTidy, the loop without torch.compile: {tidy_eager['status']} ({tidy_eager.get('wall_s')} s)")
        if tidy_eager.get("output"):
            print(tidy_eager["output"])
    columns = {name: named(tool, marks) for name, tool in tools.items()}
    if tidy_eager:
        columns["TorchTidy w/o compile"] = named(tidy_eager, marks)
    at = {m: [n for n, ms in sorted(marks.items()) if m in ms] for m in MISTAKES}
    rows = [("mistake (planted.py lines)", *columns)]
    for m in MISTAKES:
        rows.append((f"{m} ({','.join(map(str, at[m]))})",
                     *(cell(found, m) if tools.get(name, {"status": "ok"})["status"] == "ok" or name not in tools
                       else "(" + tools[name]["status"].split(":")[0] + ")" for name, found in columns.items())))
    rows.append(("named", *(f"{len(found)}/{len(MISTAKES)}" for found in columns.values())))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"\nplanted.py, {STEPS} steps: which of the seven mistakes each tool names, and at which of its lines "
          "(TorchWrapper: tw-report --findings; TraceML: its issues; TorchTidy: report_all_anti_patterns)")
    for r in rows:
        print("  ".join(f"{c:<{w}}" for c, w in zip(r, widths)).rstrip())
    for name, tool in tools.items():
        rest = [i for i in tool.get("issues", []) if i["kind"] not in tool.get("mapping", {})]
        if rest:
            print(f"  {name} also: " + "; ".join(f"{i['kind']} ({i.get('severity', '')})"
                                                   + (f": {i['summary']}" if i.get("summary") else "")
                                                   + (f" @ {','.join(map(str, i['lines'][:3]))}" if i["lines"] else "")
                                                   for i in rest))
    tidy = tools["TorchTidy"]
    if tidy.get("patterns_alone") is not None:
        alone = ", ".join(f"{i['kind']} @ {','.join(map(str, i['lines'])) or 'no line'}" for i in tidy["patterns_alone"])
        print(f"  TorchTidy's patterns one by one on the same profile: {alone or 'none matched'}; "
              f"{len(tidy['patterns_crashed'])} crash the same way ({', '.join(tidy['patterns_crashed'])})")
    return {
        "steps": STEPS,
        "named": {name: {m: {"kind": r["kind"], "lines": r["lines"], "other_lines": r["other_lines"]}
                         for m, r in found.items()} for name, found in columns.items()},
        "counts": {name: len(found) for name, found in columns.items()},
        "status": {name: tool["status"] for name, tool in tools.items()} |
                  ({"TorchTidy w/o compile": tidy_eager["status"]} if tidy_eager else {}),
        "wall_s": {name: tool.get("wall_s") for name, tool in tools.items()},
        "traceml_verdict": tools["TraceML"].get("verdict"),
    }


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tw-bench-findings-") as tmp:
        s = speed(tmp)
        print_speed(s)
        print()
        planted = side_by_side(tmp)
    print(json.dumps({"bench_findings": {"speed": s, "planted": planted}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
