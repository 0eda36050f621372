# SPDX-License-Identifier: MIT
"""The API of the original TorchWrapper: TorchWrapper(config).start(myCode), callRecords, the
DataFrame, getAPIName, getAttributes."""
from __future__ import annotations

import functools
import json
import os
import sys
import types
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional

from ._config import Given, given, load_config
from ._files import ORIGINAL_COLUMNS, Record, load, read_rows
from ._patch import WRAPPER_TYPES
from ._patch import generation as _patch_generation
from ._patch import installed_originals as _installed_originals
from ._profile import Profile

# DataFrame columns: the original tool's first, then ours.
COLUMNS = ORIGINAL_COLUMNS


class TorchWrapper:
    """Profiles every torch call of a piece of code.

    >>> wrapper = TorchWrapper({"out_dir": "./output", "format": "csv", "file_max_size": "10MB"})
    >>> result = wrapper.start(myCode)        # runs myCode profiled, returns what it returns
    >>> wrapper.callRecords["torch.randn"]["TotalTime(ms)"]

    Also ``wrapper.start()`` ... ``wrapper.stop()``, ``with TorchWrapper(config):`` and
    ``@TorchWrapper(config)`` on a function. Each run writes its own files in out_dir.
    """

    def __init__(self, config: Given = None, **overrides: Any) -> None:
        # config and overrides are one source (the program's): see _config.py for the others
        self.config: Dict[str, Any] = load_config(given(config, overrides))
        self._profile: Optional[Profile] = None
        self._call_records: Optional[dict] = None
        self._metrics: Dict[str, Callable[[Any], Dict[str, Any]]] = {}

    def register_metric(self, name: str, fn: Callable[[Any], Dict[str, Any]]) -> None:
        """A custom tensor statistic: fn(tensor) returns a dict of numbers (or one-element tensors,
        copied to the host with the other statistics); name it in tensor_stats["metrics"]. A function
        that raises or returns something else is dropped for that module, with one warning."""
        if not isinstance(name, str) or not name or not callable(fn):
            raise TypeError(f"register_metric(name, fn) needs a non-empty str and a callable, not {name!r} and "
                            f"{type(fn).__name__!r}")
        self._metrics[name] = fn

    # ---- running ----------------------------------------------------------------------------

    def start(self, myCode: Optional[Callable[..., Any]] = None, *args: Any, **kwargs: Any) -> Any:
        """Runs myCode(*args, **kwargs) profiled and returns its result; without myCode, starts
        profiling until stop()."""
        if myCode is not None and not callable(myCode):
            raise TypeError(f"start() needs a callable to run, not {type(myCode).__name__!r}")
        c = self.config
        self._profile = Profile(c["modules"], c["include"], c["exclude"], out_dir=c["out_dir"], format=c["format"],
                                file_max_size=c["file_max_size"], file_name_spec=c["file_name_spec"],
                                max_files=c["max_files"], max_total_size=c["max_total_size"],
                                flush_interval=c["flush_interval"],
                                buffer_size=c["buffer_size"], on_full=c["on_full"], manifest={"config": c},
                                args=c["args"], gpu=c["gpu"], tensor_stats=c["tensor_stats"], track=c["track"],
                                schedule=c["schedule"], records=c["records"], on_demand=c["on_demand"], sites=c["sites"],
                                aten=c["aten"], flops=c["flops"], peak_flops=c["peak_flops"], memory=c["memory"],
                                compress=c["compress"], detail=c["detail"],
                                metrics=self._metrics if c["tensor_stats"] is not None else None)
        self._call_records = None
        self._profile.start()
        if myCode is None:
            return self
        try:
            return myCode(*args, **kwargs)
        finally:
            self.stop()

    def stop(self) -> None:
        if self._profile is None:
            raise RuntimeError("stop() without start()")
        self._profile.stop()

    def step(self) -> int:
        """Ends the current step (see Profile.step()); returns the number of the step that begins."""
        if self._profile is None:
            raise RuntimeError("step() without start()")
        return self._profile.step()

    def __enter__(self) -> "TorchWrapper":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """As a decorator: every call of fn runs profiled."""
        @functools.wraps(fn)
        def profiled(*args: Any, **kwargs: Any) -> Any:
            return self.start(fn, *args, **kwargs)
        return profiled

    # ---- results ----------------------------------------------------------------------------

    @property
    def files(self) -> List[str]:
        """The record files of the last run, oldest first."""
        return self._profile.files if self._profile else []

    def _rows(self):
        if self._profile is None:
            raise RuntimeError("nothing was profiled yet: call start() first")
        return read_rows(self.files)

    @property
    def callRecords(self) -> Dict[str, Any]:
        """Per API: {"TotalTime(ms)": total, 1: {"detailedAPIName", "StartTimestamp", "CostTime(ms)",
        "Arguments"}, 2: {...}, ...}, in call order (see call_records). Built from the files, so for
        runs whose records fit in memory; summary() is cheap at any size."""
        if self._call_records is None:
            self._call_records = call_records(self._rows(), self._profile.detailed_names() if self._profile else {})
        return self._call_records

    def _repr_html_(self):
        """In a notebook, a wrapper that has profiled shows tw-report's page of its files."""
        if self._profile is None or self._profile.session.active:
            return None
        return self._profile._repr_html_()

    def dataframe(self):
        """One row per call: the original columns (API Name, Total Time (ms), Call Number, Start
        Timestamp, Cost Time (ms), Arguments), then Self Time (ms), GPU Time (ms), Thread, PID,
        Depth, Call ID, Parent ID, Error, Module (the instance path of an nn.Module forward, its
        model's class first: GPT2LMHeadModel.transformer.h.0, the model itself GPT2LMHeadModel),
        Step, Forward Call ID and Forward API (for an autograd node: the forward
        call that created it; 0 and "" for other rows). torchwrapper.load(out_dir) gives the same
        calls with typed, unit-suffixed columns."""
        if self._profile is None:
            raise RuntimeError("nothing was profiled yet: call start() first")
        return load(self.files, original_names=True)

    def stats(self):
        """Tensor statistics (config tensor_stats): a DataFrame with one row per tensor of a module
        call: call_id, step, module (instance path), class, tensor (input, output, weight, grad),
        index, name, shape, dtype, device, numel, mean, std, min, max, zeros, nan, inf, custom (a dict
        of custom metrics, or None)."""
        import pandas

        columns, rows = self._need_profile().stats_rows()
        frame = pandas.DataFrame(rows, columns=columns)
        frame["shape"] = frame["shape"].map(lambda s: tuple(s) if isinstance(s, list) else s)
        return frame

    def updates(self):
        """Parameter updates (config track): a DataFrame with one row per in-place update of a
        parameter or gradient: call_id and api of the call that made it, outer_call_id (the
        outermost call in progress, e.g. the optimizer's step), parameter (its name in the model),
        tensor ("parameter" or "grad"), version (the tensor's version counter after it; None when a
        gradient was set to None), attribute (for module.weight = ..., the attribute name)."""
        import pandas

        columns, rows = self._need_profile().updates_rows()
        return pandas.DataFrame(rows, columns=columns)

    def modules(self) -> Dict[str, Any]:
        """The modules of the models that ran, as in out_dir/modules.json: {"roots": [{"path",
        "class"}], "modules": [{"path", "class", "parent", "parameters": {name: shape}, "calls"}]}."""
        return self._need_profile().module_tree()

    def _need_profile(self) -> Profile:
        if self._profile is None:
            raise RuntimeError("nothing was profiled yet: call start() first")
        return self._profile

    def summary(self):
        """Per-API totals computed by the C writer while recording (cheap at any size): a DataFrame
        with api, calls, errors, total/self/GPU/min/mean/max/p50/p95/p99 in ms."""
        import pandas

        if self._profile is None:
            raise RuntimeError("nothing was profiled yet: call start() first")
        path = os.path.join(self.config["out_dir"], "summary.json")
        with open(path) as f:
            apis = json.load(f)["apis"]
        frame = pandas.DataFrame(apis)
        for column in [c for c in frame.columns if c.endswith("_ns")]:
            frame[column[:-3] + "_ms"] = frame.pop(column) / 1e6
        return frame


