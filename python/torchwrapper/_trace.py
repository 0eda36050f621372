# SPDX-License-Identifier: MIT
"""Model tracing: which nn.Module instance each module call ran on, and the tree of modules.

The C wrapper of an ``nn.Module`` forward looks its instance up by address in a table (one probe
per call) and records the id of the instance's path (``features.0``, as ``named_modules()`` names
it) with the call. The first call of an instance misses, and asks ``Tracer.resolve``, off the hot
path: it finds the model the instance belongs to (the outermost module on the Python call stack
that contains it), and puts every module of that model in the table at once, each with a weak
reference that takes its entry out when the module dies.

A model is a *root*. The first one has the paths of ``named_modules()`` ("" for itself); a module
called on its own at the top level (a loss, a second model) is another root, named by its class
while the first one lives: ``CrossEntropyLoss``, ``Discriminator:fc``. A root whose model is later
found inside a larger one (``model.encoder(x)`` called before ``model(x)``) is taken over by it.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional

from . import _core

MODULES_FILE = "modules.json"


class _Root:
    """One model: the root module, weakly held, and the name its paths start with."""

    def __init__(self, module: Any, prefix: Optional[str], index: int) -> None:
        self.ref = weakref.ref(module)
        self.prefix = prefix      # None for the first root: plain named_modules() paths
        self.index = index        # order of discovery
        self.cls = type(module)

    def path(self, name: str) -> str:
        if self.prefix is None:
            return name
        return self.prefix if name == "" else f"{self.prefix}:{name}"


class Tracer:
    """Hooks called by the C wrappers of a session (see python/core/module.h, tw_hooks_t).

    ``class_name(cls)`` gives a module class's public name (``torch.nn.Conv2d``).
    """

    def __init__(self, out_dir: Optional[str] = None, class_name: Optional[Callable[[type], str]] = None) -> None:
        self.out_dir = out_dir
        self.kinds = _core.KIND_MODULE_FORWARD
        self._class_name = class_name or _default_class_name
        self._pid = os.getpid()
        self._roots: List[_Root] = []          # live and dead, in order of discovery
        self._owner: Dict[int, _Root] = {}     # id(module) -> its root
        self._refs: Dict[int, weakref.ref] = {}
        self._path: Dict[int, str] = {}        # id(module) -> path
        self._info: Dict[str, Dict[str, Any]] = {}   # path -> modules.json entry
        self._calls: Dict[str, int] = {}       # path -> calls of dead instances
        self._warned: set = set()
        self.closed = False

    # ---- called from C -------------------------------------------------------------------------

    def resolve(self, module: Any) -> None:
        """A module call's instance is not in the table: find its model and register it."""
        try:
            self._resolve(module, sys._getframe(1))
        except Exception as error:  # noqa: BLE001 - the user's program goes on; the record has no path
            self.warn_once("resolve", f"cannot find the model of a {type(module).__name__} instance: {error!r}; "
                                      f"its calls are recorded without a module path")

    # ---- resolution ----------------------------------------------------------------------------

    def _resolve(self, module: Any, frame: Any) -> None:
        import torch

        Module = torch.nn.Module
        if not isinstance(module, Module):
            return
        # Modules running on the call stack, innermost first: the model is the outermost one that
        # contains this instance (`self` of the frames of _call_impl and of forward methods).
        running: List[Any] = []
        seen = set()
        while frame is not None:
            code = frame.f_code
            if code.co_argcount and code.co_varnames[0] == "self":
                candidate = frame.f_locals.get("self")
                if isinstance(candidate, Module) and id(candidate) not in seen:
                    seen.add(id(candidate))
                    running.append(candidate)
            frame = frame.f_back
        for candidate in reversed(running):
            if candidate is module or self._contains(candidate, module):
                self._register(candidate)
                return
        for root in self._live_roots():
            model = root.ref()
            if model is not None and self._contains(model, module):
                self._register(model)
                return
        self._register(module)

    @staticmethod
    def _contains(model: Any, module: Any) -> bool:
        return any(m is module for m in model.modules())

    def _live_roots(self) -> List[_Root]:
        return [r for r in self._roots if r.ref() is not None and self._owner.get(id(r.ref())) is r]

    def _root_for(self, model: Any, members: set) -> _Root:
        """The root of model: the one it already is, or a new one (members: ids of its modules,
        whose roots it takes over)."""
        current = self._owner.get(id(model))
        if current is not None and current.ref() is model:
            return current
        live = [r for r in self._live_roots() if id(r.ref()) not in members]
        prefix = None
        if any(r.prefix is None for r in live):
            # The first model has the plain paths; another one is named by its class.
            taken = {r.prefix for r in live}
            prefix = base = type(model).__name__
            n = 2
            while prefix in taken:
                prefix, n = f"{base}#{n}", n + 1
        root = _Root(model, prefix, len(self._roots))
        self._roots.append(root)
        return root

    def _register(self, model: Any) -> None:
        """Puts every module of model in the table (again: its structure may have changed)."""
        named = list(model.named_modules())
        root = self._root_for(model, {id(m) for _, m in named})
        for name, module in named:
            key = id(module)
            owner = self._owner.get(key)
            if owner is not None and owner is not root:
                if owner.ref() is module:
                    self._retire(owner)       # a root that turns out to be part of this model
                elif owner.ref() is not None:
                    continue                  # shared with a live model seen first: it keeps its path
            path = root.path(name)
            old = self._path.get(key)
            if old is not None and old != path:
                self._forget_entry(key, keep_ref=True)
            self._owner[key] = root
            self._path[key] = path
            self._describe(path, name, module, root)
            if key not in self._refs:
                self._refs[key] = weakref.ref(module, self._make_callback(key))
            _core.table_set("modules", module, _core.intern_path(path))
        self.write_modules()

    def _retire(self, root: _Root) -> None:
        for key, owner in list(self._owner.items()):
            if owner is root:
                del self._owner[key]

    def _describe(self, path: str, name: str, module: Any, root: _Root) -> None:
        info = self._info.get(path)
        parent = None
        if name:
            parent = root.path(name.rpartition(".")[0])
        params = {n: list(p.shape) for n, p in module.named_parameters(recurse=False)}
        entry = {"path": path, "class": self._class_name(type(module)), "parent": parent, "parameters": params,
                 "calls": info["calls"] if info else 0}
        self._info[path] = entry

    def _make_callback(self, key: int) -> Callable[[Any], None]:
        tracer = weakref.ref(self)

        def died(_ref: Any) -> None:
            t = tracer()
            if t is not None and not t.closed:
                t._forget_entry(key)

        return died

    def _forget_entry(self, key: int, keep_ref: bool = False) -> None:
        calls = _core.table_remove("modules", key)
        path = self._path.pop(key, None)
        if path is not None and path in self._info:
            self._info[path]["calls"] += calls
        if not keep_ref:
            self._refs.pop(key, None)
            self._owner.pop(key, None)

    # ---- results -------------------------------------------------------------------------------

    def module_path(self, module: Any) -> Optional[str]:
        """The path recorded for a module instance, or None if none of its calls was seen."""
        return self._path.get(id(module))

    def modules(self) -> Dict[str, Any]:
        """The tree: {"roots": [{"path", "class"}], "modules": [{"path", "class", "parent",
        "parameters": {name: shape}, "calls"}]} (calls: recorded forward calls of the instance)."""
        counts = {}
        if not self.closed:
            for key, path in self._path.items():
                hit = self._refs.get(key)
                module = hit() if hit is not None else None
                entry = _core.table_get("modules", module) if module is not None else None
                if entry is not None:
                    counts[path] = counts.get(path, 0) + entry[1]
        modules = []
        for path, entry in self._info.items():
            entry = dict(entry, calls=entry["calls"] + counts.get(path, 0))
            modules.append(entry)
        roots = [{"path": r.path(""), "class": self._class_name(r.cls)} for r in self._roots]
        return {"roots": roots, "modules": modules}

    def write_modules(self) -> None:
        if self.out_dir is None:
            return
        pid = os.getpid()
        name = MODULES_FILE if pid == self._pid else f"modules-{pid}.json"
        path = os.path.join(self.out_dir, name)
        tmp = f"{path}.tmp-{pid}"
        try:
            tree = self.modules()
            with open(tmp, "w") as f:  # one module per line: readable, and diffs well
                f.write('{"roots": [%s],\n "modules": [\n  %s\n ]}\n' % (
                    ", ".join(json.dumps(r) for r in tree["roots"]),
                    ",\n  ".join(json.dumps(m) for m in tree["modules"])))
            os.replace(tmp, path)
        except OSError as error:
            self.warn_once("modules.json", f"cannot write {path}: {error.strerror}")

    def close(self) -> None:
        """At stop: the calls counted in C go to the tree, the tables are emptied, the tree is written."""
        if self.closed:
            return
        for address, _module_id, calls in _core.table_clear("modules"):
            path = self._path.get(address)
            if path is not None and path in self._info:
                self._info[path]["calls"] += calls
        _core.table_clear("tracked")
        self.closed = True
        self._refs.clear()
        self.write_modules()

    def warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(f"torchwrapper: {message}", RuntimeWarning, stacklevel=2)


def _default_class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


__all__ = ["MODULES_FILE", "Tracer"]
