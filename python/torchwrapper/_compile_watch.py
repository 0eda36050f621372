# SPDX-License-Identifier: MIT
"""Each compilation of torch.compile, as a record ("torch._dynamo (compilation)") at the program's
line that called the compiled function: what tw-report --findings counts as (re)compilations. The
calls torch.compile makes while it captures graphs and compiles are not the user's: not recorded (the
thread is paused inside the range, which is all compilation time).

torch._dynamo's compile callbacks (torch._dynamo.callback.callback_handler) begin and end the range. torch._dynamo is imported by torch.compile's first call, not by torch (its
import takes seconds): when it is not imported at start, an import hook registers the callbacks the
moment it is."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any, Optional

from . import _core

RANGE = "torch._dynamo (compilation)"
_CALLBACKS = "torch._dynamo.callback"


def _on_start(args: Any = None) -> None:
    session = _core.active_session()
    if session is not None:
        _core.range_begin(RANGE)
        session.pause_thread()


def _on_end(args: Any = None) -> None:
    session = _core.active_session()
    if session is not None:
        session.resume_thread()
        _core.range_end()


class _ImportHook(importlib.abc.MetaPathFinder):
    """Registers the callbacks once torch._dynamo.callback has been executed."""

    def __init__(self, watch: "CompileWatch") -> None:
        self.watch = watch

    def find_spec(self, name: str, path: Any, target: Any = None) -> Optional[Any]:
        if name != _CALLBACKS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, watch = spec.loader, self.watch

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                watch.register(module)

        spec.loader = _Loader()
        return spec


class CompileWatch:
    def __init__(self) -> None:
        self.handler: Any = None
        self.hook: Optional[_ImportHook] = None

    def start(self) -> None:
        module = sys.modules.get(_CALLBACKS)
        if module is not None:
            self.register(module)
        else:
            self.hook = _ImportHook(self)
            sys.meta_path.insert(0, self.hook)

    def register(self, module: Any) -> None:
        self._unhook()
        handler = getattr(module, "callback_handler", None)
        if handler is None or self.handler is not None:
            return
        try:
            handler.register_start_callback(_on_start)
            handler.register_end_callback(_on_end)
            self.handler = handler
        except Exception:  # noqa: BLE001 - another torch: compilations are then not recorded
            pass

    def stop(self) -> None:
        self._unhook()
        handler, self.handler = self.handler, None
        if handler is not None:
            for remove, callback in ((handler.remove_start_callback, _on_start),
                                     (handler.remove_end_callback, _on_end)):
                try:
                    remove(callback)
                except (ValueError, KeyError):  # torch._dynamo.reset() cleared the handler meanwhile
                    pass

    def _unhook(self) -> None:
        if self.hook is not None:
            try:
                sys.meta_path.remove(self.hook)
            except ValueError:
                pass
            self.hook = None
