# SPDX-License-Identifier: MIT
"""Profiling everything under torch: discovery, installation, torch's own registries, restoration."""
from __future__ import annotations

import atexit
import functools
import gc
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import types
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _config, _core
from ._clocks import ClockSync
from ._discover import Plan, _Globs, discover, optimizer_steps, resolve_exclude
from ._files import read_rows, read_stream, record_files, records
from ._flops import peak_flops as _peak_flops
from ._memory import ProfilerGuard
from ._patch import WRAPPER_TYPES, Patcher
from ._tensor_stats import StatsOptions
from ._tw_report import Report
from ._compile_watch import CompileWatch
from ._model_watch import ModelWatch

# Discovery plans by (modules, include, exclude), with the set of modules imported when each was
# made and the steps that optimizer classes held then (optimizer_steps). A later start reuses a plan
# when neither changed since; the install then checks every place still holds what discovery saw,
# and plans afresh when one does not. (The steps: the first construction of a program's own
# optimizer class puts a hook in a class that no place of the plan covers.)
_plan_cache: Dict[tuple, Tuple[tuple, Plan]] = {}


class _TorchRegistries:
    """Keeps torch's identity-keyed registries working while wrappers stand in for the originals.

    TorchScript maps builtins to ATen ops by ``id(fn)`` and boolean-dispatched functions by the
    function object. Each wrapper is registered next to its original while profiling, and removed
    at stop. (Dynamo's compilation callbacks are _compile_watch.py's.)
    """

    def __init__(self) -> None:
        self.builtin_ids: List[int] = []
        self.dispatch_keys: List[Any] = []

    def prepare(self) -> None:
        """Before installing: build torch's lazily built tables from the originals."""
        builtins = sys.modules.get("torch.jit._builtins")
        if builtins is not None:
            builtins._get_builtin_table()
        trace_rules = sys.modules.get("torch._dynamo.trace_rules")
        if trace_rules is not None:
            trace_rules.get_torch_obj_rule_map()

    def register(self, patcher: Patcher, plan: Optional[Plan] = None) -> None:
        builtins = sys.modules.get("torch.jit._builtins")
        jit_internal = sys.modules.get("torch._jit_internal")
        table = builtins._get_builtin_table() if builtins is not None else {}
        dispatched = getattr(jit_internal, "boolean_dispatched", None)
        trace_rules = sys.modules.get("torch._dynamo.trace_rules")
        # torch.compile decides how to capture a callable in its graph from a map keyed by the callable: the
        # wrapper gets its original's rule (e.g. "put it in the graph" for torch.add).
        rules = trace_rules.get_torch_obj_rule_map() if trace_rules is not None else {}
        for original, wrapper in self._originals_in_tables(patcher, plan, table, rules):
            op = table.get(id(original))
            if op is not None and id(wrapper) not in table:
                table[id(wrapper)] = op
                self.builtin_ids.append(id(wrapper))
            rule = rules.get(original)
            if rule is not None:
                rules[wrapper] = rule
        for original, entry in list(dispatched.items()) if dispatched is not None else ():
            wrapper = patcher.wrappers.get(id(original))
            if wrapper is not None:
                dispatched[wrapper] = entry
                self.dispatch_keys.append(wrapper)

    @staticmethod
    def _originals_in_tables(patcher: Patcher, plan: Optional[Plan], table: dict,
                             rules: dict) -> List[Tuple[Any, Any]]:
        """(original, wrapper) for the patcher's originals that table or rules may know.

        Looking up ~4,000 originals took ~5 ms of each start, inside the user's code; which of a
        plan's originals the two tables know is kept with the plan, for as long as the tables are
        the same objects of the same sizes (torch builds each once, lazily)."""
        if plan is None or patcher.plan_wrappers is None:
            return [(w.__wrapped__, w) for w in patcher.wrappers.values()]
        key = (id(table) if table else None, len(table), id(rules) if rules else None, len(rules))
        cached = plan.registry_entries
        if cached is None or cached[0] != key:
            # (the originals in target order, as install_plan prepared them with the plan)
            known = [i for i, original in enumerate(plan.prepared.originals)
                     if id(original) in table or original in rules]
            cached = plan.registry_entries = (key, known)
        wrappers = patcher.plan_wrappers
        return [(wrappers[i].__wrapped__, wrappers[i]) for i in cached[1]]

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
            for key in [k for k in rules if type(k) in WRAPPER_TYPES]:
                rules.setdefault(key.__wrapped__, rules.pop(key))
            trace_rules.get_tensor_method.cache_clear()
        self.builtin_ids.clear()
        self.dispatch_keys.clear()


