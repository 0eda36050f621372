# SPDX-License-Identifier: MIT
"""python -m torchwrapper run [options] (script.py | -m module) [args...]
python -m torchwrapper report [options] OUT_DIR|FILE...   (tw-report; --help lists its options)
python -m torchwrapper capture PID [--steps N] [--dir DIR] [--wait]   (on-demand capture; --help)

Runs an unmodified program under the profiler, as `python script.py args` would run it (sys.argv,
__main__, sys.path[0], standard streams and exit code are the plain run's), then prints where the
files are and the top APIs by total time on standard error. The program's child processes
(multiprocessing, DataLoader workers, torchrun workers) are profiled too, each into its own files
in the same out_dir, through $TORCHWRAPPER_AUTOSTART (see _autostart.py).
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import sys
from typing import Any, Dict, List, Optional, Tuple

USAGE = "python -m torchwrapper run [--config FILE] [--set KEY=VALUE ...] [-o OUT_DIR] [--no-report] " \
        "[--] (script.py | -m module) [args...]"


def _parse_run(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m torchwrapper run", usage=USAGE,
                                     description="Profile an unmodified program with torchwrapper.")
    parser.add_argument("--config", metavar="FILE", help="a JSON configuration file")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="a configuration value (repeatable), e.g. --set format=csv --set file_max_size=10MB; "
                             "lists comma-separated or JSON: --set exclude=+torch.Tensor.*,+torch.is_*; "
                             "KEY.SUB sets a key of an object value: --set schedule.active=5")
    parser.add_argument("-o", "--out-dir", metavar="OUT_DIR", help="where the files go (config key out_dir)")
    parser.add_argument("--no-report", action="store_true", help="do not print the top-10 report at the end")
    parser.add_argument("--top", type=int, default=10, help="rows of the report (default 10)")
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m MODULE")
    # Everything from the script (or after --, or after -m MODULE) belongs to the program.
    ours, program = [], []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            program = argv[i + 1:]
            break
        if arg == "-m" and i + 1 < len(argv):
            ours += argv[i:i + 2]
            program = argv[i + 2:]
            break
        if arg.startswith("-") and not program:
            ours.append(arg)
            if arg in ("--config", "--set", "-o", "--out-dir", "--top") and i + 1 < len(argv):
                ours.append(argv[i + 1])
                i += 1
            i += 1
            continue
        program = argv[i:]
        break
    options = parser.parse_args(ours)
    if options.module is None and not program:
        parser.error("give a script to run, or -m MODULE")
    options.program = program
    return options


def _run_summaries(wrapper: Any) -> List[Tuple[Dict[str, Any], List[Dict[str, Any]]]]:
    """(manifest, summary APIs) of the processes of this run that wrote to out_dir: this one, and
    those that started after it (older runs in the same out_dir are left out); a rank (started by
    torchrun with this command as its program) takes only its own rank's, not its siblings'."""
    out_dir = os.path.abspath(wrapper.config["out_dir"])
    own = wrapper._profile.session.stats().get("manifest") if wrapper._profile else None
    found = []
    for name in sorted(os.listdir(out_dir)):
        if not (name.startswith("manifest") and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(out_dir, name)) as f:
                manifest = json.load(f)
            with open(os.path.join(out_dir, "summary" + name[len("manifest"):])) as f:
                apis = json.load(f)["apis"]
        except (OSError, ValueError, KeyError):  # still running, or killed: no summary
            continue
        found.append((os.path.join(out_dir, name) == own, manifest, apis))
    mine = next((m for is_own, m, _ in found if is_own), None)
    if mine is None:
        return []
    start, rank = mine.get("start_ns") or 0, mine.get("rank")
    return [(m, apis) for is_own, m, apis in found
            if is_own or ((m.get("start_ns") or 0) >= start and (rank is None or m.get("rank") == rank))]


NAME_CAP = 80  # the widest API column of the report; longer names are elided in the middle


def _fit_names(names: List[str], cap: int = NAME_CAP) -> Tuple[List[str], int]:
    """The names as shown and the column's width: the widest name, up to cap; a longer one keeps
    both ends (``torch.nn.functional.scal…attention``: the end tells methods apart) unless that
    would show two names the same, in which case all are shown whole."""
    def elide(name: str) -> str:
        if len(name) <= cap:
            return name
        head = (cap - 1) // 2
        return name[:head] + "\u2026" + name[len(name) - (cap - 1 - head):]

    shown = [elide(name) for name in names]
    if len(set(shown)) < len(set(names)):
        shown = list(names)
    return shown, max([len("API")] + [len(name) for name in shown])


def _report(wrapper: Any, top: int) -> None:
    out_dir = os.path.abspath(wrapper.config["out_dir"])
    processes = _run_summaries(wrapper)
    if len(processes) <= 1:
        print(f"\ntorchwrapper: {len(wrapper.files)} record file(s) in {out_dir}", file=sys.stderr)
        apis = processes[0][1] if processes else []
        if not apis:
            return
        names, width = _fit_names([a["api"] for a in apis[:top]])
        print(f"{'API':{width}} {'calls':>9} {'total ms':>10} {'self ms':>10} {'p50 us':>9} {'p99 us':>9}",
              file=sys.stderr)
        for name, a in zip(names, apis[:top]):
            print(f"{name:{width}} {a['calls']:9d} {a['total_ns'] / 1e6:10.2f} {a['self_ns'] / 1e6:10.2f} "
                  f"{a['p50_ns'] / 1e3:9.1f} {a['p99_ns'] / 1e3:9.1f}", file=sys.stderr)
        _print_own_cost(processes)
        _print_findings(out_dir)
        return
    # Several processes: sums, means and maxima merge exactly, percentiles do not (each process's
    # are in its summary-PID.json).
    files = sum(len(m.get("files", [])) for m, _ in processes)
    print(f"\ntorchwrapper: {files} record file(s) in {out_dir}, from {len(processes)} processes "
          f"(this one and its children)", file=sys.stderr)
    merged: Dict[str, Dict[str, int]] = {}
    for _, apis in processes:
        for a in apis:
            m = merged.setdefault(a["api"], {"calls": 0, "total_ns": 0, "self_ns": 0, "max_ns": 0, "procs": 0})
            m["calls"] += a["calls"]
            m["total_ns"] += a["total_ns"]
            m["self_ns"] += a["self_ns"]
            m["max_ns"] = max(m["max_ns"], a["max_ns"])
            m["procs"] += 1
    if not merged:
        return
    rows = sorted(merged.items(), key=lambda item: -item[1]["total_ns"])[:top]
    names, width = _fit_names([api for api, _ in rows])
    print(f"{'API':{width}} {'calls':>9} {'total ms':>10} {'self ms':>10} {'mean us':>9} {'max us':>9} {'procs':>5}",
          file=sys.stderr)
    for name, (api, m) in zip(names, rows):
        print(f"{name:{width}} {m['calls']:9d} {m['total_ns'] / 1e6:10.2f} {m['self_ns'] / 1e6:10.2f} "
              f"{m['total_ns'] / m['calls'] / 1e3:9.1f} {m['max_ns'] / 1e3:9.1f} {m['procs']:5d}", file=sys.stderr)
    _print_own_cost(processes)
    _print_findings(out_dir)


def _print_own_cost(processes: List[Tuple[Dict[str, Any], List[Dict[str, Any]]]]) -> None:
    """What profiling cost the program, as the run's manifests say it: tw-report's line (one formatter)."""
    from . import _core

    line = _core.own_cost_text([json.dumps(m) for m, _ in processes])
    if line:
        print(line, file=sys.stderr)


def _print_findings(out_dir: str) -> None:
    """The findings' summary after the table (tw-report --findings has them all)."""
    from ._findings import summary_text

    found = summary_text(out_dir)
    if found:
        print("\n" + found, end="", file=sys.stderr)


