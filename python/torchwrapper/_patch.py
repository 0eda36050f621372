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
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _core

_MISSING = object()


@dataclass
class Placement:
    owner: Any              # a module or a class
    attr: str
    before: Any             # the object in owner.__dict__ before patching, or _MISSING if inherited
    installed: Any          # the object we put there


def _raw_attribute(owner: Any, attr: str) -> Any:
    """What ``owner.__dict__`` holds under attr, without invoking descriptors."""
    namespace = owner.__dict__ if isinstance(owner, type) else vars(owner)
    return namespace.get(attr, _MISSING)


class Patcher:
    """Installs profiling wrappers; one shared wrapper per distinct callable."""

    def __init__(self) -> None:
        self.placements: List[Placement] = []
        self.wrappers: Dict[int, Any] = {}   # id(original) -> wrapper
        self._originals: List[Any] = []      # keeps the ids above valid
        self.replaced_by_others: List[Tuple[Any, str]] = []

    def wrapper_for(self, original: Callable, api_name: str, bind: Optional[bool] = None) -> Any:
        wrapper = self.wrappers.get(id(original))
        if wrapper is None:
            wrapper = _core.wrap(original, api_name, bind=bind)
            self.wrappers[id(original)] = wrapper
            self._originals.append(original)
        return wrapper

    def install(self, owner: Any, attr: str, api_name: str) -> Any:
        """Replaces ``owner.attr`` by a wrapper recorded as api_name; returns what was installed."""
        before = _raw_attribute(owner, attr)
        current = before if before is not _MISSING else getattr(owner, attr)
        if isinstance(current, staticmethod):
            installed = staticmethod(self.wrapper_for(current.__func__, api_name, bind=False))
        elif isinstance(current, classmethod):
            installed = classmethod(self.wrapper_for(current.__func__, api_name, bind=True))
        elif isinstance(owner, type) and before is _MISSING:
            # Inherited: what the class attribute lookup finds in a base's __dict__.
            for base in owner.__mro__[1:]:
                raw = base.__dict__.get(attr, _MISSING)
                if raw is not _MISSING:
                    return self._install_raw(owner, attr, before, raw, api_name)
            raise AttributeError(f"{owner!r} has no attribute {attr!r} in its MRO")
        else:
            installed = self.wrapper_for(current, api_name)
        setattr(owner, attr, installed)
        self.placements.append(Placement(owner, attr, before, installed))
        return installed

    def _install_raw(self, owner: Any, attr: str, before: Any, raw: Any, api_name: str) -> Any:
        if isinstance(raw, staticmethod):
            installed = staticmethod(self.wrapper_for(raw.__func__, api_name, bind=False))
        elif isinstance(raw, classmethod):
            installed = classmethod(self.wrapper_for(raw.__func__, api_name, bind=True))
        else:
            installed = self.wrapper_for(raw, api_name)
        setattr(owner, attr, installed)
        self.placements.append(Placement(owner, attr, before, installed))
        return installed

    def restore(self) -> None:
        """Undoes every install, newest first."""
        for p in reversed(self.placements):
            if _raw_attribute(p.owner, p.attr) is not p.installed:
                self.replaced_by_others.append((p.owner, p.attr))
                continue
            if p.before is _MISSING:
                delattr(p.owner, p.attr)
            else:
                setattr(p.owner, p.attr, p.before)
        self.placements.clear()


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