def _install_forward(patcher: Patcher, include: Any, exclude: Any, cls: type) -> bool:
    """Wraps a model's own module class's forward (Patcher.install_forward) unless the config's
    exclude globs name it (module.Qualname.forward) and its include globs do not, as for torch's APIs."""
    name = f"{cls.__module__}.{cls.__qualname__}.forward"
    if exclude.match(name) is not None and include.match(name) is None:
        return False
    return patcher.install_forward(cls, kinds=_core.KIND_MODULE_FORWARD)


class Profile:
    """Wraps every callable under the given modules, records calls, and restores everything.

    ``modules``: root module names (torch's unless given); ``include`` and ``exclude``: API-name
    globs (``exclude`` defaults to ``DEFAULT_EXCLUDE``: a list of globs replaces it, a list of
    ``"+glob"`` entries adds to it; ``include`` wins over it).

    ``args``: "none" (profile()'s default), "summary" (dtype, shape and device of tensors, values of
    numbers, type names of the rest) or "repr" (bounded repr(), may write data values into files).

    Every config argument left out (None) takes profile()'s default, and every value is checked, by
    the one validator in the C library (config_keys.c holds the table of defaults; ``TorchWrapper``'s
    differ in out_dir and args).

    The model watch: every module forward's record carries its instance's path (``features.0``), and
    ``module_tree()`` (modules.json in out_dir) the modules that ran. ``tensor_stats`` (True, or a
    dict: tensors, metrics, modules, every / sample; see the README) takes statistics of the
    tensors of module calls, with ``metrics`` naming custom metric functions (tensor -> dict of
    numbers); ``track`` (["parameters"], ["parameters", "grads"]) records in-place updates of them.

    With ``out_dir``, records stream to files there (``format`` "csv" or "json", each file at most
    ``file_max_size``, named by ``file_name_spec``, ``max_files`` newest kept, the oldest
    removed past ``max_total_size`` bytes of each kind (10 GB by default; 0 keeps all), on disk within
    ``flush_interval`` seconds; ``buffer_size`` bounds memory, ``on_full`` "drop" or "wait";
    ``compress`` "gzip" writes each file as one gzip member, ``*.csv.gz`` / ``*.jsonl.gz``, about a
    fifth of the size, file_max_size counting its compressed bytes). Without it, records stay in
    memory until read. ``rank`` (default: $RANK) goes into the manifest and
    the record file names; ``per_process_names`` (default: with a rank, or in a process started
    with $TORCHWRAPPER_AUTOSTART) names the manifest and summary after the pid.

    ``schedule``: None (every step recorded) or a dict of ``skip_first``, ``wait``, ``warmup``,
    ``active``, ``repeat`` (torch.profiler.schedule's meaning, in steps; see ``step()``) and
    ``summary`` ("all": summary.json counts every call, the default; "active": only the calls of
    active steps, and wrappers outside them record nothing). ``records``: "all", or "summary" for
    no per-call records at all (summary.json and the manifest only). ``sites``: "boundary" (the
    default: each call that enters torch from code outside torch records the file, line and function
    of its caller, in the record's ``site`` column and ``sites.json``), "all" (every call's caller) or
    "off".

    ``on_demand`` (needs ``out_dir``): True, or a dict of ``steps`` (default 5) and ``dir`` (default
    out_dir/capture-N): ``python -m torchwrapper capture PID`` or ``kill -USR2 PID`` then makes this
    process record the next steps into a directory of their own, whatever the schedule.

    ``gpu``: "auto" (the default: with out_dir, a CUDA device and CUPTI, every kernel, copy and
    memset is recorded with the call that launched it, in ``*.gpu.csv`` / ``*.gpu.jsonl`` files;
    otherwise says once why not and profiles CPU time), "on" (the same, but start() raises
    RuntimeError when GPU timing is unavailable) or "off".

    ``flops`` (True, the default): calls of linear, matmul, mm, addmm, bmm, baddbmm, einsum, the
    convolutions and scaled_dot_product_attention record their FLOPs (``flops``, and ``flops_total``
    with those of the calls inside; backward nodes their backward's), as FlopCounterMode counts them;
    ``peak_flops`` (FLOP/s) is what MFU is measured against (default: the known GPUs' table on CUDA,
    none on a CPU). Needs the libtorch layer (``stats()["flops_unavailable"]`` says why not).

    ``aten``: "backward" (the default) records every autograd node a backward pass evaluates
    (AddmmBackward0, ...) as a record of its own, charged to the forward call that created it (its
    ``fwd_call_id`` and ``fwd_api`` columns, and that call's module and site); it needs the libtorch
    layer built against this torch, and is off otherwise (``stats()["backward_unavailable"]`` says
    why). "all" records every aten operator as well (aten::addmm, ...), nested under the call or
    node that ran it (torch then builds a RecordFunction per operator: it costs more). "off"
    records none.

    ``memory``: True records, per call, the bytes the allocator reported allocated and freed during
    it (children included, and self) and the peak of its allocated total (the ``mem_*`` columns):
    torch's own reports, as torch.profiler's profile_memory takes them, on the thread that starts
    profiling and autograd's threads. Off by default (it costs every allocation; see README). While
    torch.profiler runs on that thread it is refused, with a warning, and the rest records.
    """

    def __init__(self, modules: Optional[Sequence[str]] = None, include: Optional[Sequence[str]] = None,
                 exclude: Optional[Sequence[str]] = None, *, out_dir: Optional[str] = None,
                 format: Optional[str] = None, file_max_size: Any = None, file_name_spec: Optional[str] = None,
                 max_files: Optional[int] = None, flush_interval: Optional[float] = None, buffer_size: Any = None,
                 on_full: Optional[str] = None, rank: Optional[int] = None, manifest: Optional[Dict[str, Any]] = None,
                 args: Optional[str] = None, per_process_names: Optional[bool] = None, gpu: Optional[str] = None,
                 tensor_stats: Any = None, track: Optional[Sequence[str]] = None,
                 metrics: Optional[Dict[str, Any]] = None, schedule: Optional[Dict[str, Any]] = None,
                 records: Optional[str] = None, on_demand: Any = None, sites: Optional[str] = None,
                 aten: Optional[str] = None, flops: Optional[bool] = None,
                 peak_flops: Optional[float] = None, memory: Optional[bool] = None,
                 compress: Optional[str] = None, detail: Optional[str] = None, max_total_size: Any = None) -> None:
        given = {"modules": modules, "include": include, "exclude": exclude, "out_dir": out_dir, "format": format,
                 "file_max_size": file_max_size, "file_name_spec": file_name_spec, "max_files": max_files,
                 "flush_interval": flush_interval, "buffer_size": buffer_size, "on_full": on_full, "args": args,
                 "gpu": gpu, "tensor_stats": tensor_stats, "track": track, "schedule": schedule, "records": records,
                 "on_demand": on_demand, "sites": sites, "aten": aten, "flops": flops, "peak_flops": peak_flops,
                 "memory": memory, "compress": compress, "detail": detail, "max_total_size": max_total_size}
        given = {key: list(value) if isinstance(value, (tuple, list)) else value
                 for key, value in given.items() if value is not None}
        c = _config.normalize(given, defaults="profile")
        self.config: Dict[str, Any] = c
        stats = StatsOptions(c["tensor_stats"], metrics) if c["tensor_stats"] is not None else None
        if metrics and stats is None:
            raise ValueError("metrics= names functions for tensor_stats, which is off: set tensor_stats too")
        self.modules = c["modules"]
        self.include = c["include"]
        exclude = c["exclude"]
        if stats is not None and "torch.nn.Module.__call__" not in self.include:
            # Statistics are taken around every module call (user modules included) and hooks.
            self.include.append("torch.nn.Module.__call__")
        self.exclude = exclude
        self.out_dir = os.path.abspath(c["out_dir"]) if c["out_dir"] is not None else None
        if rank is None and os.environ.get("RANK", "").isdigit():
            rank = int(os.environ["RANK"])
        if per_process_names is None:
            # Processes that share out_dir with others (the ranks of a job, the children of a
            # program under `python -m torchwrapper run`) write manifest-PID.json and
            # summary-PID.json; manifest.json stays the first process's.
            per_process_names = rank is not None or bool(os.environ.get(_config.AUTOSTART_ENV))
        # The session takes the normalized values (the validator passes them through unchanged).
        output: Dict[str, Any] = {key: c[key] for key in _SESSION_KEYS}
        # the peak MFU is computed against (reports read it from the manifest)
        self.peak_flops, self.peak_flops_source = _peak_flops(c["peak_flops"])
        if self.out_dir is not None:
            extra = {"config": dict(c, out_dir=self.out_dir,
                                    exclude=list(exclude) if exclude is not None else "default"),
                     "python": sys.version.split()[0], "torch": _torch_version(),
                     "argv": list(getattr(sys, "argv", [])),
                     "peak_flops": self.peak_flops, "peak_flops_source": self.peak_flops_source,
                     # the findings weigh torch's threads against these (one_thread, too_many_threads)
                     "cpus": _usable_cpus(), "torch_threads": _torch_threads()}
            if rank is not None and os.environ.get("WORLD_SIZE", "").isdigit():
                extra["world_size"] = int(os.environ["WORLD_SIZE"])   # the trace's distributedInfo
            extra.update(manifest or {})
            output.update(out_dir=self.out_dir, rank=-1 if rank is None else rank,
                          manifest=json.dumps(extra, default=str), per_process_names=per_process_names)
        if c["gpu"] != "off":
            output.update(gpu_device=_cuda_available(), cupti_paths=cupti_candidates())
        # nodes, tensors' summaries and FLOPs read in C++, and the allocator's reports
        if c["aten"] != "off" or c["args"] == "summary" or c["flops"] or c["memory"]:
            output.update(torch_layer=_torch_layer())
        self.model_watch = ModelWatch(self.out_dir, stats=stats, track=c["track"], format=c["format"],
                             flush_interval=c["flush_interval"])
        self.session = _core.Session(model_watch=self.model_watch, **output)
        self.plan: Optional[Plan] = None
        self._profiler_guard: Optional[ProfilerGuard] = None
        self.patcher = Patcher()
        self._registries = _TorchRegistries()
        self._modules_before: frozenset = frozenset()
        self.timings: Dict[str, float] = {}
        self._clocks: Optional[ClockSync] = None
        self._compile_watch = CompileWatch()   # each torch.compile compilation, a record

    def start(self) -> "Profile":
        import torch  # discovery needs torch imported

        if _core.active_session() is not None:
            raise RuntimeError("another profiling session is already recording; stop it first")
        t0 = time.perf_counter()
        key = (tuple(self.modules), tuple(self.include), None if self.exclude is None else tuple(self.exclude))
        imported = frozenset(sys.modules)
        state = (imported, optimizer_steps())
        cached = _plan_cache.get(key)
        from_cache = cached is not None and cached[0] == state
        self.plan = cached[1] if from_cache else self._discover(key, state)
        t1 = time.perf_counter()
        self._registries.prepare()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            kinds = self.model_watch.kinds | _core.KIND_STEP   # optimizer steps end steps
            if not self.patcher.install_plan(self.plan, kinds) and from_cache:
                # Something changed since that plan was made (torch replaced an attribute):
                # undo, and plan afresh.
                self.patcher.restore()
                self.patcher = Patcher()
                self.plan = self._discover(key, state)
                self.patcher.install_plan(self.plan, kinds)
            self._registries.register(self.patcher, self.plan)
            self._modules_before = imported
            t2 = time.perf_counter()
            self.timings.update(discover_s=t1 - t0, install_s=t2 - t1, plan_reused=from_cache)
            self.model_watch.names = self.plan.names   # public names of module classes (no cycle through self)
            # (a module forward's kind only: statistics come from nn.Module.__call__'s wrapper)
            self.model_watch.forward_installer = functools.partial(
                _install_forward, self.patcher, _Globs(self.include), _Globs(resolve_exclude(self.exclude)))
            self.model_watch.wrap_module_classes()
            self.patcher.install_value(torch.nn.Module, "__init_subclass__", self.model_watch.class_hook())
            self._compile_watch.start()
            self.session.start()  # creates out_dir and the writer: errors name the path and reason
            if self.session.stats()["memory"] == "on":   # torch.profiler may start meanwhile: see _memory
                self._profiler_guard = ProfilerGuard()
                self._profiler_guard.install()
            self.model_watch.attach(self.session)
            if self.out_dir is not None:
                # the clock's offset to rank 0's, in the manifest (now, or once the group is up)
                self._clocks = ClockSync(self.session)
                try:
                    self._clocks.attach()
                except Exception:  # never the program's failure: the manifest then has no offset
                    pass
            if self.model_watch.stats is not None:
                self.model_watch.stats.check_globs((), self._module_class_names(), final=False)
        except BaseException:
            self._compile_watch.stop()
            if self.session.active:
                self.session.stop()
            if self._profiler_guard is not None:
                self._profiler_guard.restore()
            self.model_watch.close()
            self.patcher.restore()
            self._registries.unregister()
            raise
        finally:
            if gc_was_enabled:
                gc.enable()
        _exit_guard.started(self)
        return self

    def _discover(self, key: tuple, state: tuple) -> Plan:
        plan = discover(self.modules, self.include, self.exclude)
        if len(_plan_cache) >= 8:
            _plan_cache.clear()
        _plan_cache[key] = (state, plan)
        return plan

    def stop(self) -> None:
        if not self.session.active:
            return
        if self._clocks is not None:
            self._clocks.detach()
            self._clocks = None
        self.model_watch.finish()
        self._compile_watch.stop()
        self.session.stop()
        if self._profiler_guard is not None:
            self._profiler_guard.restore()
            self._profiler_guard = None
        self.model_watch.close()
        _exit_guard.stopped(self)
        t0 = time.perf_counter()
        self.patcher.restore()
        self._registries.unregister()
        self._unwrap_new_modules()
        self.timings["restore_s"] = time.perf_counter() - t0
        note = self.session.stats()["memory_note"]
        if note:   # last: a warning made an error leaves nothing of the session behind
            warnings.warn(f"torchwrapper: config memory: {note}", RuntimeWarning, stacklevel=2)

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
                if type(value) in WRAPPER_TYPES:
                    namespace[attr] = value.__wrapped__

    def step(self) -> int:
        """Ends the current step and returns the number of the one that begins (steps count from 0).

        Without it, a step ends when an outermost optimizer step returns; after the first call, only
        these calls end steps. The schedule (config key ``schedule``) counts these steps."""
        if not self.session.active:
            raise RuntimeError("step() marks steps of a recording profile: start() it first")
        return self.session.step()

    def __enter__(self) -> "Profile":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _repr_html_(self) -> Optional[str]:
        """In a notebook, a stopped profile with files shows tw-report's page (_tw_report.Report)."""
        if self.out_dir is None or self.session.active:
            return None
        return Report(self.out_dir)._repr_html_()

    def records(self) -> list:
        """Every record, in the order the calls started (from the files when out_dir was given)."""
        if self.out_dir is None:
            return records(self.session)
        return read_rows(self.files)

    def detailed_names(self) -> Dict[str, str]:
        """API name -> where the callable is defined, as a dotted path that resolves to it
        (``torch.nn.modules.linear.Linear.forward``, ``torch._C._VariableFunctions.randn``); the API
        name itself when no such path is found."""
        return {t.name: defined_at(t.obj) or t.name for t in (self.plan.targets if self.plan else ())}

    def _module_class_names(self) -> List[str]:
        import torch

        module = torch.nn.Module
        return [name for obj, name in (self.plan.names.values() if self.plan else ())
                if isinstance(obj, type) and issubclass(obj, module)]

    def updates_rows(self) -> Tuple[List[str], List[tuple]]:
        """(columns, rows) of the parameter updates (from the files when out_dir was given)."""
        from ._files import UPDATES_COLUMNS

        if self.model_watch.tracker is None:
            raise RuntimeError("no parameter updates: profile with track=[\"parameters\"] (or [\"parameters\", "
                               "\"grads\"])")
        if self.out_dir is None:
            return UPDATES_COLUMNS, list(self.model_watch.tracker.rows_out)
        return UPDATES_COLUMNS, read_stream(self.out_dir, "updates", UPDATES_COLUMNS, os.getpid())

    def stats_rows(self) -> Tuple[List[str], List[tuple]]:
        """(columns, rows) of the tensor statistics (from the files when out_dir was given)."""
        from ._files import STATS_COLUMNS

        if self.model_watch.stats is None:
            raise RuntimeError("no tensor statistics: profile with tensor_stats=True (or a dict of options)")
        if self.out_dir is None:
            return STATS_COLUMNS, list(self.model_watch.stats.rows_out)
        return STATS_COLUMNS, read_stream(self.out_dir, "stats", STATS_COLUMNS, os.getpid())

    def module_tree(self) -> Dict[str, Any]:
        """The modules that ran: {"roots": [...], "modules": [{"path", "class", "parent",
        "parameters": {name: shape}, "calls"}]} (also written to out_dir/modules.json)."""
        return self.model_watch.modules()

    @property
    def files(self) -> List[str]:
        """The record files written (paths), oldest first."""
        return record_files(self.out_dir, os.getpid()) if self.out_dir else []

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


