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

import difflib
import fnmatch
import json
import math
import numbers
import os
import random
import sys
import warnings
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _core

MODULES_FILE = "modules.json"

# ---- tensor statistics -------------------------------------------------------------------------------

BUILTIN_METRICS = ("shape", "dtype", "mean", "std", "min", "max", "zeros", "nan", "inf")
TENSOR_ROLES = ("input", "output", "weight", "grad")
STATS_COLUMNS = ["call_id", "step", "module", "class", "tensor", "index", "name", "shape", "dtype", "device", "numel",
                 "mean", "std", "min", "max", "zeros", "nan", "inf", "custom"]
UPDATES_COLUMNS = ["call_id", "api", "outer_call_id", "parameter", "tensor", "version", "attribute"]
MAX_TENSORS_PER_ROLE = 32      # tensors of one call's inputs (or outputs) looked at, at most
PENDING_BYTES = 64 << 20       # snapshots held before they are reduced (on their device) within a step
DIRECT_NUMEL = 16384           # tensors this large are reduced at once, not copied for the step's batch
REDUCE_CHUNK = 1 << 20         # elements converted to float64 at a time when a large tensor is reduced
_WIDTH = {"direct": 8, "segment": 7, "empty": 0}   # numbers per row in the step's results
BATCH_SMALL_ON_CPU = False     # small CPU tensors are reduced one by one too (cheaper there; tests set it)


class StatsOptions:
    """The validated ``tensor_stats`` configuration, with the custom metric functions."""

    def __init__(self, config: Dict[str, Any], metrics: Optional[Dict[str, Callable[[Any], Dict[str, Any]]]] = None
                 ) -> None:
        self.tensors = frozenset(config["tensors"])
        self.custom = dict(metrics or {})
        for name, fn in self.custom.items():
            if not callable(fn):
                raise TypeError(f"metric function {name!r} is a {type(fn).__name__!r}, not a callable "
                                f"(tensor -> dict of numbers)")
        names = list(config["metrics"])
        unknown = [m for m in names if m not in BUILTIN_METRICS and m not in self.custom]
        if unknown:
            raise ValueError(f"tensor_stats metric {unknown[0]!r} is not known: give built-in metrics "
                             f"({', '.join(BUILTIN_METRICS)}) or names of functions registered with "
                             f"register_metric() ({', '.join(sorted(self.custom)) or 'none registered'})")
        self.metrics = frozenset(names)
        self.functions = [(m, self.custom[m]) for m in names if m in self.custom]
        self.modules = list(config["modules"])
        self.every = int(config.get("every") or 1)
        self.sample = config.get("sample")


def _csv_text(text: str) -> str:
    if "," in text or '"' in text or "\n" in text or "\r" in text or text[:1] == " " or text[-1:] == " ":
        return '"' + text.replace('"', '""') + '"'
    return text


def _number(value: float) -> str:
    """A float exactly (repr round-trips), or an integer value without ".0"."""
    if value != value or value in (math.inf, -math.inf):
        return repr(value)
    if value == int(value) and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(value)


def _json_number(value: float) -> str:
    if value != value or value in (math.inf, -math.inf):
        return "null"  # JSON has no NaN or Infinity; the nan and inf counts say which
    return _number(value)


class _Group:
    """Snapshots of tensors of one device and dtype, flattened into buffers, not reduced yet."""

    __slots__ = ("buffers", "lengths", "rows")

    def __init__(self) -> None:
        self.buffers: List[Any] = []
        self.lengths: List[int] = []
        self.rows: List[list] = []


