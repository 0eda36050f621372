# SPDX-License-Identifier: MIT
"""Profiling everything under torch: discovery, installation, torch's own registries, restoration."""
from __future__ import annotations

import gc
import sys
import time
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _core
from ._discover import Plan, discover
from ._patch import Patcher


_WRAPPER_TYPES = (_core.Wrapper, _core.MethodWrapper)

# Discovery plans by (modules, include, exclude), with the set of modules imported when each was
# made. A later start reuses a plan when no module was imported since; the install then checks
# every place still holds what discovery saw, and plans afresh when one does not.
_plan_cache: Dict[tuple, Tuple[frozenset, Plan]] = {}


class _TorchRegistries:
    """Keeps torch's identity-keyed registries working while wrappers stand in for the originals.

    TorchScript maps builtins to ATen ops by ``id(fn)`` and boolean-dispatched functions by the
    function object; Dynamo reports compilation start and end. Each wrapper is registered next to
    its original while profiling, and removed at stop.
    """

    def __init__(self) -> None:
        self.builtin_ids: List[int] = []
        self.dispatch_keys: List[Any] = []
        self.dynamo_callbacks: Optional[Tuple[Any, Any, Any]] = None

    def prepare(self) -> None:
        """Before installing: build torch's lazily built tables from the originals."""
        builtins = sys.modules.get("torch.jit._builtins")
        if builtins is not None:
            builtins._get_builtin_table()
        trace_rules = sys.modules.get("torch._dynamo.trace_rules")
        if trace_rules is not None:
            trace_rules.get_torch_obj_rule_map()

    def register(self, patcher: Patcher) -> None:
        builtins = sys.modules.get("torch.jit._builtins")
        jit_internal = sys.modules.get("torch._jit_internal")
        table = builtins._get_builtin_table() if builtins is not None else {}
        dispatched = getattr(jit_internal, "boolean_dispatched", None)
        for wrapper in patcher.wrappers.values():
            op = table.get(id(wrapper.__wrapped__))
            if op is not None and id(wrapper) not in table:
                table[id(wrapper)] = op
                self.builtin_ids.append(id(wrapper))
        for original, entry in list(dispatched.items()) if dispatched is not None else ():
            wrapper = patcher.wrappers.get(id(original))
            if wrapper is not None:
                dispatched[wrapper] = entry
                self.dispatch_keys.append(wrapper)
        trace_rules = sys.modules.get("torch._dynamo.trace_rules")
        if trace_rules is not None:
            # torch.compile decides how to trace a callable from a map keyed by the callable: the
            # wrapper gets its original's rule (e.g. "put it in the graph" for torch.add).
            rules = trace_rules.get_torch_obj_rule_map()
            for wrapper in patcher.wrappers.values():
                rule = rules.get(wrapper.__wrapped__)
                if rule is not None:
                    rules[wrapper] = rule
        callback = sys.modules.get("torch._dynamo.callback")
        if callback is not None:
            # Calls that torch.compile makes while it traces and compiles are not the user's.
            handler = callback.callback_handler
            start, end = (lambda _args=None: _pause()), (lambda _args=None: _resume())
            handler.register_start_callback(start)
            handler.register_end_callback(end)
            self.dynamo_callbacks = (handler, start, end)

    def unregister(self) -> None:
        builtins = sys.modules.get("torch.jit._builtins")
        if builtins is not None and builtins._builtin_table is not None:
            for key in self.builtin_ids:
                builtins._builtin_table.pop(key, None)
        jit_internal = sys.modules.get("torch._jit_internal")
        dispatched = getattr(jit_internal, "boolean_dispatched", None)
        for key in self.dispatch_keys:
            if dispatched is not None:
                dispatched.pop(key, None)
        trace_rules = sys.modules.get("torch._dynamo.trace_rules")
        if trace_rules is not None:
            # Also repairs a map that torch.compile built while profiling (from names, which then
            # resolved to wrappers): each wrapper key gives way to its original.
            rules = trace_rules.get_torch_obj_rule_map()
            for key in [k for k in rules if type(k) in _WRAPPER_TYPES]:
                rules.setdefault(key.__wrapped__, rules.pop(key))
            trace_rules.get_tensor_method.cache_clear()
        if self.dynamo_callbacks is not None:
            handler, start, end = self.dynamo_callbacks
            for remove, callback in ((handler.remove_start_callback, start), (handler.remove_end_callback, end)):
                try:
                    remove(callback)
                except ValueError:  # torch._dynamo.reset() cleared the handler meanwhile
                    pass
        self.builtin_ids.clear()
        self.dispatch_keys.clear()
        self.dynamo_callbacks = None


