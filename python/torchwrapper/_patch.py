# SPDX-License-Identifier: MIT
"""Installing wrappers into namespaces and restoring them exactly.

A Patcher remembers, for every place it patched, what was there before: the exact object found in the
owner's ``__dict__`` (a ``staticmethod`` object stays that object), or that the attribute was only
inherited. ``restore()`` puts back the identical object, or deletes the attribute again so that an
inherited C slot (``Tensor.__add__`` from ``torch._C.TensorBase``) is what Python finds once more. A
place that someone else replaced after we patched it is left alone and reported.
"""
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from . import _core

if TYPE_CHECKING:
    from ._discover import Plan

from ._discover import MISSING as _MISSING

WRAPPER_TYPES = (_core.Wrapper, _core.MethodWrapper)

# The forwards of module classes defined outside torch (a model's own blocks), wrapped while a model
# of theirs runs (Patcher.install_forward): one wrapper per (function, kinds) for the process, like
# the plan's wrappers, so that torch.compile's guards see the same object at every profile.
_FORWARD_WRAPPERS: Dict[Tuple[int, int], Tuple[Any, Any]] = {}

# Patchers whose wrappers are installed now, and a counter of installs and restores: getAPIName's
# name index is rebuilt when it changes (discovery cannot see an original behind its wrapper).
_installed: List["Patcher"] = []
_generation = 0


def generation() -> int:
    """Changes whenever wrappers are installed or restored."""
    return _generation


def installed_originals() -> List[Tuple[Any, str]]:
    """(original, API name) of every wrapper installed now."""
    return [(w.__wrapped__, w.api_name) for p in _installed for w in p.wrappers.values()]


def _changed(patcher: "Patcher", installed: bool) -> None:
    global _generation
    _generation += 1
    if installed and patcher not in _installed:
        _installed.append(patcher)
    elif not installed and patcher in _installed:
        _installed.remove(patcher)


class Placement(NamedTuple):
    owner: Any              # a module or a class
    attr: str
    before: Any             # the object in owner.__dict__ before patching, or _MISSING if inherited
    installed: Any          # the object we put there


