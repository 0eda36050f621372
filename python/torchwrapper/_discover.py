# SPDX-License-Identifier: MIT
"""Finding every callable under torch, naming it, and deciding what not to wrap.

Discovery walks what is already imported (``sys.modules``), never imports anything, and produces a
``Plan``: one ``Target`` per distinct callable with its shortest public API name and every place
(owner, attribute) where it lives. ``Patcher`` (``_patch.py``) then installs one shared wrapper per
target at all of its places.

Naming rule: the API name of a module-level callable or class is the shortest dotted path from a
root module through public names (no component starting with ``_``) under which it is reachable,
shortest meaning fewest components, then fewest characters, then alphabetical; paths through its
home package (the module that defines it, or a parent package of that module) are preferred over
re-exports elsewhere. A method is named after the class whose ``__dict__`` defines it:
``torch.optim.Adam.step``, and ``torch.optim.lr_scheduler.LRScheduler.step`` for a ``StepLR``;
except an optimizer's step, named after the optimizer's own class: ``torch.optim.AdamW.step``,
though AdamW inherits Adam's (see ``Target.shared``).
A callable with no public path is not wrapped: it is an internal of torch.
"""
from __future__ import annotations

import fnmatch
import gc
import inspect
import re
import sys
import types
from dataclasses import dataclass, field

from . import _core
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

# Modules whose callables are never wrapped, with the reason. A prefix covers its submodules.
SKIP_MODULES: Dict[str, str] = {
    "torch._dynamo": "torch.compile's graph capture: it must see torch as it is",
    "torch._inductor": "torch.compile's code generator",
    "torch._functorch": "AOT autograd and functorch internals used by torch.compile",
    "torch._export": "graph export internals",
    "torch.export": "graph export traces the program; wrappers would become graph nodes",
    "torch.fx": "symbolic tracing inspects callables by identity",
    "torch.jit": "TorchScript compiles Python source and resolves callables by identity",
    "torch._jit_internal": "TorchScript internals",
    "torch._subclasses": "fake and functional tensors used while torch.compile captures graphs",
    "torch._prims": "primitive ops used by decompositions",
    "torch._prims_common": "primitive ops used by decompositions",
    "torch._refs": "reference implementations used by decompositions",
    "torch._decomp": "decompositions used by torch.compile",
    "torch._higher_order_ops": "higher-order operators used by torch.compile",
    "torch._library": "custom operator registration",
    "torch.library": "custom operator registration",
    "torch._ops": "operator dispatch (torch.ops): OpOverload objects are looked up by identity",
    "torch.overrides": "__torch_function__ dispatch, called on every torch call",
    "torch._tensor_str": "tensor printing internals",
    "torch.profiler": "another profiler: wrapping it would profile the profiler",
    "torch.autograd.profiler": "another profiler",
    "torch.autograd.profiler_util": "another profiler",
    "torch.autograd.profiler_legacy": "another profiler",
    "torch.testing": "test utilities",
    "torch._logging": "logging internals",
    "torch._guards": "torch.compile guard internals",
    "torch.utils._pytree": "tree utilities called by torch.compile and export on every node",
    "torch.utils._python_dispatch": "dispatch mode internals",
    "torch.compiler": "torch.compile's public switches are consulted while it captures graphs",
    "torch.package": "packaging resolves objects by identity",
    "torch.multiprocessing": "pickling reductions for tensors sent between processes",
    "torch._utils_internal": "internals",
    "torch._sources": "source inspection for TorchScript",
    "torch._vmap_internals": "vmap internals",
    "torch._C._dynamo": "torch.compile's frame evaluation hooks",
    "torchwrapper": "the profiler itself",
}

