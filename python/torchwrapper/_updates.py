# SPDX-License-Identifier: MIT
"""Parameter and gradient tracking (``track``): in-place updates of parameters and their gradients,
as events of the "updates" stream. Driven by the model watch (ModelWatch, _model_watch.py), whose names,
module paths and rows it reads through what the watch is underneath (WatchBase, _watch_base.py), never
calling the watch back."""
from __future__ import annotations

import weakref
from typing import Any, Dict, Iterable, List, Optional, Tuple, TYPE_CHECKING

from . import _core
from ._files import UPDATES_COLUMNS

if TYPE_CHECKING:
    from ._watch_base import WatchBase


class _Tracked:
    """A tracked tensor: a parameter, or a parameter's gradient."""

    __slots__ = ("ref", "name", "kind", "version", "param", "grad_id")

    def __init__(self, tensor: Any, name: str, kind: str, param: Any = None) -> None:
        self.ref = weakref.ref(tensor)
        self.name = name
        self.kind = kind                 # "parameter" or "grad"
        self.version = tensor._version
        self.param = param               # for a gradient: weak reference to its parameter
        self.grad_id: Optional[int] = None   # for a parameter: index of its tracked gradient


class _Tracker:
    """In-place updates of parameters (and their gradients): events on the "updates" stream.

    Parameters are put in a C table by address when their model is registered. A wrapper of an
    in-place API (add_, copy_, __iadd__, nn.init.*_, ...) whose first argument is a tracked tensor
    (or a list holding one) calls update(); around optimizer steps, backward and zero_grad, every
    tracked tensor's version counter is compared with the last one seen, which catches updates made
    by code that is not recorded (foreach and fused optimizer kernels, autograd's accumulation into
    .grad). Assignments of tensors to a tracked module's parameters (module.weight = ...) are seen
    through nn.Module.__setattr__, replaced while profiling.
    """

    def __init__(self, watch: "WatchBase", kinds: frozenset) -> None:
        import torch

        self.torch = torch
        self.watch = watch
        self.grads = "grads" in kinds
        self.entries: Dict[int, _Tracked] = {}
        self.by_tensor: Dict[int, int] = {}      # id(tensor) -> index
        self.params: Dict[int, int] = {}         # id(param) -> index, parameters only
        self.next_index = 1
        self.rows_out: List[tuple] = []
        self.setattr_original: Any = None
        self.setattr_installed: Any = None
        self.site = 0   # the call site of the events being emitted (update, sweep): the outermost call's

    # ---- which tensors ------------------------------------------------------------------------

    def track(self, tensor: Any, name: str, kind: str, param: Any = None) -> int:
        key = id(tensor)
        index = self.by_tensor.get(key)
        if index is not None and self.entries[index].ref() is tensor:
            return index
        index = self.next_index
        self.next_index += 1
        entry = _Tracked(tensor, name, kind, weakref.ref(param) if param is not None else None)
        tracker = weakref.ref(self)

        def died(_ref: Any, index: int = index, key: int = key) -> None:
            t = tracker()
            if t is not None:
                t.forget(index, key)

        entry.ref = weakref.ref(tensor, died)
        self.entries[index] = entry
        self.by_tensor[key] = index
        if kind == "parameter":
            self.params[key] = index
        _core.table_set("tracked", tensor, index)
        return index

    def forget(self, index: int, key: int) -> None:
        if self.entries.pop(index, None) is not None and not self.watch.closed:
            _core.table_remove("tracked", key)
        if self.by_tensor.get(key) == index:
            del self.by_tensor[key]
            self.params.pop(key, None)

    def register(self, named_parameters: Iterable[Tuple[str, Any]]) -> None:
        for name, param in named_parameters:
            self.track(param, name, "parameter")

    # ---- events -------------------------------------------------------------------------------

    def emit(self, call_id: int, api: str, outer_id: int, name: str, kind: str, version: Optional[int],
             attribute: Optional[str] = None) -> None:
        record = (call_id, api, outer_id, name, kind, version, attribute, self.site)
        if not _core.step_recorded():  # a step the schedule leaves out (the tracking goes on)
            return
        if self.watch.sink is None:
            self.rows_out.append(record)
        else:
            self.watch.sink("updates", self.watch.format_row(record, UPDATES_COLUMNS))

    def _check(self, index: int, call_id: int, api: str, outer_id: int) -> None:
        entry = self.entries.get(index)
        tensor = entry.ref() if entry is not None else None
        if tensor is None:
            return
        version = tensor._version
        if version != entry.version:
            entry.version = version
            self.emit(call_id, api, outer_id, entry.name, entry.kind, version)

    def _check_grad(self, index: int, call_id: int, api: str, outer_id: int) -> None:
        """A parameter's gradient: a new one (set by backward), one gone (zero_grad), or updated."""
        entry = self.entries.get(index)
        param = entry.ref() if entry is not None else None
        if param is None:
            return
        grad = param.grad
        current = self.entries.get(entry.grad_id) if entry.grad_id is not None else None
        if grad is None:
            if entry.grad_id is not None:   # set to None (zero_grad); the old one may be gone already
                entry.grad_id = None
                self.emit(call_id, api, outer_id, entry.name, "grad", None)
            return
        if current is not None and current.ref() is grad:
            self._check(entry.grad_id, call_id, api, outer_id)
            return
        entry.grad_id = self.track(grad, entry.name, "grad", param)
        self.emit(call_id, api, outer_id, entry.name, "grad", grad._version)

    def update(self, subject: Any, api_id: int, call_id: int, outer_id: int, site: int = 0) -> None:
        """An in-place API ran on a tracked tensor (or a list holding one)."""
        self.site = site
        api = self.watch.api_name(api_id)
        items = subject if isinstance(subject, (list, tuple)) else (subject,)
        for tensor in items:
            hit = _core.table_get("tracked", tensor)
            if hit is None:
                continue
            self._check(hit[0], call_id, api, outer_id)
            if self.grads and self.entries.get(hit[0]) is not None and self.entries[hit[0]].kind == "parameter":
                self._check_grad(hit[0], call_id, api, outer_id)   # clip_grad_norm_(parameters) scales grads

    def sweep(self, call_id: int, api: str, outer_id: int, site: int = 0) -> None:
        """Every tracked tensor against its last version (around a boundary call)."""
        self.site = site
        for index in list(self.params.values()):
            self._check(index, call_id, api, outer_id)
            if self.grads:
                self._check_grad(index, call_id, api, outer_id)

    # ---- module.weight = ... ------------------------------------------------------------------

    def install_setattr(self) -> None:
        Module = self.torch.nn.Module
        original = Module.__dict__["__setattr__"]
        tracker = weakref.ref(self)
        Tensor = self.torch.Tensor

        def __setattr__(module: Any, name: str, value: Any) -> None:
            original(module, name, value)
            if isinstance(value, Tensor):
                t = tracker()
                if t is not None and not t.watch.closed:
                    t.attribute_set(module, name, value)

        __setattr__.__wrapped__ = original
        __setattr__.__qualname__ = original.__qualname__
        __setattr__.__module__ = original.__module__
        __setattr__.__doc__ = original.__doc__
        Module.__setattr__ = __setattr__
        self.setattr_original, self.setattr_installed = original, __setattr__

    def remove_setattr(self) -> None:
        if self.setattr_installed is None:
            return
        Module = self.torch.nn.Module
        if Module.__dict__.get("__setattr__") is self.setattr_installed:   # else someone replaced it: leave theirs
            Module.__setattr__ = self.setattr_original
        self.setattr_original = self.setattr_installed = None

    def attribute_set(self, module: Any, name: str, value: Any) -> None:
        """module.name = value, a tensor: a tracked module's parameter replaced is an event."""
        try:
            self._attribute_set(module, name, value, self.watch.module_path(module))
        except Exception as error:  # noqa: BLE001
            self.watch.warn_once("track", f"parameter tracking failed: {error!r}")

    def _attribute_set(self, module: Any, name: str, value: Any, path: Optional[str]) -> None:
        if path is None or name not in module._parameters:
            return
        full = f"{path}.{name}" if path else name
        index = self.by_tensor.get(id(value))
        if index is not None and self.entries[index].ref() is value and self.entries[index].name == full:
            return   # the same tensor again: `module.bias -= x` sets what __isub__ updated (an event already)
        index = self.track(value, full, "parameter")
        call_id, outer_id, self.site = _core.current_call()
        self.emit(call_id, "torch.nn.Module.__setattr__", outer_id, full, "parameter", value._version, name)
        self.entries[index].version = value._version
