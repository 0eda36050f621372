# SPDX-License-Identifier: MIT
"""What the model watch is underneath, as its engines (tensor statistics, _tensor_stats.py; parameter
updates, _updates.py) see it: the names of module classes, APIs and modules, the rows' format (the
writer's: CSV lines or JSON objects) and where they go, and warnings said once. ModelWatch
(_model_watch.py) is one: it fills these tables as it walks the models, and drives the engines,
which read them and never call the watch back."""
from __future__ import annotations

import json
import math
import warnings
import weakref
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from . import _core
from ._files import STATS_COLUMNS


class WatchBase:
    """The model watch's names and rows (see the module's docstring)."""

    def __init__(self, format: Optional[str] = None) -> None:
        self.format = format  # the normalized config's "format" (rows are JSON unless "csv"), used with out_dir
        self.names: Dict[int, Tuple[Any, str]] = {}   # id -> (object, public API name): a discovery plan's
        self._class_names: Any = weakref.WeakKeyDictionary()   # type -> name (classes made in a loop die)
        self._api_names: Dict[int, str] = {}
        # (kind, rows text[, step]) -> a stream of the writer, which keeps the rows of recorded steps
        self.sink: Optional[Callable[..., Any]] = None
        self._owner: Dict[int, Any] = {}       # id(module) -> its root (the watch's _Root)
        self._path: Dict[int, str] = {}        # id(module) -> path
        self._warned: set = set()
        self.closed = False

    # ---- names ---------------------------------------------------------------------------------

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

    def module_path(self, module: Any) -> Optional[str]:
        """The path recorded for a module instance, or None if none of its calls was seen."""
        return self._path.get(id(module))

    def name_in_model(self, module: Any, path: str) -> str:
        """module's name in its model, as named_modules() gives it ("" for the model itself): its
        path without the model's class."""
        root = self._owner.get(id(module))
        return root.name_in_model(path) if root is not None else path.partition(".")[2]

    # ---- rows ----------------------------------------------------------------------------------

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

    def warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(f"torchwrapper: {message}", RuntimeWarning, stacklevel=2)


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
