# SPDX-License-Identifier: MIT
"""The model watch: which nn.Module instance each module call ran on, and the tree of modules; it
drives tensor statistics and parameter updates (the hooks the C wrappers call around watched calls).

The C wrapper of an ``nn.Module`` forward looks its instance up by address in a table (one probe
per call) and records the id of the instance's path (``AlexNet.features.0``: its model's class,
then its ``named_modules()`` name) with the call. The first call of an instance misses, and asks
``ModelWatch.resolve``, off the hot path: it finds the model the instance belongs to (the outermost
module on the Python call stack that contains it), and puts every module of that model in the table
at once, each with a weak reference that takes its entry out when the module dies.

A model is a *root*, and every root's paths start with its class's name, as torch's module tracker
(``torch.utils.flop_counter.FlopCounterMode``'s keys) names them: ``GPT2LMHeadModel`` for the
model itself, ``GPT2LMHeadModel.transformer.h.0.attn`` for its modules (``named_modules()``'s path
after the class). A module called on its own at the top level (a loss, a second model) is another
root named the same way: ``CrossEntropyLoss``, ``Discriminator.fc``; a second live model of a class
already taken is ``GPT2LMHeadModel#2``. A root whose model is later found inside a larger one
(``model.encoder(x)`` called before ``model(x)``) is taken over by it.

A module made while another one runs and called there without being its child (``loss_fct =
CrossEntropyLoss()`` inside a forward, as transformers' models do at every step) is *transient*:
its path is the running module's path and its class in parentheses
(``BertModel.(CrossEntropyLoss)`` inside the model itself, ``BertModel.encoder.layer.0.(Dropout)``),
so each step's new instance takes the same path, and a dead instance leaves every table. Nothing
grows with the steps: roots, table entries and paths are bounded by the live modules and the
distinct paths.

A model's modules are walked (``named_modules()``) when it is registered and again only when its
structure may have changed since: torch's global module registration hook marks a registered
module's root when a child is added to it; a path seen for the first time is checked by a walk of
the running models. modules.json is rewritten when the tree changed, at most once per flush
interval, and at stop.

Tensor statistics are in _tensor_stats.py, parameter updates in _updates.py: they read what the watch
is underneath (its names, its rows' format and sink: WatchBase, _watch_base.py) and never call the
watch back. Reading the streams back is _files.py's; their public names stay importable from here.
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _core
from ._files import (MODULES_FILE, STATS_COLUMNS, UPDATES_COLUMNS, load_modules, load_stats, load_updates,  # noqa: F401
                     read_stream)
from ._tensor_stats import BUILTIN_METRICS, StatsOptions, _StatsEngine  # noqa: F401
from ._updates import _Tracker
from ._watch_base import WatchBase


class _Root:
    """One model: the root module, weakly held, and the name its paths start with."""

    def __init__(self, module: Any, name: str, index: int, primary: bool) -> None:
        self.ref = weakref.ref(module)
        self.name = name          # its class's __name__ (``GPT2LMHeadModel``, ``GPT2LMHeadModel#2``)
        self.index = index        # order of discovery
        self.primary = primary    # the model whose calls start tensor statistics' steps (the first live one)
        self.cls = type(module)
        self.retired = False      # taken over by a model found to contain it
        self.grown = True         # a child was added to one of its modules since they were walked

    def path(self, name: str) -> str:
        """The path of the module named name by the model's named_modules() ("" for the model)."""
        return f"{self.name}.{name}" if name else self.name

    def name_in_model(self, path: str) -> str:
        """The inverse of path(): named_modules()'s name of one of its paths."""
        return path[len(self.name) + 1:]