def _torch_layer() -> Tuple[Optional[str], Optional[str]]:
    """(path of the libtorch layer, torch.__version__): the session loads the layer when the two
    match what it was built against; (None, None) when it was not built or torch is not imported."""
    torch = sys.modules.get("torch")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch.so")
    if torch is None or not os.path.exists(path):
        return None, getattr(torch, "__version__", None)
    return path, str(torch.__version__)


def defined_at(obj: Any) -> Optional[str]:
    """The dotted path of obj's definition, checked to resolve to obj: its ``__module__`` and
    ``__qualname__`` when importing one and walking the other leads back to it; for torch's C
    functions, whose qualname names a class the module does not hold (``torch`` +
    ``_VariableFunctionsClass.randn``), the object of torch._C that holds them
    (``torch._C._VariableFunctions.randn``), or the class of a method descriptor
    (``torch._C.TensorBase.add``). None when nothing resolves."""
    import sys

    def walk(module_name: Any, qualname: Any) -> Optional[str]:
        if not isinstance(module_name, str) or not isinstance(qualname, str) or "<locals>" in qualname:
            return None
        here: Any = sys.modules.get(module_name)
        for part in qualname.split("."):
            here = getattr(here, part, None) if here is not None else None
        if here is obj or getattr(here, "__wrapped__", None) is obj:
            return f"{module_name}.{qualname}"
        return None

    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    found = walk(module, qualname)
    if found is None and isinstance(qualname, str) and qualname.startswith("_VariableFunctionsClass."):
        found = walk("torch._C", "_VariableFunctions." + qualname.split(".", 1)[1])
    owner = getattr(obj, "__objclass__", None)
    if found is None and isinstance(owner, type):
        found = walk(owner.__module__, f"{owner.__qualname__}.{getattr(obj, '__name__', '')}")
    return found