# Class attributes never wrapped, with the reason.
SKIP_ATTRIBUTES: Dict[str, str] = {
    "__torch_function__": "dispatch protocol: called by torch on every overridable call",
    "__torch_dispatch__": "dispatch protocol",
    "__new__": "object creation protocol",
    "__init_subclass__": "class creation protocol",
    "__class_getitem__": "typing protocol",
    "__subclasshook__": "isinstance protocol",
    "__getattribute__": "attribute protocol: every attribute access",
    "__getattr__": "attribute protocol (nn.Module finds parameters through it)",
    "__setattr__": "attribute protocol",
    "__delattr__": "attribute protocol",
    "__dir__": "introspection",
    "__reduce__": "pickling protocol: pickle looks these up on the class",
    "__reduce_ex__": "pickling protocol",
    "__getstate__": "pickling protocol",
    "__setstate__": "pickling protocol",
    "__get__": "descriptor protocol",
    "__set__": "descriptor protocol",
    "__set_name__": "descriptor protocol",
    "__del__": "finalizer: may run during interpreter shutdown",
    "__instancecheck__": "isinstance protocol",
    "__subclasscheck__": "issubclass protocol",
    "__prepare__": "class creation protocol",
    "__init__": "construction is recorded through the constructors' own calls",
}

# Dunder methods of classes that are user-facing operations and are wrapped (other dunders are not).
WRAPPED_DUNDERS = frozenset("""
__abs__ __add__ __and__ __bool__ __complex__ __contains__ __deepcopy__ __div__ __eq__ __float__
__floordiv__ __format__ __ge__ __getitem__ __gt__ __hash__ __iadd__ __iand__ __idiv__ __ifloordiv__
__ilshift__ __imod__ __imul__ __index__ __int__ __invert__ __ior__ __ipow__ __irshift__ __isub__
__iter__ __itruediv__ __ixor__ __le__ __len__ __long__ __lshift__ __lt__ __matmul__ __mod__ __mul__
__ne__ __neg__ __nonzero__ __or__ __pos__ __pow__ __radd__ __rand__ __rdiv__ __repr__ __reversed__
__rfloordiv__ __rlshift__ __rmatmul__ __rmod__ __rmul__ __ror__ __rpow__ __rrshift__ __rshift__
__rsub__ __rtruediv__ __rxor__ __setitem__ __sub__ __truediv__ __xor__ __call__ __next__
__enter__ __exit__ __array__ __array_wrap__ __dlpack__ __dlpack_device__
""".split())

# API-name globs not wrapped by default: bookkeeping calls torch makes itself, which would drown the
# report. Overridable through ``include`` (wins over exclude) and ``exclude`` (a list replaces this
# one; ``["+glob", ...]`` adds to it).
DEFAULT_EXCLUDE: Dict[str, str] = {
    "torch.Tensor.__hash__": "dict and set lookups of tensors (~11 per optimizer step)",
    "torch.Tensor.__format__": "string formatting of tensors in torch's own messages",
    "torch.Tensor.__len__": "called by Python for truth tests and unpacking",
    "torch.nn.Module.__call__": "every module call: its forward is recorded instead",
    "torch.is_grad_enabled": "queried by torch around most autograd work",
    "torch.is_tensor": "type checks inside torch",
    "torch.is_storage": "type checks inside torch",
    "torch.is_autocast_*": "autocast state queries inside torch",
    "torch.get_default_dtype": "queried by torch constructors",
    "torch.get_autocast_*": "autocast state queries inside torch",
    "torch.is_grad_enabled*": "autograd state queries",
    "torch.is_inference_mode_enabled": "autograd state queries",
    "torch.nn.Module.__getstate__": "pickling",
    "torch.utils.weak.*": "weak-reference bookkeeping of torch's caches",
    "*.has_torch_function*": "__torch_function__ checks at the top of torch's Python functions",
    # Not a name: every generator function (nn.Module.parameters, named_modules, ...).
    "<generator functions>": "a call only creates the generator: the work runs as the caller iterates, "
                             "outside the call, so its time would mislead (and optimizers and hooks "
                             "call them hundreds of times a step)",
}
GENERATOR_FUNCTIONS = "<generator functions>"

# Tensor methods reached through these C-level names are reported under torch.Tensor.
_TENSOR_BASE_NAMES = ("torch._C.TensorBase", "torch._C._TensorBase")

MISSING = object()  # "not in the owner's __dict__": an inherited attribute