class Patcher:
    """Installs profiling wrappers; one shared wrapper per distinct callable."""

    def __init__(self) -> None:
        self.placements: List[Placement] = []
        self.wrappers: Dict[int, Any] = {}   # id(original) -> wrapper
        self._originals: List[Any] = []      # keeps the ids above valid
        self.replaced_by_others: List[Tuple[Any, str]] = []
        self.failed: List[Tuple[Any, str, str]] = []
        self.plan_wrappers: Optional[List[Any]] = None  # install_plan's wrappers, in the plan's target order

    def wrapper_for(self, original: Callable, api_name: str, bind: Optional[bool] = None) -> Any:
        wrapper = self.wrappers.get(id(original))
        if wrapper is None:
            wrapper = _core.wrap(original, api_name, bind=bind)
            self.wrappers[id(original)] = wrapper
            self._originals.append(original)
        return wrapper

    def installable(self, raw: Any, api_name: str) -> Any:
        """What stands in for raw (a class or module __dict__ value): its wrapper, re-wrapped in
        staticmethod or classmethod when raw was one."""
        if isinstance(raw, staticmethod):
            return staticmethod(self.wrapper_for(raw.__func__, api_name, bind=False))
        if isinstance(raw, classmethod):
            return classmethod(self.wrapper_for(raw.__func__, api_name, bind=True))
        return self.wrapper_for(raw, api_name)

    def install(self, owner: Any, attr: str, api_name: str) -> Any:
        """Replaces ``owner.attr`` by a wrapper recorded as api_name; returns what was installed."""
        before = owner.__dict__.get(attr, _MISSING)  # the raw value: no descriptor invoked
        raw = before
        if raw is _MISSING and isinstance(owner, type):
            # Inherited: what the class attribute lookup finds in a base's __dict__.
            raw = next((base.__dict__[attr] for base in owner.__mro__[1:] if attr in base.__dict__), _MISSING)
        if raw is _MISSING:
            raise AttributeError(f"{owner!r} has no attribute {attr!r}")
        installed = self.installable(raw, api_name)
        setattr(owner, attr, installed)
        self.placements.append(Placement(owner, attr, before, installed))
        _changed(self, True)
        return installed

    def install_value(self, owner: Any, attr: str, value: Any) -> None:
        """Sets ``owner.attr`` to value as it is (a hook of the profiler's own, not a wrapper);
        restore() puts back what owner's own __dict__ held, or deletes it."""
        before = owner.__dict__.get(attr, _MISSING)
        setattr(owner, attr, value)
        self.placements.append(Placement(owner, attr, before, value))
        _changed(self, True)

    def install_forward(self, cls: type, kinds: int) -> bool:
        """Wraps ``cls.forward`` (a plain function in cls's own __dict__: a module class defined
        outside torch) as the API ``module.Qualname.forward`` with the watch kinds, so that its
        calls are records of their own: the frame that every call inside the module nests under,
        with the instance's path. False when there is nothing of that shape to wrap."""
        raw = cls.__dict__.get("forward")
        if not isinstance(raw, types.FunctionType) or getattr(raw, "_torchwrapper_forward", False):
            return False
        key = (id(raw), kinds)
        entry = _FORWARD_WRAPPERS.get(key)
        if entry is None or entry[0] is not raw:
            wrapper = _core.wrap(raw, f"{cls.__module__}.{cls.__qualname__}.forward", bind=True, kind=kinds)
            entry = _FORWARD_WRAPPERS[key] = (raw, _forward_shim(raw, wrapper))
        shim = entry[1]
        setattr(cls, "forward", shim)
        self.placements.append(Placement(cls, "forward", raw, shim))
        _changed(self, True)
        return True

    def install_plan(self, plan: "Plan", kinds: int = _core.KIND_MODULE_FORWARD) -> bool:
        """Installs one shared wrapper per target of a discovery plan at all of its places.

        kinds: the watch kinds (``_core.KIND_*``) to mark wrappers with (see the wrappers' watch_kind).
        Returns False when some place no longer held what discovery saw there (the plan is stale);
        everything is installed all the same, and restore() undoes it exactly.
        """
        if self.wrappers:   # wrappers made by install() before: share them (rare; the general loop)
            return self._install_plan_one_by_one(plan, kinds)
        prepared = _prepared(plan)
        # The per-start work, in bulk (a start is inside the user's code): ~4,000 wrappers in one C
        # call at the first start of the plan, then one C install loop over the places prepared
        # with the plan.
        made = prepared.wrappers.get(kinds)
        if made is None:
            wrappers = _shared_wrappers(prepared.specs, kinds)
            installed = list(wrappers)
            for index, kind in prepared.bound_kinds:
                installed[index] = staticmethod(wrappers[index]) if kind == "staticmethod" else classmethod(wrappers[index])
            made = prepared.wrappers[kinds] = (wrappers, installed)
        wrappers, installed = made
        self.plan_wrappers = wrappers
        self.wrappers.update(zip(prepared.ids, wrappers))
        self._originals.extend(prepared.originals)
        return self._install_items(prepared.places, installed)

    def _install_plan_one_by_one(self, plan: "Plan", kinds: int) -> bool:
        items = []
        for target, full_kind in zip(plan.targets, _prepared(plan).kinds):
            original = target.obj
            # a shared target gets its own wrapper, under the class's name: the original's entry
            # in self.wrappers stays the wrapper of its own name
            wrapper = None if target.shared else self.wrappers.get(id(original))
            if wrapper is None:
                wrapper = _core.wrap(original, target.name, bind=_BINDS.get(target.kind), kind=full_kind & kinds)
                self._originals.append(original)
                if not target.shared:
                    self.wrappers[id(original)] = wrapper
            if target.kind == "staticmethod":
                installed = staticmethod(wrapper)
            elif target.kind == "classmethod":
                installed = classmethod(wrapper)
            else:
                installed = wrapper
            items.extend((owner, attr, installed, raw) for owner, attr, raw in target.places)
        return self._install_items(items)

    def _install_items(self, items: List[tuple], installed: Optional[List[Any]] = None) -> bool:
        """Installs items: (owner, attr, new, expected), or with installed, (index, owner, attr,
        expected) standing for (owner, attr, installed[index], expected)."""
        if installed is None:
            placements, failures, stale = _core.install(items, _MISSING)
        else:
            placements, failures, stale = _core.install(items, _MISSING, installed)
        for index, message in failures:
            owner, attr = items[index][:2] if installed is None else items[index][1:3]
            self.failed.append((owner, attr, message))
        self.placements.extend(placements)  # (owner, attr, before, installed) tuples, as Placement
        _changed(self, True)
        return not stale

    def restore(self) -> None:
        """Undoes every install, newest first."""
        for index in _core.restore(self.placements, _MISSING):
            p = Placement(*self.placements[index])
            # Someone replaced our wrapper while we profiled. Torch does this itself: the first
            # construction of an optimizer class replaces cls.step by a functools.wraps hook
            # around whatever cls.step was, i.e. around our wrapper. Point such a hook at the
            # original, which gives exactly what torch would have built without us.
            self._rewire(p.owner.__dict__.get(p.attr), p.installed)
            self.replaced_by_others.append((p.owner, p.attr))
        self.placements.clear()
        _changed(self, False)

    def _rewire(self, value: Any, installed: Any) -> None:
        wrapper = installed.__func__ if isinstance(installed, (staticmethod, classmethod)) else installed
        if not isinstance(wrapper, WRAPPER_TYPES):
            return
        func = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if not isinstance(func, types.FunctionType) or getattr(func, "__wrapped__", None) is not wrapper:
            return
        original = wrapper.__wrapped__
        for cell in func.__closure__ or ():
            try:
                if cell.cell_contents is wrapper:
                    cell.cell_contents = original
            except ValueError:  # an empty cell
                pass
        func.__wrapped__ = original


