# SPDX-License-Identifier: MIT
"""python -m torchwrapper run [options] (script.py | -m module) [args...]
python -m torchwrapper report [options] OUT_DIR|FILE...   (tw-report; --help lists its options)

Runs an unmodified program under the profiler, as `python script.py args` would run it (sys.argv,
__main__, sys.path[0], standard streams and exit code are the plain run's), then prints where the
files are and the top APIs by total time on standard error.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import sys
from typing import Any, Dict, List, Optional

USAGE = "python -m torchwrapper run [--config FILE] [--set KEY=VALUE ...] [-o OUT_DIR] [--no-report] " \
        "[--] (script.py | -m module) [args...]"


def _parse_run(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m torchwrapper run", usage=USAGE,
                                     description="Profile an unmodified program with torchwrapper.")
    parser.add_argument("--config", metavar="FILE", help="a JSON configuration file")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="a configuration value (repeatable), e.g. --set format=csv --set file_max_size=10MB")
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


def _config(options: argparse.Namespace) -> Dict[str, Any]:
    config: Dict[str, Any] = {}
    if options.config:
        with open(options.config) as f:
            config.update(json.load(f))
    for item in options.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"torchwrapper: --set {item!r}: expected KEY=VALUE")
        try:
            config[key] = json.loads(value)   # numbers, lists, null
        except ValueError:
            config[key] = value               # plain text: "csv", "10MB"
    if options.out_dir:
        config["out_dir"] = options.out_dir
    return config


def _report(wrapper: Any, top: int) -> None:
    out_dir = os.path.abspath(wrapper.config["out_dir"])
    files = wrapper.files
    print(f"\ntorchwrapper: {len(files)} record file(s) in {out_dir}", file=sys.stderr)
    try:
        with open(os.path.join(out_dir, "summary.json")) as f:
            apis = json.load(f)["apis"]
    except (OSError, ValueError, KeyError):
        return
    if not apis:
        return
    print(f"{'API':44} {'calls':>9} {'total ms':>10} {'self ms':>10} {'p50 us':>9} {'p99 us':>9}", file=sys.stderr)
    for a in apis[:top]:
        print(f"{a['api'][:44]:44} {a['calls']:9d} {a['total_ns'] / 1e6:10.2f} {a['self_ns'] / 1e6:10.2f} "
              f"{a['p50_ns'] / 1e3:9.1f} {a['p99_ns'] / 1e3:9.1f}", file=sys.stderr)


def run(argv: List[str]) -> None:
    options = _parse_run(argv)
    from ._api import TorchWrapper  # after argument errors, so that usage errors stay cheap

    try:
        wrapper = TorchWrapper(_config(options))
    except (ValueError, OSError) as error:
        raise SystemExit(f"torchwrapper: {error}")
    if options.module is not None:
        sys.argv = [options.module] + options.program
    else:
        script = options.program[0]
        sys.argv = list(options.program)
        sys.path[0] = os.path.dirname(os.path.abspath(script))
    import torch  # noqa: F401  (profiling wraps torch: import it before the program runs)

    wrapper.start()
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
    if command != "run":
        raise SystemExit(f"torchwrapper: unknown command {command!r} (accepted: run, report)\nusage: {USAGE}\n"
                         f"       {REPORT_USAGE}")
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