class ModelWatch(WatchBase):
    """Hooks called by the C wrappers of a session (see python/core/watch/hooks.h, tw_hooks_t)."""

    def __init__(self, out_dir: Optional[str] = None, stats: Optional[StatsOptions] = None, track: Sequence[str] = (),
                 format: Optional[str] = None, flush_interval: float = 1.0) -> None:
        super().__init__(format)
        self.out_dir = out_dir
        self.flush_interval = flush_interval   # modules.json is rewritten at most this often (seconds)
        self.kinds = _core.KIND_MODULE_FORWARD
        # Wraps a module class's own forward (Patcher.install_forward, bound to the session's patcher
        # and kinds), set by the profile; classes already looked at (they die with their last module).
        self.forward_installer: Optional[Callable[[type], bool]] = None
        self._forward_classes: Any = weakref.WeakSet()
        self.session: Any = None
        self.stats = _StatsEngine(stats, self) if stats is not None else None
        if stats is not None:
            self.kinds |= _core.KIND_MODULE_CALL
            if "grad" in stats.tensors:
                self.kinds |= _core.KIND_BOUNDARY
        self.track = frozenset(track)
        self.tracker = _Tracker(self, self.track) if self.track else None
        if self.track:
            self.kinds |= _core.KIND_INPLACE | _core.KIND_BOUNDARY
        # Hooks the C side need not call (None): it skips them.
        if stats is None:
            self.module_enter = self.module_pre = self.module_exit = None
        else:
            if stats.tensors <= {"output"}:
                self.module_pre = None
            if "output" not in stats.tensors:
                self.module_exit = None
        if not self.kinds & _core.KIND_BOUNDARY:
            self.boundary_enter = self.boundary_exit = None
        if self.tracker is None:
            self.update = None
        self._pid = os.getpid()
        self._roots: List[_Root] = []          # live ones, in order of discovery (dead ones are dropped)
        self._root_classes: Dict[str, str] = {}   # path -> class of every root seen (modules.json)
        self._resolved_kinds: set = set()      # (class name, parent path): transients already checked by a walk
        self._tree_changed = False             # modules.json is behind the tree
        self._modules_written = -math.inf      # time.monotonic() of the last write
        # Models run on several threads (a training thread each, DataParallel's replicas) reach
        # write_modules at once: one writes, through a temporary file of its own, at a time (two
        # writers once shared the temporary file, and the second's rename failed).
        self._modules_lock = threading.Lock()
        self._modules_lock_pid = os.getpid()
        self._registration_hook: Any = None    # torch's dict of them, while ours is in it
        # What resolution did, for tests of what must not grow with the run: instances resolved,
        # walks of the Python stack to find their model, walks of a model to find whether it contains
        # one, modules put in the table, writes.
        self.counters = {"resolves": 0, "stack_walks": 0, "contains_walks": 0, "registered_modules": 0,
                         "modules_writes": 0}
        self._refs: Dict[int, weakref.ref] = {}
        self._info: Dict[str, Dict[str, Any]] = {}   # path -> modules.json entry
        self._calls: Dict[str, int] = {}       # path -> calls of dead instances
        self._call_codes: Optional[frozenset] = None
        # (class, parent's path id) -> (root, path, path id) of a leaf module made in each call of
        # its parent: _resolve_transient_again
        self._transients: Dict[Tuple[type, int], Tuple[_Root, str, int]] = {}
        self._root_count = 0

    def attach(self, session: Any) -> None:
        """Once the session records: streams for the rows of statistics and updates."""
        self.session = session
        import torch.nn.modules.module as module_module

        # Into torch's dict of global module registration hooks directly, under a key of our own:
        # register_module_module_registration_hook() would move RemovableHandle.next_id, a class
        # attribute of torch that stop() must leave as it was.
        self._registration_hook = module_module._global_module_registration_hooks
        self._registration_hook[("torchwrapper", id(self))] = self._child_registered
        if self.tracker is not None:
            self.tracker.install_setattr()
        if self.out_dir is None:
            return
        if self.stats is not None:
            session.add_stream("stats", ",".join(STATS_COLUMNS))
        if self.track:
            session.add_stream("updates", ",".join(UPDATES_COLUMNS))
        self.sink = session.stream_write

    def finish(self) -> None:
        """Before the session stops: statistics still pending are computed and written."""
        if self.tracker is not None:
            self.tracker.remove_setattr()
        if self.stats is None or self.session is None:
            return
        self.session.pause_thread()
        try:
            self.stats.flush(final=True)
        except Exception as error:  # noqa: BLE001
            self.warn_once("flush", f"tensor statistics of the last step are lost: {error!r}")
        finally:
            self.session.resume_thread()

    # ---- called from C -------------------------------------------------------------------------

    def module_enter(self, module: Any) -> bool:
        """An outermost module call begins: the model's starts a step. Whether it is sampled."""
        stats = self.stats
        try:
            root = self._owner.get(id(module))
            if root is not None and root.primary and root.ref() is module:
                stats.root_call()
            return stats.sampling
        except Exception as error:  # noqa: BLE001
            self.warn_once("stats", f"tensor statistics stopped: {error!r}")
            return False

    def module_pre(self, module: Any, module_id: int, call_id: int, args: tuple, kwargs: dict) -> None:
        """Before a module call of a sampled step: its inputs (and the module's own parameters)."""
        path = self._path.get(id(module))
        if path is None:
            return
        try:
            self.stats.before_call(module, module_id, call_id, self.class_name(type(module)), path, args, kwargs)
        except Exception as error:  # noqa: BLE001
            self.warn_once("stats", f"tensor statistics of module {path!r} failed: {error!r}")

    def module_exit(self, module: Any, module_id: int, call_id: int, result: Any) -> None:
        """After a module call of a sampled step: its outputs."""
        path = self._path.get(id(module))
        if path is None:
            return
        try:
            self.stats.after_call(module, module_id, call_id, self.class_name(type(module)), path, result)
        except Exception as error:  # noqa: BLE001
            self.warn_once("stats", f"tensor statistics of module {path!r} failed: {error!r}")

    def boundary_enter(self, subject: Any, api_id: int) -> Any:
        """Before an optimizer step, a backward or a zero_grad: a token for boundary_exit, or None."""
        if self.tracker is not None:
            try:
                # Changes made since the last look, outside any call that was seen: unattributed.
                self.tracker.sweep(0, "", 0)
            except Exception as error:  # noqa: BLE001
                self.warn_once("track", f"parameter tracking failed: {error!r}")
        return api_id

    def boundary_exit(self, token: Any, api_id: int, call_id: int, outer_id: int, site: int = 0) -> None:
        api = self.api_name(api_id)
        if self.tracker is not None:
            try:
                self.tracker.sweep(call_id, api, outer_id, site)
            except Exception as error:  # noqa: BLE001
                self.warn_once("track", f"parameter tracking failed: {error!r}")
        stats = self.stats
        if stats is not None and "grad" in stats.options.tensors and api == "torch.autograd.backward":
            try:
                stats.grads(call_id)
            except Exception as error:  # noqa: BLE001
                self.warn_once("stats", f"gradient statistics failed: {error!r}")

    def update(self, subject: Any, api_id: int, call_id: int, outer_id: int, site: int = 0) -> None:
        """An in-place API ran on a tracked tensor (site: where the outermost call in progress was made)."""
        try:
            self.tracker.update(subject, api_id, call_id, outer_id, site)
        except Exception as error:  # noqa: BLE001
            self.warn_once("track", f"parameter tracking failed: {error!r}")

    def resolve(self, module: Any, parent_id: int = 0) -> None:
        """A module call's instance is not in the table: find its model and register it. parent_id:
        the path id of the innermost module forward in progress on the calling thread (0: none)."""
        try:
            if self._resolve_transient_again(module, parent_id):
                return
            self._resolve(module, sys._getframe(1), parent_id)
        except Exception as error:  # noqa: BLE001 - the user's program goes on; the record has no path
            self.warn_once("resolve", f"cannot find the model of a {type(module).__name__} instance: {error!r}; "
                                      f"its calls are recorded without a module path")

    # ---- resolution ----------------------------------------------------------------------------

    def _resolve_transient_again(self, module: Any, parent_id: int) -> bool:
        """A module made anew in each call of its parent (transformers' BERT makes a CrossEntropyLoss
        in every forward): the path the last one of its class got under the same parent, without the
        stack walk (126 us a BERT step before). parent_id 0: made anew at the top level
        (``nn.CrossEntropyLoss()(logits, y)``), the root the last one was, once that one died. Only
        for a module with no children and no parameters of its own, while no model has grown since it
        was walked (a model that has may now contain it) and no model was registered or retired since
        the path was found; else False, and the full resolution runs. With a parent, the wrappers
        find the same entry themselves (_core.transient_set) in module forwards; this runs for the
        top level and for the calls the model watch's other hooks wrap."""
        entry = self._transients.get((type(module), parent_id))
        if entry is None or not self._reusable_leaf(module):
            return False
        root, path, path_id = entry
        key = id(module)
        if root.retired or any(r.grown for r in self._roots) or key in self._owner or key in self._path:
            return False
        if parent_id == 0:
            # its own root again: the last instance's, dead, and its name not taken by a live root since
            if root.ref() is not None or any(r.name == root.name and r.ref() is not None for r in self._roots):
                return False
            root.ref = weakref.ref(module)
            if root not in self._roots:
                self._roots.append(root)
        elif root.ref() is None:   # the parent's model
            return False
        self.counters["resolves"] += 1
        self.counters["registered_modules"] += 1
        self._enter(module, root, path, path_id)
        return True

    def _reusable_leaf(self, module: Any) -> bool:
        """Whether module's path may be given to the next instance of its class made at the same
        place: no children and no parameters of its own (nothing the walk would name or track)."""
        return not module._modules and not module._parameters and self.tracker is None

    def _resolve(self, module: Any, frame: Any, parent_id: int = 0) -> None:
        import torch

        Module = torch.nn.Module
        if not isinstance(module, Module):
            return
        self.counters["resolves"] += 1
        self.counters["stack_walks"] += 1
        # Modules running on the call stack, innermost first: the model is the outermost one that
        # contains this instance. Only nn.Module's own call frames are looked into (their `self`):
        # reading a frame's locals keeps a copy of them until the frame ends, which for these is
        # the end of the module call (a training loop's frame would keep its tensors alive).
        # By identity: `code in a set` hashes the code object, which CPython 3.11 does over all its
        # constants each time (~5,000 instructions a frame; callgrind, BERT: 0.2% of a step).
        codes = self._call_codes
        if codes is None:
            codes = self._call_codes = frozenset(
                id(f.__code__) for f in (Module._call_impl, Module._wrapped_call_impl) if hasattr(f, "__code__"))
        running: List[Any] = []
        seen = set()
        while frame is not None:
            if id(frame.f_code) in codes:
                candidate = frame.f_locals.get("self")
                if isinstance(candidate, Module) and id(candidate) not in seen:
                    seen.add(id(candidate))
                    running.append(candidate)
            frame = frame.f_back
        # The innermost running module with a path: a module made inside it is its transient.
        parent = next((c for c in running if c is not module and self._registered(c) is not None), None)
        cls = type(module)
        kind = (f"{cls.__module__}.{cls.__qualname__}", self._path[id(parent)] if parent is not None else None)
        # A model that was walked, and to which no child was added since, cannot contain a module
        # its walk did not find: only a kind of module not seen before is checked against it.
        check_all = kind not in self._resolved_kinds
        for candidate in reversed(running):
            if candidate is not module and (check_all or self._may_have_grown(candidate)) and \
                    self._contains(candidate, module):
                self._register(candidate)
                return
        for root in self._live_roots():
            model = root.ref()
            if model is not None and (check_all or root.grown) and self._contains(model, module):
                self._register(model)
                return
        if len(self._resolved_kinds) < _MAX_KINDS:
            self._resolved_kinds.add(kind)
        if parent is not None:
            path = self._register_transient(module, parent)
            # Found again without the walk next time (_resolve_transient_again): the thread's innermost
            # module forward is this parent, and the module a leaf, so the walk would find the same.
            if parent_id and self._reusable_leaf(module) and _core.intern_path(self._path[id(parent)]) == parent_id \
                    and self._path.get(id(module)) == path:
                path_id = _core.intern_path(path)
                self._transients[(cls, parent_id)] = (self._owner[id(parent)], path, path_id)
                # and by the wrappers, with no Python at all, while this entry holds (_forget_transients)
                _core.transient_set(cls, parent_id, path_id)
        else:
            self._register(module)
            root = self._owner.get(id(module))
            # Its own root: the next instance made at the top level takes it again (parent_id 0)
            if not parent_id and all(c is module for c in running) and self._reusable_leaf(module) and \
                    root is not None and root.ref() is module and self._path.get(id(module)) == root.path(""):
                self._transients[(cls, 0)] = (root, root.path(""), _core.intern_path(root.path("")))

    def _forget_transients(self) -> None:
        """Empties the transient entries, Python's and the wrappers' (whose calls go to the tree)."""
        for _cls, _parent_id, path_id, calls in _core.transient_clear():
            path = _core.module_path(path_id)
            if calls and path in self._info:
                self._info[path]["calls"] += calls
        self._transients.clear()

    def _registered(self, module: Any) -> Optional[_Root]:
        """module's root if module has a path (it is alive, so its entry is its own)."""
        root = self._owner.get(id(module))
        return root if root is not None and id(module) in self._path else None

    def _may_have_grown(self, module: Any) -> bool:
        """Whether module may hold a module its root's last walk did not see."""
        root = self._registered(module)
        return root is None or root.grown or root.ref() is None

    def _child_registered(self, parent: Any, name: str, child: Any) -> None:
        """torch's global module registration hook: a child is set on parent (add_module, setattr).
        Its root is walked again when an unknown module is next called. Returns None (keeps child)."""
        root = self._owner.get(id(parent))
        if root is not None:
            root.grown = True
            if self._transients:   # the grown model may now hold a module of a transient's kind
                self._forget_transients()

    def _contains(self, model: Any, module: Any) -> bool:
        self.counters["contains_walks"] += 1
        return any(m is module for m in model.modules())

    def _live_roots(self) -> List[_Root]:
        """The roots whose model lives and is not part of another's; dead ones are dropped."""
        self._roots = [r for r in self._roots if r.ref() is not None and not r.retired]
        return [r for r in self._roots if self._owner.get(id(r.ref())) is r]

    def _root_for(self, model: Any, members: set) -> _Root:
        """The root of model: the one it already is, or a new one (members: ids of its modules,
        whose roots it takes over)."""
        current = self._owner.get(id(model))
        if current is not None and current.ref() is model:
            return current
        live = [r for r in self._live_roots() if id(r.ref()) not in members]
        # Every model is named by its class, as torch's module tracker names it; a second live
        # model of a class already taken gets a number.
        taken = {r.name for r in live}
        name = base = type(model).__name__
        n = 2
        while name in taken:
            name, n = f"{base}#{n}", n + 1
        self._root_count += 1
        root = _Root(model, name, self._root_count, primary=not any(r.primary for r in live))
        self._roots.append(root)
        path = root.path("")
        if self._root_classes.get(path) != self.class_name(type(model)):
            self._root_classes[path] = self.class_name(type(model))
            self._tree_changed = True
        return root

    def _register(self, model: Any) -> None:
        """Puts every module of model in the table (again: its structure may have changed)."""
        named = list(model.named_modules())
        self._forget_transients()   # paths may move: found again by the full resolution
        root = self._root_for(model, {id(m) for _, m in named})
        root.grown = False
        self._add_modules(root, named)
        if self.stats is not None and self.stats.unchecked_globs:
            # a glob may name a module by its path or by its name in the model (``encoder.*``)
            self.stats.check_globs([root.path(n) for n, _ in named] + [n for n, _ in named if n],
                                   (self.class_name(type(m)) for _, m in named), final=True)

    def wrap_module_classes(self) -> None:
        """At start: the forwards of every module class defined outside torch that exists now (so a
        model built before the start has its blocks' frames from its first step on); classes made
        later are wrapped when a module of theirs is first registered."""
        import torch

        pending = list(torch.nn.Module.__subclasses__())
        while pending and self.forward_installer is not None:
            cls = pending.pop()
            pending.extend(cls.__subclasses__())
            if cls not in self._forward_classes and "forward" in cls.__dict__:
                self._wrap_forward(cls)

    def class_hook(self) -> Any:
        """What nn.Module.__init_subclass__ is while profiling: a module class created meanwhile
        (a script's model, a library imported under ``run``) has its forward recorded from its
        creation on, so its first call is recorded like every other. Wrapping it when a module of
        the class was first seen came too late for that call: Module.__call__ had already looked
        its forward up."""
        import torch

        module = torch.nn.Module
        watch = weakref.ref(self)

        def __init_subclass__(cls, **kwargs):   # noqa: N807 - the name Python calls
            super(module, cls).__init_subclass__(**kwargs)
            this = watch()
            if this is not None and this.forward_installer is not None and "forward" in cls.__dict__ \
                    and cls not in this._forward_classes:
                try:
                    this._wrap_forward(cls)
                except Exception:  # noqa: BLE001 - never the class's failure: wrapped when first seen
                    pass

        return classmethod(__init_subclass__)

    def _wrap_forward(self, cls: type) -> None:
        """Makes the forward a module of class cls runs a recorded call when it is defined outside
        torch (a model's blocks, attention, heads): torch's own module forwards are wrapped by
        discovery already. So every call inside such a module has it as its nearest module frame,
        and reports, FLOPs and backward nodes are charged to its path, not to the nearest torch
        module around it or to none."""
        self._forward_classes.add(cls)
        owner = next((k for k in cls.__mro__ if "forward" in k.__dict__), None)
        if owner is None or owner in self._forward_classes and owner is not cls:
            return
        self._forward_classes.add(owner)
        module_name = getattr(owner, "__module__", "") or ""
        if module_name == "torch" or module_name.startswith("torch."):
            return
        try:
            self.forward_installer(owner)
        except Exception as error:  # noqa: BLE001 - the model runs on, its forwards unrecorded
            self.warn_once("forward", f"cannot record {owner.__qualname__}.forward: {error!r}")

    def _register_transient(self, module: Any, parent: Any) -> str:
        """A module made inside parent's call: named "(Class)" under parent's path in parent's root.
        Returns its path."""
        root = self._owner[id(parent)]
        parent_name = root.name_in_model(self._path[id(parent)])
        own = f"({type(module).__name__})"
        name = f"{parent_name}.{own}" if parent_name else own
        self._add_modules(root, [(f"{name}.{sub}" if sub else name, m) for sub, m in module.named_modules()])
        return root.path(name)

    def _add_modules(self, root: _Root, named: List[Tuple[str, Any]]) -> None:
        """Gives each (name in root, module) its path in the table, with a weak reference that takes
        the entry out when the module dies."""
        self.counters["registered_modules"] += len(named)
        for name, module in named:
            key = id(module)
            owner = self._owner.get(key)
            if owner is not None and owner is not root:
                if owner.ref() is module:
                    self._retire(owner)       # a root that turns out to be part of this model
                elif owner.ref() is not None and key in self._path:
                    continue                  # shared with a live model seen first: it keeps its path
            path = root.path(name)
            old = self._path.get(key)
            if old is not None and old != path:
                self._forget_entry(key, keep_ref=True)
            self._describe(path, name, module, root)
            if self.forward_installer is not None and type(module) not in self._forward_classes:
                self._wrap_forward(type(module))
            self._enter(module, root, path, _core.intern_path(path))
        if self.tracker is not None:
            self.tracker.register((root.path(param_name), param) for name, module in named
                                  for param_name, param in _own_parameters(name, module))
        self._maybe_write_modules()

    def _enter(self, module: Any, root: _Root, path: str, path_id: int) -> None:
        """module's entry: its root and path, a weak reference that takes it out when the module
        dies, and its path id in the wrappers' table."""
        key = id(module)
        self._owner[key] = root
        self._path[key] = path
        if key not in self._refs:
            self._refs[key] = weakref.ref(module, self._make_callback(key))
        _core.table_set("modules", module, path_id)

    def _retire(self, root: _Root) -> None:
        root.retired = True
        self._forget_transients()
        for key, owner in list(self._owner.items()):
            if owner is root:
                del self._owner[key]
        path = root.path("")
        if path in self._root_classes and not any(r.path("") == path for r in self._live_roots()):
            del self._root_classes[path]
            self._tree_changed = True

    def _describe(self, path: str, name: str, module: Any, root: _Root) -> None:
        info = self._info.get(path)
        parent = None
        if name:
            parent = root.path(name.rpartition(".")[0])
        params = {n: list(p.shape) for n, p in module.named_parameters(recurse=False)}
        cls = self.class_name(type(module))
        if info is not None and info["class"] == cls and info["parent"] == parent and info["parameters"] == params:
            return   # the same entry (another instance of a transient path, or a walk again)
        if len(self._info) >= _MAX_PATHS and info is None:
            self.warn_once("paths", f"more than {_MAX_PATHS} module paths: modules.json lists the first ones")
            return
        self._info[path] = {"path": path, "class": cls, "parent": parent, "parameters": params,
                            "calls": info["calls"] if info else 0}
        self._tree_changed = True

    def _make_callback(self, key: int) -> Callable[[Any], None]:
        watch = weakref.ref(self)

        def died(_ref: Any) -> None:
            t = watch()
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
            for _cls, _parent_id, path_id, calls in _core.transient_calls():
                path = _core.module_path(path_id)
                if path is not None:
                    counts[path] = counts.get(path, 0) + calls
        modules = []
        for path, entry in self._info.items():
            entry = dict(entry, calls=entry["calls"] + counts.get(path, 0))
            modules.append(entry)
        roots = [{"path": path, "class": cls} for path, cls in self._root_classes.items()]
        return {"roots": roots, "modules": modules}

    def _maybe_write_modules(self) -> None:
        """modules.json when the tree changed, at most once per flush interval (close() writes the
        last changes)."""
        if self._tree_changed and time.monotonic() - self._modules_written >= self.flush_interval:
            self.write_modules()

    def write_modules(self) -> None:
        if self._modules_lock_pid != os.getpid():  # a forked child: another thread may have held it
            self._modules_lock, self._modules_lock_pid = threading.Lock(), os.getpid()
        with self._modules_lock:
            self._write_modules()

    def _write_modules(self) -> None:
        self._tree_changed = False
        self._modules_written = time.monotonic()
        if self.out_dir is None:
            return
        self.counters["modules_writes"] += 1
        pid = os.getpid()
        name = MODULES_FILE if pid == self._pid else f"modules-{pid}.json"
        path = os.path.join(self.out_dir, name)
        tmp = f"{path}.tmp-{pid}-{threading.get_ident()}"
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
        self.forward_installer = None   # the patcher restores what it installed: nothing more after
        if self.tracker is not None:
            self.tracker.remove_setattr()
        if self._registration_hook is not None:
            self._registration_hook.pop(("torchwrapper", id(self)), None)
            self._registration_hook = None
        self._forget_transients()
        for address, _module_id, calls in _core.table_clear("modules"):
            path = self._path.get(address)
            if path is not None and path in self._info:
                self._info[path]["calls"] += calls
        _core.table_clear("tracked")
        self.closed = True
        self._refs.clear()
        if self.session is not None:   # not when the session never started (out_dir refused)
            self.write_modules()
        self.session = self.sink = None



# Bounds of what the model watch keeps for the run (each is far above what real models reach): paths in
# modules.json, and kinds of transient module already checked by a walk.
_MAX_PATHS = 100_000
_MAX_KINDS = 10_000


def _own_parameters(name: str, module: Any) -> Any:
    """(dotted name under the root, parameter) of module's own parameters."""
    for n, p in module.named_parameters(recurse=False):
        yield (f"{name}.{n}" if name else n), p


__all__ = ["BUILTIN_METRICS", "MODULES_FILE", "ModelWatch", "STATS_COLUMNS", "StatsOptions", "UPDATES_COLUMNS",
           "load_modules", "load_stats", "load_updates", "read_stream"]