def _forward_shim(original: Callable, wrapper: Any) -> Callable:
    """What a module class's forward is while profiling: a Python function, so that torch.compile
    (which inlines Python functions, and sees is_dynamo_compiling() as True) captures the original in its graph as
    if nothing were there, while an eager call goes through the recording wrapper. Its __wrapped__,
    name and signature are the original's (inspect.signature(model.forward), as the transformers
    Trainer reads it, sees the same parameters)."""
    import functools

    import torch

    compiling = torch.compiler.is_dynamo_compiling

    def forward(self, *args, **kwargs):
        if compiling():
            return original(self, *args, **kwargs)
        return wrapper(self, *args, **kwargs)

    functools.update_wrapper(forward, original)
    forward._torchwrapper_forward = True   # type: ignore[attr-defined]
    forward.api_name = wrapper.api_name    # type: ignore[attr-defined]  (as a wrapper's)
    return forward


# In-place operators: their first argument is the tensor they update.
_INPLACE_DUNDERS = frozenset("""__iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__ __imod__ __ipow__ __imatmul__
__iand__ __ior__ __ixor__ __ilshift__ __irshift__ __idiv__ __setitem__""".split())
# Calls around which tracked parameters are checked for updates made inside them by code that is not
# recorded (an optimizer's fused or foreach kernels, autograd's accumulation into .grad).
_BOUNDARY_NAMES = frozenset(["torch.autograd.backward"])


class _WatchKinds:
    """What the model watch may look at around a target's calls (``_core.KIND_*``): all the kinds that
    apply to it; a session masks them with the kinds it watches."""

    def __init__(self) -> None:
        import torch

        self.module = torch.nn.Module
        self.optimizer = torch.optim.Optimizer

    def __call__(self, target: Any) -> int:
        kind = 0
        for owner, attr, _raw in target.places:
            if attr == "forward":
                if isinstance(owner, type) and issubclass(owner, self.module):
                    kind |= _core.KIND_MODULE_FORWARD
            elif attr == "__call__":
                if owner is self.module:
                    kind |= _core.KIND_MODULE_CALL
            elif (attr[-1] == "_" and attr[-2:] != "__" and attr[0] != "_") or attr in _INPLACE_DUNDERS:
                kind |= _core.KIND_INPLACE
            elif attr in ("step", "zero_grad") and isinstance(owner, type) and issubclass(owner, self.optimizer):
                kind |= _core.KIND_BOUNDARY
                if attr == "step":
                    kind |= _core.KIND_STEP   # an outermost one ends a step (schedule)
        if target.name in _BOUNDARY_NAMES:
            kind |= _core.KIND_BOUNDARY
        return kind