def call_records(rows: Iterable[Record], detailed: Mapping[str, str]) -> Dict[str, Any]:
    """The original tool's callRecords from records in the order the calls started: per API, its
    total (summed in ns, then one rounding to ms) and its calls numbered from 1 in that order, each
    with detailedAPIName (detailed[api], else the API name), StartTimestamp (epoch ns),
    CostTime(ms) and Arguments (the argument summary, as in the files)."""
    records: Dict[str, Any] = {}
    total_ns: Dict[str, int] = {}
    for r in rows:
        entry = records.get(r.api)
        if entry is None:
            entry = records[r.api] = {"TotalTime(ms)": 0.0}
            total_ns[r.api] = 0
        total_ns[r.api] += r.cost_ns
        entry[len(entry)] = {"detailedAPIName": detailed.get(r.api, r.api), "StartTimestamp": r.start_ns,
                             "CostTime(ms)": r.cost_ns / 1e6, "Arguments": r.args}
    for api, entry in records.items():
        entry["TotalTime(ms)"] = total_ns[api] / 1e6
    return records


# ---- names -----------------------------------------------------------------------------------

_names: Dict[Any, Any] = {}


def _name_index() -> Dict[Any, Any]:
    """id -> (object, API name) for everything under torch that has a public name.

    Rebuilt when a module was imported or a session installed or removed wrappers (discovery
    cannot see an original behind its wrapper: while a session runs, the originals are named by
    the wrappers that stand in for them, whose names were given before they were installed)."""
    import sys

    from ._discover import discover

    key = (len(sys.modules), _patch_generation())
    if _names.get("key") != key:
        _names.clear()
        _names.update(discover(exclude=[]).names)
        for original, name in _installed_originals():
            _names[id(original)] = (original, name)
        _names["key"] = key
    return _names


def _named(obj: Any) -> Optional[str]:
    """The API name of obj if the index or a wrapper names it, else None."""
    if isinstance(obj, WRAPPER_TYPES):
        return obj.api_name
    entry = _name_index().get(id(obj))
    if entry is not None and entry[0] is obj:
        return entry[1]
    return None