def run(argv: List[str]) -> None:
    options = _parse_run(argv)
    from ._api import TorchWrapper  # after argument errors, so that usage errors stay cheap
    from ._config import RUN_DEFAULTS, command_line, for_children, load_config

    try:
        # run's own defaults below every source (the complete config then wins over them all again)
        wrapper = TorchWrapper(load_config(command_line(options.config, options.set, options.out_dir),
                                           defaults=RUN_DEFAULTS))
    except (ValueError, OSError) as error:
        raise SystemExit(f"torchwrapper: {error}")
    if options.module is not None:
        sys.argv = [options.module] + options.program
    else:
        script = options.program[0]
        sys.argv = list(options.program)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
    from . import _autostart

    # Started with $TORCHWRAPPER_AUTOSTART already set (under another `run`): this command's own
    # configuration wins, and the process is profiled once.
    _autostart.disarm()
    if _autostart._wrapper is not None:
        _autostart._wrapper.stop()
    import torch  # noqa: F401  (profiling wraps torch: import it before the program runs)

    # The job's processes (this one, its ranks) name it in their on-demand control files, so that
    # `python -m torchwrapper capture PID_OF_RUN` reaches them all.
    os.environ.setdefault("TORCHWRAPPER_RUN_PID", str(os.getpid()))
    wrapper.start()
    # The program's child processes (multiprocessing spawn and forkserver, DataLoader workers,
    # torchrun workers) start profiling through the auto-start hook, into the same out_dir; forked
    # children need no variable: they keep this session.
    os.environ[_autostart.ENV] = for_children(wrapper.config)
    try:
        if options.module is not None:
            runpy.run_module(options.module, run_name="__main__", alter_sys=True)
        else:
            _run_script(sys.argv[0])
    except SystemExit:
        _finish(wrapper, options)
        raise
    except BaseException as error:  # reported as the plain run would: the program's frames only
        _finish(wrapper, options)
        tb = error.__traceback__
        while tb is not None and (tb.tb_frame.f_code.co_filename == _THIS_FILE
                                  or "runpy" in tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
        sys.excepthook(type(error), error.with_traceback(tb), tb)
        if isinstance(error, KeyboardInterrupt):  # exit as Python does after Ctrl-C
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        raise SystemExit(1)
    _finish(wrapper, options)


_THIS_FILE = run.__code__.co_filename


def _run_script(path: str) -> None:
    """Runs a script as `python path` does: __main__ with __file__ absolute, sys.argv[0] as given."""
    import builtins
    import types

    absolute = os.path.abspath(path)
    with open(absolute, "rb") as f:
        code = compile(f.read(), absolute, "exec")
    main = types.ModuleType("__main__")
    main.__file__ = absolute
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _finish(wrapper: Any, options: argparse.Namespace) -> None:
    """Flushes the records before the program's exit is reported, then prints the report."""
    wrapper.stop()
    if not options.no_report:
        _report(wrapper, options.top)


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        raise SystemExit(0 if argv else 2)
    command, rest = argv[0], argv[1:]
    if command == "report":
        raise SystemExit(report(rest))
    if command == "capture":
        from ._capture import capture
        raise SystemExit(capture(rest))
    if command != "run":
        from ._capture import USAGE as CAPTURE_USAGE
        raise SystemExit(f"torchwrapper: unknown command {command!r} (accepted: run, report, capture)\n"
                         f"usage: {USAGE}\n       {REPORT_USAGE}\n       {CAPTURE_USAGE}")
    run(rest)


REPORT_USAGE = "python -m torchwrapper report [tw-report options] OUT_DIR|FILE... (see --help)"


def report(argv: List[str]) -> int:
    """python -m torchwrapper report ...: the same C code as the tw-report program."""
    from . import _core

    sys.stdout.flush()  # C writes to the same file descriptors: keep the order
    sys.stderr.flush()
    return _core.report(["python -m torchwrapper report"] + list(argv))


if __name__ == "__main__":
    main()
