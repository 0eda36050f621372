# SPDX-License-Identifier: MIT
"""tw-report on a directory of 256 ranks' files (#39): --ranks and the per-API table read it in one
pass; wall time, throughput and max RSS on 1 and 2 threads, and the RSS on 16 ranks against 256 to
show that memory does not grow with the records. Run by `make bench` (BENCH=smoke: 24 ranks, once).

The files are a real profiled training loop's records (bench_report.real_rows), one file set per
rank as the writer names them (tw-...-rankR-PID-0001.csv, manifest-PID.json with the rank and a
clock offset), with rank 17 made slower in one API (the calls of the API with the most self time
take 3x their time there: the heaviest API of a step is well over the 2% of it that makes a 4% change): the report must name rank 17 and that API, and only them.
"""
from __future__ import annotations

import csv
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import TW_REPORT, real_rows, run_report  # noqa: E402
from modes import sized  # noqa: E402  (this folder's: BENCH)

RANKS = sized(24, 256, 256)
SLOW_RANK = 17
REPS = sized(1, 3, 3)


def slowest_api(header, rows):
    """The API with the most self time among those called in every step but the first and last."""
    col = {name: i for i, name in enumerate(header)}
    last = max(int(r[col["step"]]) for r in rows)
    totals, steps = {}, {}
    for r in rows:
        step, api = int(r[col["step"]]), r[col["api"]]
        if 0 < step < last:
            totals[api] = totals.get(api, 0) + int(r[col["self_ns"]])
            steps.setdefault(api, set()).add(step)
    return max((api for api in totals if len(steps[api]) == last - 1), key=totals.get)


def write_ranks(directory, header, rows, ranks, slow_api):
    col = {name: i for i, name in enumerate(header)}
    for rank in range(ranks):
        pid = 100000 + rank
        offset = (rank * 7919) % 2000 * 1000 - 1000000  # this rank's clock, -1 ms .. +1 ms off rank 0's
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        for r in rows:
            r = list(r)
            r[col["pid"]] = str(pid)
            r[col["start_ns"]] = str(int(r[col["start_ns"]]) - offset)
            if rank == SLOW_RANK and r[col["api"]] == slow_api:
                for key in ("cost_ns", "self_ns"):
                    r[col[key]] = str(int(r[col[key]]) * 3)
            writer.writerow(r)
        with open(os.path.join(directory, f"tw-20260101-000000.000000000-rank{rank}-{pid}-0001.csv"), "w") as f:
            f.write(buf.getvalue())
        manifest = {"pid": pid, "rank": rank, "start_ns": int(rows[0][col["start_ns"]]) - offset,
                    "clock_sync": {"start": {"offset_ns": offset, "error_ns": 40000, "rounds": 5}}}
        with open(os.path.join(directory, f"manifest-{pid}.json"), "w") as f:
            json.dump(manifest, f)


def main():
    results = {}
    with tempfile.TemporaryDirectory(prefix="tw-bench-ranks-") as tmp:
        header, rows = real_rows(tmp)
        many, few = os.path.join(tmp, "ranks256"), os.path.join(tmp, "ranks16")
        os.mkdir(many)
        os.mkdir(few)
        slow_api = slowest_api(header, rows)
        write_ranks(many, header, rows, RANKS, slow_api)
        write_ranks(few, header, rows, 16, slow_api)
        size = sum(os.path.getsize(os.path.join(many, n)) for n in os.listdir(many) if n.endswith(".csv"))
        results = {"ranks": RANKS, "input_mb": round(size / 1e6, 1), "rows": len(rows) * RANKS, "reps": REPS}
        outputs = {}
        for name, extra in (("ranks", ["--ranks"]), ("table", [])):
            for jobs in (1, 2):
                argv = extra + ["-j", str(jobs)]
                runs = [run_report([many], argv) for _ in range(REPS)]
                small = run_report([few], argv)
                results[f"{name}_j{jobs}"] = {
                    "mb_s_wall": round(size / 1e6 / statistics.median(r[0] for r in runs), 1),
                    "wall_s": round(statistics.median(r[0] for r in runs), 3),
                    "max_rss_mb": runs[0][2] and round(max(r[2] for r in runs), 1),
                    "max_rss_mb_16_ranks": small[2] and round(small[2], 1)}
                outputs[(name, jobs)] = subprocess.run([TW_REPORT, *argv, "--format", "json", many],
                                                       capture_output=True, text=True, check=True).stdout
        results["same_output_j1_j2"] = all(outputs[(n, 1)] == outputs[(n, 2)] for n in ("ranks", "table"))
        found = json.loads(outputs[("ranks", 1)])
        stragglers = [r for r in found["ranks"] if r["straggler"]]
        results["stragglers"] = [r["rank"] for r in stragglers]
        results["straggler_apis"] = [a["api"] for r in stragglers for a in r["apis"]][:3]
        results["slow_api"] = slow_api
    ok = results["stragglers"] == [SLOW_RANK] and results["straggler_apis"][:1] == [results["slow_api"]] and \
        results["same_output_j1_j2"]
    for name in ("ranks", "table"):
        for jobs in (1, 2):
            row = results[f"{name}_j{jobs}"]
            print(f"tw-report {'--ranks' if name == 'ranks' else '(per-API table)'} -j {jobs} on {RANKS} ranks' files "
                  f"({results['input_mb']:.0f} MB, {results['rows']} records): {row['wall_s']:.2f} s, "
                  f"{row['mb_s_wall']:.0f} MB/s, max RSS {row['max_rss_mb']} MB (16 ranks: {row['max_rss_mb_16_ranks']} MB)")
    print(f"  {results['slow_api']} made 3x slower on rank {SLOW_RANK}; stragglers named: {results['stragglers']} "
          f"({', '.join(results['straggler_apis'])}); "
          f"-j 1 and -j 2 outputs identical: {results['same_output_j1_j2']}; {'OK' if ok else 'WRONG'}")
    out = os.environ.get("BENCH_RANKS_JSON", os.path.join(os.environ.get("top_builddir", "."), "build",
                                                           "bench-ranks.json"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