# Top-level packages whose modules cannot hold torch callables: the standard library and what torch
# imports for itself (none of them imports torch).
_NO_TORCH_PACKAGES = frozenset(getattr(sys, "stdlib_module_names", ())) | {
    "sympy", "mpmath", "numpy", "typing_extensions", "filelock", "jinja2", "markupsafe", "networkx", "fsspec",
    "_pytest", "pytest", "pluggy", "iniconfig", "packaging", "pandas", "dateutil", "pytz", "tzdata", "six",
    "torchwrapper",
}

_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE
_C_METHOD_TYPES = (types.MethodDescriptorType, types.WrapperDescriptorType, types.BuiltinFunctionType)


@dataclass
class Target:
    """One distinct callable and every place it is installed under."""

    obj: Any                    # the original: a function, builtin, method descriptor
    name: str                   # its API name
    kind: str                   # "function", "builtin", "method", "staticmethod", "classmethod", "tensor"
    # (owner, attr, raw): raw is what owner.__dict__ held at discovery, or MISSING (inherited)
    places: List[Tuple[Any, str, Any]] = field(default_factory=list)
    # The step an optimizer class inherits, installed on that class under its own name
    # (torch.optim.AdamW.step wraps Adam's step): obj is named by another target, whose name
    # getAPIName keeps for it. Why: torch replaces a class's step by a hook at the first
    # construction of the class, around what cls.step is then; so an AdamW's steps were recorded as
    # torch.optim.AdamW.step when an AdamW was made before the profile began, and as
    # torch.optim.Adam.step when it was made during it or when an Adam was made first (AdamW then
    # inherits Adam's hook). A shared target is always installed, so that the name is the class's.
    shared: bool = False