# Every wrapper a plan made, for the process: (id(original), name, bind, kinds) -> (original, wrapper).
# A later plan (torch modules imported since, another config) reuses them: torch.compile's guards
# check the identity of what torch's namespaces hold, and a new object at each start made every
# profile recompile compiled functions, and past torch._dynamo's recompile limit run uncompiled for
# good. Bounded by torch's callables times
# the few watch-kind sets a process uses; the originals are kept so that their ids stay theirs.
_WRAPPERS: Dict[Tuple[int, str, Optional[bool], int], Tuple[Any, Any]] = {}


def _shared_wrappers(specs: List[Tuple[Any, str, Optional[bool], int]], kinds: int) -> List[Any]:
    """The wrappers of specs (as _core.wrap_many makes them), made once per process."""
    keys = [(id(original), name, bind, spec_kinds & kinds) for original, name, bind, spec_kinds in specs]
    missing = [i for i, key in enumerate(keys) if key not in _WRAPPERS]
    if missing:
        made = _core.wrap_many([specs[i] for i in missing], kinds)
        for i, wrapper in zip(missing, made):
            _WRAPPERS[keys[i]] = (specs[i][0], wrapper)
    return [_WRAPPERS[key][1] for key in keys]


# How a wrapper binds, by the kind of class attribute it replaces (None: decided from the original).
_BINDS = {"staticmethod": False, "classmethod": True}


class _Prepared(NamedTuple):
    """What every start of a plan needs, computed once per plan (plans are cached across sessions)."""

    specs: List[Tuple[Any, str, Optional[bool], int]]   # per target: (original, name, bind, all kinds)
    kinds: List[int]                                    # per target: all the watch kinds that apply
    ids: List[int]                                      # per target not shared: id(original)
    originals: List[Any]
    bound_kinds: List[Tuple[int, str]]                  # (target index, "staticmethod" | "classmethod")
    places: List[Tuple[int, Any, str, Any]]             # (target index, owner, attr, raw)
    # watch kinds -> (wrappers, what is installed), as the first start of the plan took them from
    # _WRAPPERS: later starts skip looking up ~4,000 keys there (the objects are the same)
    wrappers: Dict[int, Tuple[List[Any], List[Any]]]


def _prepared(plan: "Plan") -> _Prepared:
    prepared = plan.prepared
    if prepared is None:
        classify = _WatchKinds()
        binds = _BINDS
        kinds = [classify(t) for t in plan.targets]
        prepared = _Prepared(
            specs=[(t.obj, t.name, binds.get(t.kind), k) for t, k in zip(plan.targets, kinds)],
            # (the shared targets come last: zip(ids, wrappers) pairs the others only, so that an
            # original's entry in Patcher.wrappers is the wrapper of its own name)
            kinds=kinds, ids=[id(t.obj) for t in plan.targets if not t.shared],
            originals=[t.obj for t in plan.targets],
            bound_kinds=[(i, t.kind) for i, t in enumerate(plan.targets) if t.kind in binds],
            places=[(i, owner, attr, raw) for i, t in enumerate(plan.targets) for owner, attr, raw in t.places],
            wrappers={})
        plan.prepared = prepared
    return prepared


def resolve(path: str) -> Tuple[Any, str, Any]:
    """``"torch.nn.Linear.forward"`` -> (torch.nn.Linear, "forward", current value)."""
    import importlib

    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:-1]:
            obj = getattr(obj, name)
        return obj, parts[-1], getattr(obj, parts[-1])
    raise ValueError(f"cannot resolve {path!r}: no importable module prefix")


__all__ = ["Patcher", "Placement", "resolve"]
