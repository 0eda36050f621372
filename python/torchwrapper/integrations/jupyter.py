# SPDX-License-Identifier: MIT
"""torchwrapper in Jupyter and IPython: ``%load_ext torchwrapper``, then

    %%torchwrapper [-o OUT_DIR] [--set KEY=VALUE ...] [--top N]
    train(model)                     # the cell, profiled; the report shows under it

    %torchwrapper [options] model(x).sum().backward()     # one statement

The report is ``tw-report``'s: the per-API table as text (a terminal, ``print``), and in a notebook
the one-file HTML page of ``tw-report --html`` (sortable table, flame graph, steps; no network),
framed under the cell. A cell that raises still shows what was recorded before the error, which is
then raised as usual; torch is restored either way.
"""
from __future__ import annotations

import argparse
import shlex
import tempfile
from typing import Any, Optional

from .. import _config
from .._profile import profile
from .._tw_report import TOP, Report


def _parser(line_magic: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="%torchwrapper" if line_magic else "%%torchwrapper", add_help=False,
                                     exit_on_error=False)
    parser.add_argument("-o", "--out-dir", dest="out_dir", default=None)
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[])
    parser.add_argument("--config", default=None)
    parser.add_argument("--top", type=int, default=TOP)
    if line_magic:
        parser.add_argument("statement", nargs=argparse.REMAINDER)
    return parser


def _options(line: str, line_magic: bool) -> argparse.Namespace:
    try:
        options = _parser(line_magic).parse_args(shlex.split(line))
    except (argparse.ArgumentError, SystemExit) as error:
        raise ValueError(f"{'%' if line_magic else '%%'}torchwrapper {line!r}: {error}; accepted: -o OUT_DIR, "
                         f"--set KEY=VALUE, --config FILE, --top N") from None
    if options.top < 1:
        raise ValueError(f"--top {options.top} is not accepted: give a whole number >= 1")
    options.config_values = _config.command_line(options.config, options.set, options.out_dir)
    return options


def load(ipython: Any) -> None:
    from IPython.core.magic import register_line_cell_magic
    from IPython.display import display

    counter = [0]

    @register_line_cell_magic
    def torchwrapper(line: str, cell: Optional[str] = None) -> None:
        options = _options(line, cell is None)
        code = cell if cell is not None else " ".join(options.statement)
        if not code.strip():
            raise ValueError("%torchwrapper needs a statement to profile: %torchwrapper [options] STATEMENT")
        counter[0] += 1
        config = dict(options.config_values)
        out_dir = config.pop("out_dir", None) or tempfile.mkdtemp(prefix="torchwrapper-")
        # lines numbered as the cell shows them (its first line is the %%torchwrapper magic's)
        compiled = compile(code if cell is None else "\n" + code, f"<cell {counter[0]}>", "exec")
        prof = profile(out_dir=out_dir, **config)   # a bad config raises here, before anything runs
        prof.start()
        try:
            exec(compiled, ipython.user_ns)
        finally:
            prof.stop()   # torch restored, also when the cell raised
            # and what ran before an error was recorded: shown, then IPython shows the error
            display(Report(out_dir, options.top))

    del torchwrapper
