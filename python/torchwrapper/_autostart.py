# SPDX-License-Identifier: MIT
"""The auto-start hook: profiles a process started with $TORCHWRAPPER_AUTOSTART set.

``torchwrapper-autostart.pth``, installed into site-packages beside the package, is one line that
the interpreter runs at every start; only when the variable is set does it import this module and
call ``arm()``, so an ordinary ``python`` pays one dictionary lookup and imports neither torch nor
torchwrapper.
``python -m torchwrapper run`` sets the variable for the program's children: multiprocessing
children (spawn, forkserver), DataLoader workers, torchrun workers, any Python subprocess.

The value: the configuration as a JSON object (``{"out_dir": "/abs/out", "format": "csv"}``), the
path of a JSON configuration file, or ``1`` (the defaults and ``$TORCHWRAPPER_<KEY>`` variables).

Profiling starts when torch has been imported, not at interpreter start: a child that never
imports torch (multiprocessing's resource tracker, a helper script) costs nothing more and writes
no files, and one that does is profiled from its first torch call. Each process writes its own
files (manifest-PID.json, and the rank in the record file names where $RANK is set) and flushes
them at its exit: at interpreter exit and on SIGTERM like any session, and, in children that
multiprocessing ends with os._exit (fork and forkserver), from multiprocessing's own finalizers
(``_ExitGuard`` in _profile.py).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

from ._config import AUTOSTART_ENV as ENV
from ._config import from_autostart

_watcher: Optional["_TorchWatcher"] = None
_wrapper: Any = None  # the TorchWrapper this hook started, kept until the process ends


def start() -> None:
    """Starts profiling this process with the configuration in $TORCHWRAPPER_AUTOSTART. Never
    raises: a process the profiler cannot follow runs unprofiled, with one line on stderr."""
    global _wrapper
    if _wrapper is not None or not os.environ.get(ENV):
        return
    try:
        from . import _core
        from ._api import TorchWrapper

        if _core.active_session() is not None:  # the program profiles itself: leave it alone
            return
        wrapper = TorchWrapper(from_autostart(os.environ[ENV]))
        wrapper.start()
        _wrapper = wrapper
    except Exception as error:  # the program must run even when the profiler cannot
        print(f"torchwrapper: not profiling process {os.getpid()}: {error}", file=sys.stderr)


class _StartAfterLoader:
    """Runs torch's own loader, then starts profiling: torch is then completely imported."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        # torch sees its own loader (importlib.resources and the like ask it), never this one.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        start()


class _TorchWatcher:
    """A meta path finder that answers for nothing: when torch is first imported, it finds torch
    through the finders after it and hands the import a loader that starts profiling after it."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        disarm()  # once, and never in the way of the nested lookups below
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _StartAfterLoader(spec.loader)
        return spec


def arm() -> None:
    """Profiles this process from the moment torch is imported (at once if it already is)."""
    global _watcher
    if not os.environ.get(ENV) or _watcher is not None or _wrapper is not None:
        return
    if "torch" in sys.modules:
        start()
        return
    _watcher = _TorchWatcher()
    sys.meta_path.insert(0, _watcher)


def disarm() -> None:
    """Forgets the hook (``python -m torchwrapper run`` starts its own session instead)."""
    global _watcher
    if _watcher is not None:
        try:
            sys.meta_path.remove(_watcher)
        except ValueError:
            pass
        _watcher = None