@dataclass
class Plan:
    targets: List[Target]
    skipped: List[Tuple[str, str]]       # (name, reason): callables deliberately left alone
    excluded: List[Tuple[str, str]]      # (name, glob): left alone by the exclude list
    modules: List[str]                   # the modules walked
    names: Dict[int, Tuple[Any, str]] = field(default_factory=dict)  # id -> (object, API name), all named
    prepared: Any = field(default=None, repr=False, compare=False)  # _patch's per-plan install data
    registry_entries: Any = field(default=None, repr=False, compare=False)  # _profile's, per plan

    def counts(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for t in self.targets:
            out[t.kind] = out.get(t.kind, 0) + 1
        out["places"] = sum(len(t.places) for t in self.targets)
        out["skipped"] = len(self.skipped)
        out["excluded"] = len(self.excluded)
        return out


def _name_key(name: str) -> Tuple[int, int, str]:
    return (name.count("."), len(name), name)


_skip_cache: Dict[str, Optional[str]] = {}
_SKIP_PREFIXES = tuple(prefix + "." for prefix in SKIP_MODULES)


def _skip_reason(module_name: Optional[str]) -> Optional[str]:
    """Why the module's callables are not wrapped, or None. Cached: module names are few."""
    if not module_name:
        return None
    try:
        return _skip_cache[module_name]
    except KeyError:
        pass
    reason = SKIP_MODULES.get(module_name)
    if reason is None and module_name.startswith(_SKIP_PREFIXES):  # one C-level test for most names
        reason = next(why for prefix, why in SKIP_MODULES.items() if module_name.startswith(prefix + "."))
    _skip_cache[module_name] = reason
    return reason


class _Roots:
    """Membership of module names under the root modules, cached."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(roots)
        self.prefixes = tuple(r + "." for r in roots)
        self.cache: Dict[str, bool] = {}

    def __call__(self, module_name: Optional[str]) -> bool:
        if not module_name:
            return False
        hit = self.cache.get(module_name)
        if hit is None:
            hit = self.cache[module_name] = module_name in self.roots or module_name.startswith(self.prefixes)
        return hit


class _Globs:
    """API-name globs, matched fast: exact names by a set lookup, and each wildcard pattern only on
    names that contain its longest literal part (a substring test in C) before the regex."""

    def __init__(self, globs: Iterable[str]) -> None:
        self.globs = list(globs)
        self.exact = {g for g in self.globs if not any(c in g for c in "*?[")}
        self.patterns = []
        for g in self.globs:
            if g not in self.exact:
                literal = max(re.split(r"[*?]|\[[^]]*\]", g), key=len)
                self.patterns.append((literal, re.compile(fnmatch.translate(g)), g))

    def match(self, name: str) -> Optional[str]:
        """The first glob that matches name, or None."""
        if name in self.exact:
            return name
        for literal, regex, glob in self.patterns:
            if literal in name and regex.match(name):
                return glob
        return None


def _is_generator_function(obj: Any) -> bool:
    code = getattr(obj, "__code__", None) if isinstance(obj, types.FunctionType) else None
    return code is not None and bool(code.co_flags & (inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR))


# (module, attribute path) of the private callables recorded for findings (tw-report --findings).
DIAGNOSTIC_POINTS: List[Tuple[str, str]] = [
    ("torch.utils.data.dataloader", "_BaseDataLoaderIter.__next__"),   # input-bound: the wait for a batch
    # profiler_left_on: another profiler switched on and off (its modules are excluded, these four
    # calls only say when it records)
    ("torch.profiler.profiler", "profile.start"),
    ("torch.profiler.profiler", "profile.stop"),
    ("torch.autograd.profiler", "profile.__enter__"),
    ("torch.autograd.profiler", "profile.__exit__"),
    ("torch.autograd.profiler", "emit_nvtx.__enter__"),
    ("torch.autograd.profiler", "emit_nvtx.__exit__"),
]


def discover(roots: Sequence[str] = ("torch",), include: Sequence[str] = (),
             exclude: Optional[Sequence[str]] = None) -> Plan:
    """Plans the wrapping of every callable under the root modules that are imported now."""
    # Discovery allocates tens of thousands of small objects, enough to set off a full collection
    # of torch's large object graph (measured: +130 ms on the first call). It creates no cycles.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _discover(roots, include, exclude)
    finally:
        if gc_was_enabled:
            gc.enable()


def optimizer_steps() -> frozenset:
    """(class, its own step) of every subclass of torch.optim.Optimizer that has one now: what the
    optimizer steps of a plan depend on beyond the modules imported (torch puts a hook in a class
    at its first construction)."""
    optim = sys.modules.get("torch.optim")
    optimizer = getattr(optim, "Optimizer", None)
    if optimizer is None:
        return frozenset()
    steps, subclasses, seen = [], list(optimizer.__subclasses__()), set()
    while subclasses:
        cls = subclasses.pop()
        if cls not in seen:
            seen.add(cls)
            subclasses.extend(cls.__subclasses__())
            step = vars(cls).get("step")
            if step is not None:
                steps.append((id(cls), id(step)))
    return frozenset(steps)


def resolve_exclude(exclude: Optional[Sequence[str]]) -> List[str]:
    """The exclude globs in effect: the default list for None; ``["+glob", ...]`` adds to the
    default list; a list of plain globs replaces it (config_keys.c refuses a list of both kinds)."""
    if exclude is None:
        return list(DEFAULT_EXCLUDE)
    added = [glob[1:] for glob in exclude if glob.startswith("+")]
    if not added:
        return list(exclude)
    if len(added) != len(exclude):
        raise ValueError(f"exclude {list(exclude)!r}: give globs that all start with '+' (added to the default "
                         f"list) or none that does (replacing it), not both")
    return list(DEFAULT_EXCLUDE) + [glob for glob in added if glob not in DEFAULT_EXCLUDE]


def _discover(roots: Sequence[str], include: Sequence[str], exclude: Optional[Sequence[str]]) -> Plan:
    exclude = resolve_exclude(exclude)
    under = _Roots(roots)
    include_globs, exclude_globs = _Globs(include), _Globs(exclude)
    skipped: List[Tuple[str, str]] = []

    modules: List[Tuple[str, types.ModuleType]] = []
    for mod_name, module in list(sys.modules.items()):
        # Exactly ModuleType: config modules (torch._dynamo.config, ...) subclass it and refuse setattr.
        if type(module) is not types.ModuleType or not under(mod_name):
            continue
        reason = _skip_reason(mod_name)
        if reason is None:
            modules.append((mod_name, module))
    modules.sort(key=lambda item: _name_key(item[0]))

    # Pass 1, in C (_core.scan_modules): every module-level function under the roots (all its
    # places), the classes under the roots with a public name, and the preferred public name of
    # each: names through the object's home package (where it is defined, or a parent package that
    # re-exports it) first, so torch.optim.lr_scheduler.LRScheduler rather than the shorter
    # re-export torch.optim.swa_utils.LRScheduler; then fewest components, fewest characters,
    # alphabetical. Only public names count (a callable without one is not wrapped).
    function_places, classes, best_name = _core.scan_modules(modules, tuple(roots))

    targets: Dict[int, Target] = {}

    def add(obj: Any, name: str, kind: str, owner: Any, attr: str, raw: Any) -> None:
        target = targets.get(id(obj))
        if target is None:
            target = targets[id(obj)] = Target(obj, name, kind)
        elif _name_key(name) < _name_key(target.name):
            target.name = name
        target.places.append((owner, attr, raw))

    # Module-level functions: every place in every walked module.
    for module, attr, value in function_places:
        name = best_name.get(id(value))
        if name is None:
            continue
        reason = _skip_reason(getattr(value, "__module__", None))
        if reason is not None:
            skipped.append((name, reason))
            continue
        add(value, name, "function" if type(value) is types.FunctionType else "builtin", module, attr, value)

    # Methods of classes with a public name.
    import torch  # discovery runs after torch was imported by the caller

    tensor_base = torch._C.TensorBase
    optimizer = torch.optim.Optimizer
    shared: List[Target] = []
    for cls in classes.values():
        cls_name = best_name[id(cls)]
        if issubclass(cls, type) or cls is tensor_base:
            continue
        if cls.__flags__ & _IMMUTABLE:
            skipped.append((cls_name, "immutable C type: its attributes cannot be set"))
            continue
        reason = _skip_reason(cls.__module__)
        if reason is not None:
            skipped.append((cls_name, reason))
            continue
        own = vars(cls)
        namespace = dict(own)
        if cls is torch.Tensor:
            # C methods inherited from TensorBase are installed on Tensor (TensorBase is immutable).
            for attr, value in vars(tensor_base).items():
                namespace.setdefault(attr, value)
        for attr, raw in namespace.items():
            if attr.startswith("_") and attr not in WRAPPED_DUNDERS:
                if attr in SKIP_ATTRIBUTES:  # listed with its reason; other private names are internals
                    skipped.append((f"{cls_name}.{attr}", SKIP_ATTRIBUTES[attr]))
                continue
            if isinstance(raw, staticmethod):
                func, kind = raw.__func__, "staticmethod"
            elif isinstance(raw, classmethod):
                func, kind = raw.__func__, "classmethod"
            elif isinstance(raw, types.FunctionType):
                func, kind = raw, "method"
            elif cls is torch.Tensor and isinstance(raw, _C_METHOD_TYPES):
                func, kind = raw, "tensor"
            else:
                continue  # properties, C slots of other types, data
            if not isinstance(func, types.FunctionType) and kind != "tensor":
                continue
            if kind != "tensor" and not under(getattr(func, "__module__", None)):
                continue
            add(func, f"{cls_name}.{attr}", kind, cls, attr, raw if attr in own else MISSING)
        if issubclass(cls, optimizer) and "step" not in own:
            # an optimizer that steps with its base's step (AdamW: Adam's), itself or the hook
            # torch put around it when the base was first constructed
            base = next((b for b in cls.__mro__[1:] if "step" in vars(b)), optimizer)
            raw = vars(base).get("step")
            if base is not optimizer and isinstance(raw, types.FunctionType) and under(raw.__module__):
                shared.append(Target(raw, f"{cls_name}.step", "method", [(cls, "step", MISSING)], shared=True))

    # Optimizer classes without a public name (a program's own subclass of AdamW) that step with a
    # torch optimizer's step: where one was made before the profile, torch put a hook around that
    # step in the class's own __dict__, which no target reaches, and its steps went unrecorded (and
    # ended no step). Named after the nearest public class they derive from.
    subclasses, seen = list(optimizer.__subclasses__()), set()
    while subclasses:
        cls = subclasses.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        subclasses.extend(cls.__subclasses__())
        raw = vars(cls).get("step")
        if id(cls) in classes or not isinstance(raw, types.FunctionType) or not getattr(raw, "hooked", False):
            continue
        inner = getattr(raw, "__wrapped__", None)  # the step the hook was put around
        if not isinstance(inner, types.FunctionType) or not under(inner.__module__) or \
                _skip_reason(inner.__module__) is not None or _skip_reason(cls.__module__) is not None:
            continue  # a step of the program's own (only what it calls is recorded)
        public = next((best_name[id(b)] for b in cls.__mro__[1:] if id(b) in classes), None)
        if public is not None:
            shared.append(Target(raw, f"{public}.step", "method", [(cls, "step", raw)], shared=True))

    # The points findings need that the rules above leave out (private names, excluded modules): the
    # wait for a DataLoader's next batch, another profiler started and stopped.
    for mod_name, path in DIAGNOSTIC_POINTS:
        module = sys.modules.get(mod_name)
        if module is None or not under(mod_name):
            continue
        *owner_path, attr = path.split(".")
        owner: Any = module
        for part in owner_path:
            owner = getattr(owner, part, None)
        raw = getattr(owner, "__dict__", {}).get(attr) if owner is not None else None
        if isinstance(raw, types.FunctionType):
            add(raw, f"{mod_name}.{path}", "method" if owner_path else "function", owner, attr, raw)

    # Every named object, excluded or not (getAPIName), classes included.
    names: Dict[int, Tuple[Any, str]] = {key: (t.obj, t.name) for key, t in targets.items()}
    for key, cls in classes.items():
        names[key] = (cls, best_name[key])

    # Exclusion by API name.
    chosen: List[Target] = []
    excluded: List[Tuple[str, str]] = []
    generators = GENERATOR_FUNCTIONS in exclude
    for target in list(targets.values()) + shared:
        glob = exclude_globs.match(target.name)
        if glob is None and generators and _is_generator_function(target.obj):
            glob = GENERATOR_FUNCTIONS
        if glob is not None and include_globs.match(target.name) is None:
            excluded.append((target.name, glob))
            continue
        chosen.append(target)

    # torch.nn's recurrent modules call their kernels as torch._VF.gru, ... : torch._VF is an object
    # (not a module) that looks each name up in torch._C._VariableFunctions at each call, so the
    # wrapper installed as torch.gru is not what they call. The kernels with a FLOP formula are
    # installed in torch._VF too (its own attribute, deleted at restore), so that nn.GRU, nn.LSTM,
    # nn.RNN and their cells record their calls and count their FLOPs; other torch._VF calls are
    # recorded through the torch functions that make them (F.dropout, torch.norm, ...).
    vf = sys.modules.get("torch._VF")
    functions = getattr(vf, "vf", None)
    if vf is not None and functions is not None:
        for target in chosen:
            attr = target.name.rpartition(".")[2]
            if target.kind == "builtin" and target.name == "torch." + attr and attr not in vars(vf) and \
                    getattr(functions, attr, None) is target.obj and _core.has_flops_formula(target.name):
                target.places.append((vf, attr, MISSING))

    # Aliases held by other modules (`from torch import add` in user code). The standard library and
    # the packages torch itself imports, which never import torch's callables, are not searched.
    by_id = {id(t.obj): t for t in chosen if t.kind in ("function", "builtin")}
    for mod_name, module in list(sys.modules.items()):
        if type(module) is not types.ModuleType or under(mod_name) or \
                mod_name.partition(".")[0] in _NO_TORCH_PACKAGES or _skip_reason(mod_name) is not None:
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for attr, value in list(namespace.items()):
            target = by_id.get(id(value))
            if target is not None and value is target.obj:
                target.places.append((module, attr, value))

    chosen.sort(key=lambda t: (t.shared, t.name))  # the shared ones last (_patch._prepared)
    return Plan(chosen, skipped, excluded, [m for m, _ in modules], names)


__all__ = ["DEFAULT_EXCLUDE", "MISSING", "Plan", "SKIP_ATTRIBUTES", "SKIP_MODULES", "Target", "discover",
           "resolve_exclude"]
