# SPDX-License-Identifier: MIT
"""Config memory beside torch.profiler: both take the allocator's reports from the same slot of a
thread's c10 debug info (PROFILER_STATE), and torch's Kineto profiler refuses to start on a thread
where anything holds it ("Profiler is already enabled on this thread"). While a session measures
memory, torch's enable/disable functions are wrapped: when torch.profiler (or emit_nvtx, or
autograd.profiler.profile) starts on a thread where our reporter is, ours steps aside, with one
warning, and comes back when it stops; the user's profiler runs as it would without us. The calls
made meanwhile on that thread carry no memory figures."""
import sys
import threading
import warnings
from typing import Any, Callable, List, Tuple

from . import _core

# (module name, attribute) of torch's profiler switches, as torch.autograd.profiler imported them
_ENABLE = ("torch.autograd.profiler", "_enable_profiler")
_DISABLE = ("torch.autograd.profiler", "_disable_profiler")


class ProfilerGuard:
    """Wraps torch's profiler switches while memory is measured; restore() puts them back."""

    def __init__(self) -> None:
        self._installed: List[Tuple[Any, str, Callable, Callable]] = []
        self._warned = threading.Event()

    def install(self) -> None:
        module = sys.modules.get(_ENABLE[0])
        if module is None:
            import torch.autograd.profiler as module  # noqa: F811 (imported by torch itself)
        enable, disable = getattr(module, _ENABLE[1], None), getattr(module, _DISABLE[1], None)
        if enable is None or disable is None:
            return
        guard = self

        def _enable_profiler(*args: Any, **kwargs: Any) -> Any:
            stepped = _core.memory_step_aside()
            if stepped and not guard._warned.is_set():
                guard._warned.set()
                warnings.warn("torchwrapper: config memory: torch's profiler started on this thread and takes the "
                              "allocator's reports: calls made here while it runs carry no memory figures "
                              "(measuring resumes when it stops)", RuntimeWarning, stacklevel=2)
            try:
                return enable(*args, **kwargs)
            except BaseException:
                if stepped:
                    _core.memory_resume()
                raise

        def _disable_profiler(*args: Any, **kwargs: Any) -> Any:
            try:
                return disable(*args, **kwargs)
            finally:
                _core.memory_resume()

        for name, original, wrapper in ((_ENABLE[1], enable, _enable_profiler),
                                        (_DISABLE[1], disable, _disable_profiler)):
            wrapper.__wrapped__ = original  # type: ignore[attr-defined]
            setattr(module, name, wrapper)
            self._installed.append((module, name, original, wrapper))

    def restore(self) -> None:
        """Puts the originals back, unless something else replaced our wrappers meanwhile."""
        for module, name, original, wrapper in reversed(self._installed):
            if getattr(module, name, None) is wrapper:
                setattr(module, name, original)
        self._installed.clear()