def _pause() -> None:
    session = _core.active_session()
    if session is not None:
        session.pause_thread()


def _resume() -> None:
    session = _core.active_session()
    if session is not None:
        session.resume_thread()


class Profile:
    """Wraps every callable under the given modules, records calls, and restores everything.

    ``modules``: root module names (default ``["torch"]``); ``include`` and ``exclude``: API-name
    globs (``exclude`` defaults to ``DEFAULT_EXCLUDE``; ``include`` wins over it).
    """

    def __init__(self, modules: Sequence[str] = ("torch",), include: Sequence[str] = (),
                 exclude: Optional[Sequence[str]] = None) -> None:
        self.modules = list(modules)
        self.include = list(include)
        self.exclude = exclude
        self.session = _core.Session()
        self.plan: Optional[Plan] = None
        self.patcher = Patcher()
        self._registries = _TorchRegistries()
        self._modules_before: set = set()
        self.timings: Dict[str, float] = {}

    def start(self) -> "Profile":
        import torch  # noqa: F401  (discovery needs torch imported)

        if _core.active_session() is not None:
            raise RuntimeError("another profiling session is already recording; stop it first")
        t0 = time.perf_counter()
        key = (tuple(self.modules), tuple(self.include), None if self.exclude is None else tuple(self.exclude))
        imported = frozenset(sys.modules)
        cached = _plan_cache.get(key)
        from_cache = cached is not None and cached[0] == imported
        self.plan = cached[1] if from_cache else self._discover(key, imported)
        t1 = time.perf_counter()
        self._registries.prepare()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if not self.patcher.install_plan(self.plan) and from_cache:
                # Something changed since that plan was made (torch replaced an attribute):
                # undo, and plan afresh.
                self.patcher.restore()
                self.patcher = Patcher()
                self.plan = self._discover(key, imported)
                self.patcher.install_plan(self.plan)
            self._registries.register(self.patcher)
        except BaseException:
            self.patcher.restore()
            self._registries.unregister()
            raise
        finally:
            if gc_was_enabled:
                gc.enable()
        self._modules_before = set(sys.modules)
        t2 = time.perf_counter()
        self.timings.update(discover_s=t1 - t0, install_s=t2 - t1, plan_reused=from_cache)
        self.session.start()
        return self

    def _discover(self, key: tuple, imported: frozenset) -> Plan:
        plan = discover(self.modules, self.include, self.exclude)
        if len(_plan_cache) >= 8:
            _plan_cache.clear()
        _plan_cache[key] = (imported, plan)
        return plan

    def stop(self) -> None:
        self.session.stop()
        t0 = time.perf_counter()
        self.patcher.restore()
        self._registries.unregister()
        self._unwrap_new_modules()
        self.timings["restore_s"] = time.perf_counter() - t0

    def _unwrap_new_modules(self) -> None:
        """Modules imported while profiling copied wrappers (``from torch.x import f``): put the
        originals there, so that nothing of the session stays behind."""
        for name in set(sys.modules) - self._modules_before:
            module = sys.modules.get(name)
            if not isinstance(module, types.ModuleType):
                continue
            # The dict itself: config modules (torch._dynamo.config) validate setattr.
            namespace = vars(module)
            for attr, value in list(namespace.items()):
                if type(value) in _WRAPPER_TYPES:
                    namespace[attr] = value.__wrapped__

    def __enter__(self) -> "Profile":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def records(self) -> list:
        from . import records

        return records(self.session)

    def stats(self) -> Dict[str, Any]:
        out = dict(self.session.stats())
        out.update(self.plan.counts() if self.plan else {})
        out.update(self.timings)
        return out

    @property
    def wrapped(self) -> List[str]:
        """API names of everything wrapped."""
        return [t.name for t in self.plan.targets] if self.plan else []

    @property
    def skipped(self) -> List[Tuple[str, str]]:
        """(name, reason) of what was deliberately not wrapped."""
        return list(self.plan.skipped) if self.plan else []

    @property
    def excluded(self) -> List[Tuple[str, str]]:
        """(name, matching exclude glob) of what the exclude list left unwrapped."""
        return list(self.plan.excluded) if self.plan else []


def profile(modules: Sequence[str] = ("torch",), include: Sequence[str] = (),
            exclude: Optional[Sequence[str]] = None) -> Profile:
    """``with torchwrapper.profile() as prof: ...`` then ``prof.records()``."""
    return Profile(modules, include, exclude)


__all__ = ["Profile", "profile"]
