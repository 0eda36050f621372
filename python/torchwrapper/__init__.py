# SPDX-License-Identifier: MIT
"""torchwrapper: a per-API performance profiler for PyTorch programs, with its hot path in C.

This is the foundation layer: the C wrapper type (``wrap``), recording sessions (``Session``) and
exact installation and restoration of wrappers (``Patcher``). The high-level ``TorchWrapper`` API
builds on these.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterable, Iterator, List, NamedTuple

from . import _core
from ._core import MethodWrapper, Session, Wrapper, wrap
from ._patch import Patcher, resolve

__version__ = _core.version


class Record(NamedTuple):
    """One call, as read back from a session (times in nanoseconds)."""

    call_id: int
    api: str
    start_ns: int
    cost_ns: int
    self_ns: int
    gpu_ns: int
    tid: int
    depth: int
    parent_id: int
    error: bool


def records(session: Session) -> List[Record]:
    """The records of a stopped session as ``Record`` tuples."""
    return [Record(*row) for row in session.records()]


@contextmanager
def profile_apis(paths: Iterable[str]) -> Iterator[Session]:
    """Wraps the callables at the given dotted paths, records calls inside the block, restores them.

    >>> with profile_apis(["torch.add"]) as session:
    ...     torch.add(a, b)
    >>> records(session)
    """
    patcher = Patcher()
    session = Session()
    try:
        for path in paths:
            owner, attr, _ = resolve(path)
            patcher.install(owner, attr, path)
        session.start()
        try:
            yield session
        finally:
            session.stop()
    finally:
        patcher.restore()


__all__ = ["MethodWrapper", "Patcher", "Record", "Session", "Wrapper", "profile_apis", "records",
           "resolve", "wrap", "__version__"]
