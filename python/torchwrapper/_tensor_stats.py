# SPDX-License-Identifier: MIT
"""Tensor statistics of module calls (``tensor_stats``): which calls are sampled, the snapshots of
their inputs, outputs, weights and gradients, reduced in float64 on their device, and the rows of the
"stats" stream. Driven by the model watch (ModelWatch, _model_watch.py), whose names and rows it reads
through what the watch is underneath (WatchBase, _watch_base.py), never calling the watch back."""
from __future__ import annotations

import difflib
import fnmatch
import math
import numbers
import random
from typing import Any, Callable, Dict, Iterable, List, Optional, TYPE_CHECKING, Tuple

from . import _core

if TYPE_CHECKING:
    from ._watch_base import WatchBase


BUILTIN_METRICS = tuple(_core.TENSOR_STATS_METRICS.split())   # the validator's list (config_keys.c)
TENSOR_ROLES = ("input", "output", "weight", "grad")
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

    def __init__(self, options: StatsOptions, watch: "WatchBase") -> None:
        import torch

        self.torch = torch
        self.options = options
        self.watch = watch
        self.step = 0
        self.root_calls = 0
        self.rng = random.Random(0x7477)   # never the program's random generators
        self.sampling = self._decide(0)
        self.groups: Dict[Tuple[Any, Any], _Group] = {}
        self.pending_bytes = 0
        self.reduced: List[Tuple[Any, Any, List[list]]] = []   # (device, (k, 7) tensor, rows)
        self.direct: Dict[Any, List[Tuple[Any, list]]] = {}     # device -> (8 numbers, row) of large tensors
        self.inflight: List[tuple] = []  # (event, host tensor, rows, extra, session step) on CUDA
        # The session's step (the schedule's and captures' step) the rows gathered now belong to:
        # they are written at the next model call or later (CUDA), when the session's step has moved.
        self.rows_step: Optional[int] = None
        self.custom_tensors: Dict[Any, List[Tuple[list, str, Any]]] = {}
        self.selected: Dict[Tuple[int, str], bool] = {}
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
        self.rows_step = _core.current_step()
        if self.root_calls > 0:
            self.sampling = self._decide(self.step)
            self.weights_done.clear()
            self.step_modules.clear()
        self.root_calls += 1

    # ---- selection -----------------------------------------------------------------------------

    def is_selected(self, module: Any, module_id: int, path: str) -> bool:
        key = (module_id, self.watch.class_name(type(module)))   # names: classes made in a loop die
        hit = self.selected.get(key)
        if hit is None:
            if self.match_all:
                hit = True
            else:
                cls = self.watch.class_name(type(module))
                names = (path, self.watch.name_in_model(module, path), cls, cls + ".forward")
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
                self.watch.warn_once(f"glob:{glob}", f"tensor_stats module glob {glob!r} matches no module path nor "
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
                self.watch.warn_once(f"metric:{metric}:{path}",
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
                ready.append((None, torch.empty(0, dtype=torch.float64), rows_of_device, [], self.rows_step))
                continue
            values = flat[0] if len(flat) == 1 else torch.cat(flat)
            extra = custom.get(device, [])
            if device.type == "cuda" and not final:
                host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
                host.copy_(values, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self.inflight.append((event, host, rows[device], extra, self.rows_step))
            else:
                ready.append((None, values.to("cpu"), rows[device], extra, self.rows_step))
        self._emit(ready)
        if final and self.inflight:
            inflight, self.inflight = self.inflight, []
            self._emit(inflight)

    def _emit(self, ready: List[tuple]) -> None:
        self.out: List[str] = []
        for event, host, rows, extra, step in ready:
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
            if self.out:   # the writer keeps them if the schedule records their step (or a capture has it)
                self.watch.sink("stats", "".join(self.out), -1 if step is None else step)
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
        if self.watch.sink is None:
            self.rows_out.append(record)
        else:
            self.out.append(self.watch.format_row(record))