def profile(modules: Optional[Sequence[str]] = None, include: Optional[Sequence[str]] = None,
            exclude: Optional[Sequence[str]] = None, **output: Any) -> Profile:
    """``with torchwrapper.profile() as prof: ...`` then ``prof.records()``; see Profile."""
    return Profile(modules, include, exclude, **output)


# Config keys the Session takes (the others are Profile's: modules, include, exclude, tensor_stats, track).
_SESSION_KEYS = _core.SESSION_CONFIG_KEYS


def _usable_cpus() -> Optional[int]:
    """The CPUs this process may run on (its affinity, as torch's default threads count them)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _torch_threads() -> Optional[int]:
    """torch's intra-op threads now (None before torch is imported)."""
    torch = sys.modules.get("torch")
    try:
        return int(torch.get_num_threads()) if torch is not None else None
    except Exception:  # a torch too broken to say: the manifest says nothing
        return None


def _cuda_available() -> bool:
    """Whether torch sees a CUDA device (False for a CPU build of torch, or without a driver)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_available())
    except Exception:  # a broken driver install: no GPU timing, the program goes on
        return False


def cupti_candidates() -> List[str]:
    """CUPTI libraries to try, best first: the one installed with torch (the nvidia-cuda-cupti wheel,
    which matches torch's CUDA runtime: nvidia/cu13/lib or nvidia/cuda_cupti/lib), then one in
    torch/lib. The C library tries $TW_CUPTI_LIBRARY before these, and $CUDA_HOME, /usr/local/cuda
    and the loader's path after them."""
    import glob

    found: List[str] = []
    try:
        spec = importlib.util.find_spec("nvidia")  # a namespace package: nothing is imported
    except (ImportError, ValueError):
        spec = None
    for root in list(spec.submodule_search_locations or []) if spec is not None else []:
        for sub in ("cu13", "cuda_cupti", "cu12"):
            # libcupti.so.13 before libcupti.so.2025.x: the soname the CUDA runtime links.
            found.extend(sorted(glob.glob(os.path.join(root, sub, "lib", "libcupti.so*")), key=len))
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "__file__", None):
        found.extend(sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcupti*.so*"))))
    return found


def _torch_version() -> Optional[str]:
    torch = sys.modules.get("torch")
    return getattr(torch, "__version__", None) if torch is not None else None


class _ExitGuard:
    """Nothing is lost when the program ends without stop(): at interpreter exit (normal end,
    uncaught exception, sys.exit, KeyboardInterrupt from SIGINT), on SIGTERM (the profile is
    stopped and flushed, then SIGTERM's previous behaviour follows), and in multiprocessing's
    children.

    How multiprocessing's children end: a spawn child returns from spawn_main through sys.exit, so
    atexit runs. A fork or forkserver child runs Process._bootstrap and then os._exit, which skips
    atexit; but _bootstrap first clears multiprocessing's finalizer registry, runs the callbacks of
    util.register_after_fork, runs the target, and then util._exit_function, which calls the
    finalizers. So the flush is a util.Finalize (exitpriority 100: before the finalizers of the
    program's own queues and pools): registered when profiling starts (a child that starts
    profiling inside its target, when it first imports torch), and again by an after-fork callback
    in every child forked after that (the registry it inherits is cleared)."""

    def __init__(self) -> None:
        self.active: Optional[Profile] = None
        self.previous_sigterm: Any = None
        self.installed_sigterm = False
        self.atexit_registered = False

    def started(self, prof: Profile) -> None:
        self.active = prof
        if not self.atexit_registered:
            atexit.register(self.at_exit)
            os.register_at_fork(after_in_child=self.after_fork_in_child)
            mp_util = sys.modules.get("multiprocessing.util")  # torch imports it
            if mp_util is not None:
                mp_util.register_after_fork(self, _ExitGuard.after_multiprocessing_fork)
                mp_util.Finalize(None, self.at_exit, exitpriority=100)
            self.atexit_registered = True
        if threading.current_thread() is threading.main_thread() and not self.installed_sigterm:
            try:
                self.previous_sigterm = signal.signal(signal.SIGTERM, self.on_sigterm)
                self.installed_sigterm = True
            except (ValueError, OSError):  # not the main interpreter, or no signals here
                pass

    def stopped(self, prof: Profile) -> None:
        if self.active is prof:
            self.active = None
        if self.installed_sigterm and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) == self.on_sigterm:
                signal.signal(signal.SIGTERM, self.previous_sigterm)
            self.installed_sigterm = False

    def at_exit(self) -> None:
        if self.active is not None:
            self.active.stop()

    def on_sigterm(self, signum: int, frame: Any) -> None:
        previous = self.previous_sigterm
        self.at_exit()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        else:  # the default: die of SIGTERM, as without the profiler
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def after_fork_in_child(self) -> None:
        # The SIGTERM handler is inherited; stop() restores the previous one as usual.
        self.installed_sigterm = self.active is not None and signal.getsignal(signal.SIGTERM) == self.on_sigterm

    def after_multiprocessing_fork(self) -> None:
        """In a child started by multiprocessing, whose inherited finalizers were just cleared."""
        sys.modules["multiprocessing.util"].Finalize(None, self.at_exit, exitpriority=100)


_exit_guard = _ExitGuard()


__all__ = ["Profile", "profile"]
