# SPDX-License-Identifier: MIT
"""torchwrapper: a per-API performance profiler for PyTorch programs, with its hot path in C.

``profile()`` wraps every callable under torch, records every call, and restores torch exactly.
Underneath: the C wrapper type (``wrap``), recording sessions (``Session``), discovery of what to wrap
(``discover``) and exact installation and restoration of wrappers (``Patcher``).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

from . import _core
from ._core import MethodWrapper, Session, Wrapper, wrap
from ._api import TorchWrapper, getAPIName, getAttributes
from ._config import load_config
from ._flops import flops_table
from ._memory_table import memory_table
from ._files import STATS_COLUMNS, UPDATES_COLUMNS, Record, load, load_modules, load_sites, load_stats, load_updates, records
from ._discover import DEFAULT_EXCLUDE, SKIP_ATTRIBUTES, SKIP_MODULES, Plan, discover, resolve_exclude
from ._patch import Patcher, resolve
from ._schema import schema
from ._engines import sql
from ._profile import Profile, profile
from ._tensor_stats import BUILTIN_METRICS
from ._tree import call_tree
from ._diff import DIFF_COLUMNS, diff
from ._findings import findings, step_anatomy
from ._ranks import RANKS_COLUMNS, ranks

__version__ = _core.version


def step() -> int:
    """Ends the current step of the session recording now and returns the number of the step that
    begins (steps count from 0); -1 when no session records. After the first call, only these
    calls end steps (not optimizer steps): see ``Profile.step()`` and the config key ``schedule``."""
    session = _core.active_session()
    return session.step() if session is not None else -1


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


@contextmanager
def region(name: str) -> Iterator[None]:
    """``with torchwrapper.region("data loading"): ...``: a record named ``name`` for the block, with
    the torch calls made inside it as its children (its self time is what they leave), on this
    thread, while a session records; nothing otherwise. Regions nest with calls and each other."""
    began = _core.range_begin(name)
    try:
        yield
    finally:
        if began:
            _core.range_end()


def load_ipython_extension(ipython) -> None:
    """``%load_ext torchwrapper``: the ``%%torchwrapper`` cell magic and ``%torchwrapper`` line magic."""
    from .integrations.jupyter import load

    load(ipython)


__all__ = ["BUILTIN_METRICS", "DIFF_COLUMNS", "RANKS_COLUMNS", "STATS_COLUMNS", "UPDATES_COLUMNS", "call_tree", "diff", "findings", "flops_table", "step_anatomy", "memory_table", "load_modules",
           "load_stats", "load_sites", "load_updates", "DEFAULT_EXCLUDE", "MethodWrapper", "Patcher", "Plan", "Profile",
           "Record", "SKIP_ATTRIBUTES",
           "SKIP_MODULES", "Session", "TorchWrapper", "Wrapper", "discover", "getAPIName", "getAttributes",
           "load", "load_config", "profile", "profile_apis", "ranks", "records", "region", "resolve", "resolve_exclude", "schema", "sql", "step", "wrap",
           "__version__"]