class _StatsEngine:
    """Tensor statistics, computed on each tensor's device and copied to the host once per step.

    At a module call (before it for inputs and weights, after it for outputs: an in-place module such
    as ReLU(inplace=True) changes its input), the selected tensors of the call are copied, per device and
    dtype, into one flat buffer (one op: a snapshot, since the program may change them in place
    afterwards). At the end of a step, each group's buffers are reduced together with segment
    reductions (sum, sum of squares, min, max, counts of zeros, NaN and Inf: about 16 ops per group
    whatever the number of tensors), the results of a device are concatenated and copied to the host
    at once (non-blocking on CUDA: read at the next step), and rows go to the "stats" stream.
    Mean and standard deviation (with Bessel's correction, as Tensor.std) come from float64 sums, the
    deviations taken from the mean. Tensors of DIRECT_NUMEL elements or more are reduced at once
    instead (one op per statistic, no copy), their results joining the others for the host copy.
    """

    def __init__(self, options: StatsOptions, tracer: "Tracer") -> None:
        import torch

        self.torch = torch
        self.options = options
        self.tracer = tracer
        self.step = 0
        self.root_calls = 0
        self.rng = random.Random(0x7477)   # never the program's random generators
        self.sampling = self._decide(0)
        self.groups: Dict[Tuple[Any, Any], _Group] = {}
        self.pending_bytes = 0
        self.reduced: List[Tuple[Any, Any, List[list]]] = []   # (device, (k, 7) tensor, rows)
        self.direct: Dict[Any, List[Tuple[Any, list]]] = {}     # device -> (8 numbers, row) of large tensors
        self.inflight: List[Tuple[Any, Any, List[list]]] = []  # (event, host tensor, rows) on CUDA
        self.custom_tensors: Dict[Any, List[Tuple[list, str, Any]]] = {}
        self.selected: Dict[Tuple[int, type], bool] = {}
        self.weights_done: set = set()
        self.step_modules: Dict[int, Tuple[Any, str]] = {}
        self.disabled: set = set()        # (metric name, module path) whose function failed
        self.rows_out: List[tuple] = []   # without out_dir: rows kept for stats()
        self.dropped_rows = 0
        self.empty: Dict[Tuple[Any, Any], Any] = {}
        globs = [g for g in options.modules if g != "*"]
        self.match_all = len(globs) < len(options.modules)
        self.globs = globs
        self.unchecked_globs = list(globs)

    def _decide(self, step: int) -> bool:
        if self.options.sample is not None:
            return self.rng.random() < self.options.sample
        return step % self.options.every == 0

    # ---- steps ---------------------------------------------------------------------------------

    def root_call(self) -> None:
        """The model's outermost call begins: a new step (from the second one on)."""
        if self.root_calls > 0:
            self.flush()
            self.step += 1
            self.sampling = self._decide(self.step)
            self.weights_done.clear()
            self.step_modules.clear()
        self.root_calls += 1

    # ---- selection -----------------------------------------------------------------------------

    def is_selected(self, module: Any, module_id: int, path: str) -> bool:
        key = (module_id, type(module))
        hit = self.selected.get(key)
        if hit is None:
            if self.match_all:
                hit = True
            else:
                names = (path, self.tracer.class_name(type(module)))
                names += (names[1] + ".forward",)
                hit = any(fnmatch.fnmatchcase(n, g) for g in self.globs for n in names)
            self.selected[key] = hit
        return hit

    def check_globs(self, paths: Iterable[str], classes: Iterable[str], final: bool) -> None:
        """Warns once about globs that match no module path nor class (nearest names listed)."""
        paths, classes = list(paths), sorted(set(classes))
        names = paths + classes + [c + ".forward" for c in classes]
        still = []
        for glob in self.unchecked_globs:
            if any(fnmatch.fnmatchcase(n, glob) for n in names):
                continue
            still.append(glob)
        self.unchecked_globs = still
        if final:
            for glob in still:
                near = difflib.get_close_matches(glob, names, n=5, cutoff=0.4)
                self.tracer.warn_once(f"glob:{glob}", f"tensor_stats module glob {glob!r} matches no module path nor "
                                                      f"module class; nearest names: {', '.join(near) or '(none)'}")
            self.unchecked_globs = []

    # ---- taking snapshots ----------------------------------------------------------------------

    def _tensors(self, obj: Any, name: str, out: List[Tuple[str, Any]], depth: int = 0) -> None:
        Tensor = self.torch.Tensor
        if isinstance(obj, Tensor):
            if len(out) < MAX_TENSORS_PER_ROLE:
                out.append((name, obj))
        elif depth < 3 and isinstance(obj, (tuple, list)):
            for i, item in enumerate(obj):
                self._tensors(item, f"{name}.{i}" if name else str(i), out, depth + 1)
        elif depth < 3 and isinstance(obj, dict):
            for key, item in obj.items():
                self._tensors(item, f"{name}.{key}" if name else str(key), out, depth + 1)

    def before_call(self, module: Any, module_id: int, call_id: int, cls: str, path: str, args: tuple,
                    kwargs: dict) -> None:
        if not self.is_selected(module, module_id, path):
            return
        tensors: List[Tuple[str, str, Any]] = []
        roles = self.options.tensors
        if "input" in roles:
            found: List[Tuple[str, Any]] = []
            self._tensors(args, "", found)
            if kwargs:
                self._tensors(kwargs, "", found)
            tensors.extend(("input", n, t) for n, t in found)
        key = id(module)
        if "weight" in roles and key not in self.weights_done:
            self.weights_done.add(key)
            tensors.extend(("weight", n, p) for n, p in module.named_parameters(recurse=False))
        if "grad" in roles:
            self.step_modules[key] = (module, path, cls)
        if tensors:
            self.snapshot(call_id, cls, path, tensors)

    def after_call(self, module: Any, module_id: int, call_id: int, cls: str, path: str, result: Any) -> None:
        if not self.is_selected(module, module_id, path):
            return
        found: List[Tuple[str, Any]] = []
        self._tensors(result, "", found)
        if found:
            self.snapshot(call_id, cls, path, [("output", n, t) for n, t in found])

    def grads(self, call_id: int) -> None:
        """After a backward: gradients of the parameters of the modules seen in this step."""
        if not self.sampling:
            return
        for module, path, cls in list(self.step_modules.values()):
            found = [("grad", n, p.grad) for n, p in module.named_parameters(recurse=False) if p.grad is not None]
            if found:
                self.snapshot(call_id, cls, path, found)

    def snapshot(self, call_id: int, cls: str, path: str, tensors: List[Tuple[str, str, Any]]) -> None:
        """Statistics of a call's tensors: small ones copied into their group's buffer (reduced at
        the step's end, with the others), large ones reduced now (the ops cost less than the copy)."""
        torch = self.torch
        enabled = torch.is_grad_enabled()
        if enabled:
            torch._C._set_grad_enabled(False)
        try:
            small: Dict[Tuple[Any, Any], List[Tuple[Any, list]]] = {}
            index: Dict[str, int] = {}
            for role, name, t in tensors:
                if t.layout != torch.strided or t.is_complex() or t.is_meta:
                    continue   # sparse, complex and meta tensors: not summarized
                n = index.get(role, 0)
                index[role] = n + 1
                device = t.device
                numel = t.numel()
                row = [call_id, self.step, path, cls, role, n, name, list(t.shape),
                       str(t.dtype).replace("torch.", ""), str(device), numel, "segment", None]
                if self.options.functions:
                    row[12] = self._custom(t, path, row)
                if numel == 0:
                    row[11] = "empty"
                    self.direct.setdefault(device, []).append((None, row))
                elif numel >= DIRECT_NUMEL or (device.type == "cpu" and not BATCH_SMALL_ON_CPU):
                    # On the CPU an op costs microseconds, not a kernel launch, and segment reductions
                    # are slower than reducing each tensor: no batching there (measured).
                    row[11] = "direct"
                    self.direct.setdefault(device, []).append((self._reduce_one(t), row))
                else:
                    small.setdefault((device, t.dtype), []).append((t, row))
            for (device, dtype), items in small.items():
                group = self.groups.get((device, dtype))
                if group is None:
                    group = self.groups[(device, dtype)] = _Group()
                flat = [t for t, _ in items]
                if len(flat) == 1:   # flatten_dense_tensors returns a view of a single tensor
                    empty = self.empty.get((device, dtype))
                    if empty is None:
                        empty = self.empty[(device, dtype)] = torch.empty(0, dtype=dtype, device=device)
                    flat.append(empty)
                buffer = torch._C._nn.flatten_dense_tensors(flat)
                group.buffers.append(buffer)
                self.pending_bytes += buffer.numel() * buffer.element_size()
                for t, row in items:
                    group.lengths.append(row[10])
                    group.rows.append(row)
        finally:
            if enabled:
                torch._C._set_grad_enabled(True)
        if self.pending_bytes > PENDING_BYTES:
            self.reduce()

    def _reduce_one(self, t: Any) -> Any:
        """A large tensor's statistics now, as 8 float64 numbers on its device: sum, the centering
        mean used, sum of squared deviations from it, min, max, count of nonzero values, of
        non-finite ones (x - x is NaN only for them) and of infinities.

        Every sum is accumulated in float64 by torch's own reductions (cascade sums, not a BLAS dot
        whose summation order and precision depend on the CPU's kernel), and the deviations are
        taken in float64 from the float64 mean: the statistics are accurate to ~1e-15 relative on
        any CPU. The float64 copy is made REDUCE_CHUNK elements at a time, so a large tensor costs
        at most 8 * REDUCE_CHUNK bytes of extra memory."""
        torch = self.torch
        v = t.reshape(-1)
        if v.dtype == torch.bool:
            v = v.to(torch.uint8)
        if not v.is_floating_point():
            v = v.to(torch.float64)
        elif v.dtype in (torch.float16, torch.bfloat16):
            v = v.float()
        s = v.sum(dtype=torch.float64)
        m = s / v.numel()
        squares = None
        for chunk in v.split(REDUCE_CHUNK):
            d = chunk.to(torch.float64) - m
            part = d.square_().sum()
            squares = part if squares is None else squares + part
        minmax = torch.aminmax(v)
        floats = torch.stack((m, squares, minmax[0].to(torch.float64), minmax[1].to(torch.float64)))
        counts = torch.stack(self._indicator_sums(v, None))
        return torch.cat((s.reshape(1), floats, counts.to(torch.float64)))

    def _indicator_sums(self, x: Any, lengths: Any) -> Tuple[Any, Any, Any]:
        """Counts of nonzero values (NaN aside), of non-finite ones and of infinities, over the whole
        of x or over its segments, from sums of 0/1 (and -1) values made by arithmetic: comparisons
        to bool are several times slower on CPU. Float32 sums of them are exact below 2^24."""
        torch = self.torch
        a = x.abs()
        if lengths is not None:
            seg = torch.segment_reduce
            nonzero = torch.nan_to_num(a.sign(), nan=0.0)                    # 1 for x != 0, 0 for 0 and NaN
            nonfinite = torch.nan_to_num(x - x, nan=1.0)                      # x - x is NaN only for NaN, +-inf
            inf = torch.nan_to_num((a - torch.finfo(x.dtype).max).clamp(min=0.0), nan=0.0, posinf=1.0)
            return tuple(seg(t, "sum", lengths=lengths) for t in (nonzero, nonfinite, inf))
        # One tensor: nansum skips NaN, so fewer passes. clamp(a, 1, 1) is 1 but for NaN; x - x + 1
        # is 1 but for NaN and +-inf; sign(a) is 1 but for 0 (0) and NaN.
        dtype = None if x.numel() < (1 << 24) else torch.float64
        not_nan = torch.nansum(a.clamp(1.0, 1.0), dtype=dtype)
        finite = torch.nansum(x - x + 1.0, dtype=dtype)
        nonzero = torch.nansum(a.sign(), dtype=dtype)
        return nonzero, x.numel() - finite, not_nan - finite

    def _custom(self, t: Any, path: str, row: list) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        Tensor = self.torch.Tensor
        for metric, fn in self.options.functions:
            if (metric, path) in self.disabled:
                continue
            fn_name = getattr(fn, "__qualname__", None) or repr(fn)
            try:
                values = fn(t)
                if not isinstance(values, dict):
                    raise TypeError(f"returned a {type(values).__name__}, not a dict of numbers")
                for key, value in values.items():
                    if isinstance(value, Tensor):
                        if value.numel() != 1 or value.is_complex():
                            raise TypeError(f"returned {key!r}: a tensor of shape {list(value.shape)}, not one number")
                        self.custom_tensors.setdefault(value.device, []).append((row, f"{metric}.{key}", value))
                    elif isinstance(value, numbers.Real):
                        out[f"{metric}.{key}"] = float(value)
                    else:
                        raise TypeError(f"returned {key!r}: a {type(value).__name__}, not a number")
            except Exception as error:  # noqa: BLE001 - the program goes on without this metric here
                self.disabled.add((metric, path))
                self.tracer.warn_once(f"metric:{metric}:{path}",
                                      f"metric function {fn_name} ({metric!r}) failed on module {path!r}: {error}; "
                                      f"that metric is dropped for this module")
                for key in [k for k in out if k.startswith(metric + ".")]:
                    del out[key]
                for device in self.custom_tensors:
                    self.custom_tensors[device] = [e for e in self.custom_tensors[device]
                                                   if not (e[0] is row and e[1].startswith(metric + "."))]
        return out

    # ---- reducing ------------------------------------------------------------------------------

    def reduce(self) -> None:
        """Reduces the pending snapshots of every group (on their devices); results stay there."""
        torch = self.torch
        enabled = torch.is_grad_enabled()
        if enabled:
            torch._C._set_grad_enabled(False)
        try:
            for (device, _dtype), group in self.groups.items():
                if not group.rows:
                    continue
                flat = group.buffers[0] if len(group.buffers) == 1 else torch.cat(group.buffers)
                x = flat.to(torch.float64)
                lengths = torch.tensor(group.lengths, device=device)
                seg = torch.segment_reduce
                total = seg(x, "sum", lengths=lengths)
                # Two passes: squared deviations from each segment's mean (no cancellation).
                mean = total / lengths.clamp(min=1)
                dev = x - torch.repeat_interleave(mean, lengths, output_size=x.numel())
                sums = torch.stack((total, seg(dev * dev, "sum", lengths=lengths),
                                    seg(x, "min", lengths=lengths), seg(x, "max", lengths=lengths)), 1)
                nonzero, nonfinite, infs = self._indicator_sums(x, lengths)
                nans = nonfinite - infs
                counts = torch.stack((lengths.to(torch.float64) - nonzero - nans, nans, infs), 1)
                self.reduced.append((device, torch.cat((sums, counts), 1), group.rows))
            self.groups.clear()
            self.pending_bytes = 0
        finally:
            if enabled:
                torch._C._set_grad_enabled(True)

    def flush(self, final: bool = False) -> None:
        """End of a step: reduce, copy the results of each device to the host once, write rows."""
        torch = self.torch
        self.reduce()
        ready = self.inflight
        self.inflight = []
        parts: Dict[Any, List[Any]] = {}    # device -> flat float64 tensors, in the order of rows
        rows: Dict[Any, List[list]] = {}
        for device, values, group_rows in self.reduced:
            parts.setdefault(device, []).append(values.reshape(-1))
            rows.setdefault(device, []).extend(group_rows)
        self.reduced = []
        for device, items in self.direct.items():
            values = [v for v, _ in items if v is not None]
            if values:
                parts.setdefault(device, []).append(torch.cat(values))
            rows.setdefault(device, []).extend(r for _, r in items)
        self.direct = {}
        custom = self.custom_tensors
        self.custom_tensors = {}
        for device, extra in custom.items():   # custom metrics computed as tensors ride along
            parts.setdefault(device, []).append(torch.stack([v.detach().reshape(()).to(torch.float64)
                                                             for _, _, v in extra]))
            rows.setdefault(device, [])
        for device, rows_of_device in rows.items():
            flat = parts.get(device, [])
            if not flat:   # only empty tensors
                ready.append((None, torch.empty(0, dtype=torch.float64), rows_of_device, []))
                continue
            values = flat[0] if len(flat) == 1 else torch.cat(flat)
            extra = custom.get(device, [])
            if device.type == "cuda" and not final:
                host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
                host.copy_(values, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self.inflight.append((event, host, rows[device], extra))
            else:
                ready.append((None, values.to("cpu"), rows[device], extra))
        self._emit(ready)
        if final and self.inflight:
            inflight, self.inflight = self.inflight, []
            self._emit(inflight)

    def _emit(self, ready: List[tuple]) -> None:
        self.out: List[str] = []
        for event, host, rows, extra in ready:
            if event is not None:
                event.synchronize()
            numbers_ = host.reshape(-1).tolist()
            widths = [_WIDTH[row[11]] for row in rows]
            at = sum(widths)
            for j, (row, key, _v) in enumerate(extra):   # custom metrics given as tensors, after the rest
                row[12] = dict(row[12] or {}, **{key: numbers_[at + j]})
            at = 0
            for row, width in zip(rows, widths):
                self._write(row, numbers_[at:at + width])
                at += width
        if self.out:
            self.tracer.sink("stats", "".join(self.out))
            self.out = []

    def _write(self, row: list, v: List[float]) -> None:
        call_id, step, path, cls, role, index, name, shape, dtype, device, n, how, custom = row
        if how == "empty":
            mean = var = mn = mx = math.nan
            zeros = nans = infs = 0
        elif how == "direct":
            s, m, ss, mn, mx, nonzero, nonfinite, infs = v
            nans = nonfinite - infs
            zeros = n - nonzero - nans
            mean = s / n
            if math.isfinite(s):
                # ss is about m, the mean the deviations were taken from (the float64 mean itself:
                # the correction is 0 but for the rounding of s / n)
                var = (ss - n * (mean - m) ** 2) / (n - 1) if n > 1 else math.nan
            else:
                var = math.nan
        else:
            s, ss, mn, mx, zeros, nans, infs = v
            if n > 0:
                mean = s / n
                var = ss / (n - 1) if n > 1 and math.isfinite(s) else math.nan
            else:
                mean = var = mn = mx = math.nan
        std = math.sqrt(max(var, 0.0)) if var == var else math.nan   # rounding can leave var at -0.0...
        metrics = self.options.metrics
        values = [mean if "mean" in metrics else None, std if "std" in metrics else None,
                  mn if "min" in metrics else None, mx if "max" in metrics else None,
                  int(zeros) if "zeros" in metrics else None, int(nans) if "nan" in metrics else None,
                  int(infs) if "inf" in metrics else None]
        shape_out = shape if "shape" in metrics else None
        dtype_out = dtype if "dtype" in metrics else None
        record = (call_id, step, path, cls, role, index, name, shape_out, dtype_out, device, n, *values, custom or None)
        if self.tracer.sink is None:
            self.rows_out.append(record)
        else:
            self.out.append(self.tracer.format_row(record))


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

    def __init__(self, tracer: "Tracer", kinds: frozenset) -> None:
        import torch

        self.torch = torch
        self.tracer = tracer
        self.grads = "grads" in kinds
        self.entries: Dict[int, _Tracked] = {}
        self.by_tensor: Dict[int, int] = {}      # id(tensor) -> index
        self.params: Dict[int, int] = {}         # id(param) -> index, parameters only
        self.next_index = 1
        self.rows_out: List[tuple] = []
        self.setattr_original: Any = None
        self.setattr_installed: Any = None

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
        if self.entries.pop(index, None) is not None and not self.tracer.closed:
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
        record = (call_id, api, outer_id, name, kind, version, attribute)
        if self.tracer.sink is None:
            self.rows_out.append(record)
        else:
            self.tracer.sink("updates", self.tracer.format_row(record, UPDATES_COLUMNS))

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

    def update(self, subject: Any, api_id: int, call_id: int, outer_id: int) -> None:
        """An in-place API ran on a tracked tensor (or a list holding one)."""
        api = self.tracer.api_name(api_id)
        items = subject if isinstance(subject, (list, tuple)) else (subject,)
        for tensor in items:
            hit = _core.table_get("tracked", tensor)
            if hit is None:
                continue
            self._check(hit[0], call_id, api, outer_id)
            if self.grads and self.entries.get(hit[0]) is not None and self.entries[hit[0]].kind == "parameter":
                self._check_grad(hit[0], call_id, api, outer_id)   # clip_grad_norm_(parameters) scales grads

    def sweep(self, call_id: int, api: str, outer_id: int) -> None:
        """Every tracked tensor against its last version (around a boundary call)."""
        for index in list(self.params.values()):
            self._check(index, call_id, api, outer_id)
            if self.grads:
                self._check_grad(index, call_id, api, outer_id)

    # ---- module.weight = ... ------------------------------------------------------------------

    def install_setattr(self) -> None:
        Module = self.torch.nn.Module
        original = Module.__dict__["__setattr__"]
        tracer = weakref.ref(self.tracer)
        Tensor = self.torch.Tensor

        def __setattr__(module: Any, name: str, value: Any) -> None:
            original(module, name, value)
            if isinstance(value, Tensor):
                t = tracer()
                if t is not None and not t.closed:
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

    def attribute_set(self, module: Any, name: str, value: Any, path: Optional[str]) -> None:
        if path is None or name not in module._parameters:
            return
        full = f"{path}.{name}" if path else name
        index = self.by_tensor.get(id(value))
        if index is not None and self.entries[index].ref() is value and self.entries[index].name == full:
            return   # the same tensor again: `module.bias -= x` sets what __isub__ updated (an event already)
        index = self.track(value, full, "parameter")
        call_id, outer_id = _core.current_call()
        self.emit(call_id, "torch.nn.Module.__setattr__", outer_id, full, "parameter", value._version, name)
        self.entries[index].version = value._version


class _Root:
    """One model: the root module, weakly held, and the name its paths start with."""

    def __init__(self, module: Any, prefix: Optional[str], index: int) -> None:
        self.ref = weakref.ref(module)
        self.prefix = prefix      # None for the first root: plain named_modules() paths
        self.index = index        # order of discovery
        self.cls = type(module)
        self.retired = False      # taken over by a model found to contain it

    def path(self, name: str) -> str:
        if self.prefix is None:
            return name
        return self.prefix if name == "" else f"{self.prefix}:{name}"


class Tracer:
    """Hooks called by the C wrappers of a session (see python/core/module.h, tw_hooks_t)."""

    def __init__(self, out_dir: Optional[str] = None, stats: Optional[StatsOptions] = None, track: Sequence[str] = (),
                 format: str = "json") -> None:
        self.out_dir = out_dir
        self.format = format
        self.kinds = _core.KIND_MODULE_FORWARD
        self.names: Dict[int, Tuple[Any, str]] = {}   # id -> (object, public API name): a discovery plan's
        self._class_names: Dict[type, str] = {}
        self._api_names: Dict[int, str] = {}
        self.sink: Optional[Callable[[str, str], Any]] = None   # (kind, rows text) -> stream of the writer
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
        self._roots: List[_Root] = []          # live and dead, in order of discovery
        self._owner: Dict[int, _Root] = {}     # id(module) -> its root
        self._refs: Dict[int, weakref.ref] = {}
        self._path: Dict[int, str] = {}        # id(module) -> path
        self._info: Dict[str, Dict[str, Any]] = {}   # path -> modules.json entry
        self._calls: Dict[str, int] = {}       # path -> calls of dead instances
        self._warned: set = set()
        self._call_codes: Optional[frozenset] = None
        self.closed = False

    def class_name(self, cls: type) -> str:
        """A module class's public name (torch.nn.Conv2d), else module.qualname."""
        name = self._class_names.get(cls)
        if name is None:
            entry = self.names.get(id(cls))
            name = entry[1] if entry is not None and entry[0] is cls else f"{cls.__module__}.{cls.__qualname__}"
            self._class_names[cls] = name
        return name

    def api_name(self, api_id: int) -> str:
        name = self._api_names.get(api_id)
        if name is None:
            name = self._api_names[api_id] = _core.api_name(api_id)
        return name

    def attach(self, session: Any) -> None:
        """Once the session records: streams for the rows of statistics and updates."""
        self.session = session
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

    def format_row(self, values: Sequence[Any], columns: Sequence[str] = STATS_COLUMNS) -> str:
        """One row in the writer's format (CSV line or JSON object line)."""
        if self.format == "csv":
            out = []
            for v in values:
                if v is None:
                    out.append("")
                elif isinstance(v, str):
                    out.append(_csv_text(v))
                elif isinstance(v, float):
                    out.append(_number(v))
                elif isinstance(v, list):   # a shape
                    out.append('"[' + ",".join(map(str, v)) + ']"' if len(v) > 1 else "[" + ",".join(map(str, v)) + "]")
                elif isinstance(v, dict):
                    out.append(_csv_text(json.dumps(v, separators=(",", ":"), default=_json_default)))
                else:
                    out.append(str(v))
            return ",".join(out) + "\n"
        parts = []
        for key, v in zip(columns, values):
            if v is None:
                text = "null"
            elif isinstance(v, str):
                text = json.dumps(v, ensure_ascii=False)
            elif isinstance(v, float):
                text = _json_number(v)
            elif isinstance(v, bool):
                text = "true" if v else "false"
            elif isinstance(v, int):
                text = str(v)
            else:
                text = json.dumps(_finite(v), separators=(",", ":"), ensure_ascii=False)
            parts.append(f'"{key}":{text}')
        return "{" + ",".join(parts) + "}\n"

    # ---- called from C -------------------------------------------------------------------------

    def module_enter(self, module: Any) -> bool:
        """An outermost module call begins: the model's starts a step. Whether it is sampled."""
        stats = self.stats
        try:
            if self._path.get(id(module)) == "":
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

    def boundary_exit(self, token: Any, api_id: int, call_id: int, outer_id: int) -> None:
        api = self.api_name(api_id)
        if self.tracker is not None:
            try:
                self.tracker.sweep(call_id, api, outer_id)
            except Exception as error:  # noqa: BLE001
                self.warn_once("track", f"parameter tracking failed: {error!r}")
        stats = self.stats
        if stats is not None and "grad" in stats.options.tensors and api == "torch.autograd.backward":
            try:
                stats.grads(call_id)
            except Exception as error:  # noqa: BLE001
                self.warn_once("stats", f"gradient statistics failed: {error!r}")

    def update(self, subject: Any, api_id: int, call_id: int, outer_id: int) -> None:
        """An in-place API ran on a tracked tensor."""
        try:
            self.tracker.update(subject, api_id, call_id, outer_id)
        except Exception as error:  # noqa: BLE001
            self.warn_once("track", f"parameter tracking failed: {error!r}")

    def attribute_set(self, module: Any, name: str, value: Any) -> None:
        try:
            self.tracker.attribute_set(module, name, value, self._path.get(id(module)))
        except Exception as error:  # noqa: BLE001
            self.warn_once("track", f"parameter tracking failed: {error!r}")

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
        # contains this instance. Only nn.Module's own call frames are looked into (their `self`):
        # reading a frame's locals keeps a copy of them until the frame ends, which for these is
        # the end of the module call (a training loop's frame would keep its tensors alive).
        codes = self._call_codes
        if codes is None:
            codes = self._call_codes = frozenset(
                f.__code__ for f in (Module._call_impl, Module._wrapped_call_impl) if hasattr(f, "__code__"))
        running: List[Any] = []
        seen = set()
        while frame is not None:
            if frame.f_code in codes:
                candidate = frame.f_locals.get("self")
                if isinstance(candidate, Module) and id(candidate) not in seen:
                    seen.add(id(candidate))
                    running.append(candidate)
            frame = frame.f_back
        for candidate in reversed(running):
            if candidate is not module and self._contains(candidate, module):
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
        if self.tracker is not None:
            self.tracker.register((root.path(n), p) for n, p in model.named_parameters())
        if self.stats is not None and self.stats.unchecked_globs:
            self.stats.check_globs((root.path(n) for n, _ in named), (self.class_name(type(m)) for _, m in named),
                                   final=True)
        self.write_modules()

    def _retire(self, root: _Root) -> None:
        root.retired = True
        for key, owner in list(self._owner.items()):
            if owner is root:
                del self._owner[key]

    def _describe(self, path: str, name: str, module: Any, root: _Root) -> None:
        info = self._info.get(path)
        parent = None
        if name:
            parent = root.path(name.rpartition(".")[0])
        params = {n: list(p.shape) for n, p in module.named_parameters(recurse=False)}
        entry = {"path": path, "class": self.class_name(type(module)), "parent": parent, "parameters": params,
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
        roots = [{"path": r.path(""), "class": self.class_name(r.cls)} for r in self._roots if not r.retired]
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
        if self.tracker is not None:
            self.tracker.remove_setattr()
        for address, _module_id, calls in _core.table_clear("modules"):
            path = self._path.get(address)
            if path is not None and path in self._info:
                self._info[path]["calls"] += calls
        _core.table_clear("tracked")
        self.closed = True
        self._refs.clear()
        self.write_modules()
        self.session = self.sink = None

    def warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(f"torchwrapper: {message}", RuntimeWarning, stacklevel=2)


# ---- reading the files back ----------------------------------------------------------------------

_TEXT_COLUMNS = frozenset(["module", "class", "tensor", "name", "dtype", "device", "api", "parameter", "attribute"])


def _decode(text: Optional[str], column: str) -> Any:
    """A CSV field of a stats or updates row as its value."""
    if text is None or column in ("module", "name"):   # "": the model itself, an output that is one tensor
        return text
    if text == "":
        return None
    if column in _TEXT_COLUMNS:
        return text
    if text[0] in "[{":
        return json.loads(text)
    try:
        return int(text)
    except ValueError:
        return float(text)


def read_stream(out_dir: str, kind: str, columns: Sequence[str], pid: Optional[int] = None) -> List[tuple]:
    """The rows of a stream ("stats", "updates") of out_dir's files (of one process if pid is given),
    as tuples of values in the order of columns; JSON nulls and empty CSV fields are None."""
    from ._files import iter_stream_rows, record_files

    rows = []
    for path in record_files(out_dir, pid, kind=kind):
        csv_file = path.endswith(".csv")
        for row in iter_stream_rows(path):
            rows.append(tuple(_decode(row.get(c), c) if csv_file else row.get(c) for c in columns))
    return rows


def load_stats(out_dir: str, pid: Optional[int] = None) -> Any:
    """The tensor statistics written in out_dir (all processes, or one) as a DataFrame (columns:
    STATS_COLUMNS; shape as a tuple)."""
    import pandas

    frame = pandas.DataFrame(read_stream(out_dir, "stats", STATS_COLUMNS, pid), columns=STATS_COLUMNS)
    frame["shape"] = frame["shape"].map(lambda s: tuple(s) if isinstance(s, list) else s)
    return frame


def load_updates(out_dir: str, pid: Optional[int] = None) -> Any:
    """The parameter updates written in out_dir (all processes, or one) as a DataFrame (columns:
    UPDATES_COLUMNS)."""
    import pandas

    return pandas.DataFrame(read_stream(out_dir, "updates", UPDATES_COLUMNS, pid), columns=UPDATES_COLUMNS)


def load_modules(out_dir: str, pid: Optional[int] = None) -> Dict[str, Any]:
    """The module tree in out_dir/modules.json (modules-PID.json for a forked child's pid)."""
    name = MODULES_FILE if pid is None else f"modules-{pid}.json"
    path = os.path.join(out_dir, name)
    if pid is not None and not os.path.exists(path):
        path = os.path.join(out_dir, MODULES_FILE)
    with open(path) as f:
        return json.load(f)


def _json_default(value: Any) -> Any:
    return str(value)


def _finite(value: Any) -> Any:
    """value with NaN and infinities as None (JSON has none)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


__all__ = ["BUILTIN_METRICS", "MODULES_FILE", "STATS_COLUMNS", "StatsOptions", "Tracer", "UPDATES_COLUMNS",
           "load_modules", "load_stats", "load_updates", "read_stream"]