def _decorated(obj: Any) -> List[Any]:
    """obj and what it decorates, outermost first: the ``__wrapped__`` chain that functools.wraps
    leaves (bounded, and cut at a cycle)."""
    chain = [obj]
    while len(chain) < 16:
        try:
            inner = inspect_getattr(chain[-1], "__wrapped__")
        except Exception:  # noqa: BLE001 - an object whose attributes raise is named by its qualname
            break
        if inner is None or any(inner is seen for seen in chain):
            break
        chain.append(inner)
    return chain


def inspect_getattr(obj: Any, attr: str) -> Any:
    """getattr that reads instance and class dictionaries only (no __getattr__ hooks run: some
    torch objects warn or import when unknown attributes are asked for)."""
    import inspect

    return inspect.getattr_static(obj, attr, None) if not isinstance(obj, WRAPPER_TYPES) else obj.__wrapped__


def _by_home(obj: Any) -> Optional[str]:
    """A function defined in a class body, named through its class: ``module.Class.attr`` resolved
    from obj's __module__ and __qualname__ to the class, whose public name is stable, when that
    class attribute is obj or decorates it. Torch replaces some class attributes at run time (the
    first construction of an optimizer class wraps ``cls.step`` in a hook), so identity alone
    would name the same method differently before and after."""
    import sys

    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        return None
    *owner_path, attr = qualname.split(".")
    if not owner_path:
        return None
    owner: Any = sys.modules.get(module)
    for part in owner_path:
        owner = inspect_getattr(owner, part) if owner is not None else None
    if not isinstance(owner, type):
        return None
    raw = owner.__dict__.get(attr)
    if isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    if raw is None or not any(inner is obj for inner in _decorated(raw)):
        return None
    owner_name = _named(owner)
    return f"{owner_name}.{attr}" if owner_name is not None else None


def _optimizer_step(method: types.MethodType, name: str) -> Optional[str]:
    """The name an optimizer's bound step is recorded under, when it is a torch optimizer's step:
    after the nearest class of the optimizer with a public name (``adamw.step`` is
    ``torch.optim.AdamW.step``, though the function is Adam's when AdamW inherits it; see
    _discover's Target.shared). None for any other method, and for a step of the user's own."""
    optim = sys.modules.get("torch.optim")
    optimizer = getattr(optim, "Optimizer", None)
    if optimizer is None or getattr(method, "__name__", None) != "step" or not isinstance(method.__self__, optimizer):
        return None
    public = [n for n in map(_named, type(method.__self__).__mro__) if n is not None]
    if not public or name not in {f"{n}.step" for n in public}:
        return None
    return f"{public[0]}.step"


def getAPIName(obj: Any) -> str:
    """The shortest public API name of a torch object: getAPIName(torch.optim.Adam) is
    "torch.optim.Adam" (not "Adam" or "torch.optim.adam.Adam"). Classes, functions, builtins,
    methods, bound methods and modules; objects outside torch give "module.qualname".

    The name depends on the object and torch's public module tree only: not on what was imported
    first, nor on whether a profiling session ran or is running, nor on torch having decorated a
    class attribute since (a decorator made with functools.wraps is named after what it wraps).
    An optimizer's bound step is named after its class, as it is recorded: ``getAPIName(adamw.step)``
    is "torch.optim.AdamW.step" although AdamW inherits Adam's step (``torch.optim.AdamW.step``,
    the function, is Adam's, and is named so unless a profile or torch gave AdamW a step of its own)."""
    if isinstance(obj, WRAPPER_TYPES):
        return obj.api_name
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if isinstance(obj, types.MethodType):
        name = getAPIName(obj.__func__)
        return _optimizer_step(obj, name) or name
    if isinstance(obj, (staticmethod, classmethod)):
        return getAPIName(obj.__func__)
    for inner in _decorated(obj):
        name = _named(inner)
        if name is not None:
            return name
    if isinstance(obj, types.FunctionType):
        name = _by_home(obj)
        if name is not None:
            return name
    owner = getattr(obj, "__self__", None)
    if isinstance(obj, types.BuiltinMethodType) and owner is not None and not isinstance(owner, types.ModuleType):
        # x.add: a C method bound to an instance
        cls = owner if isinstance(owner, type) else type(owner)
        return f"{getAPIName(cls)}.{obj.__name__}"
    module = getattr(obj, "__module__", None) or type(obj).__module__
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{module}.{qualname}"


def getAttributes(obj: Any) -> List[str]:
    """The API names of the public callables under obj (a module or a class), sorted."""
    base = getAPIName(obj)
    names = []
    for attr in dir(obj):
        if attr.startswith("_"):
            continue
        try:
            value = getattr(obj, attr)
        except Exception:  # noqa: BLE001 - a lazy attribute that fails is not listed
            continue
        if callable(value):
            names.append(f"{base}.{attr}")
    return sorted(names)


__all__ = ["COLUMNS", "TorchWrapper", "getAPIName", "getAttributes"]
