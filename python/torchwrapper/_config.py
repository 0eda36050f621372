# SPDX-License-Identifier: MIT
"""Every source of a configuration, read here and merged in one order.

Priority, lowest first (a later source's key replaces an earlier one's, key by key):

1. the defaults (the C validator's table, src/config/config_keys.c);
2. the JSON file named by ``$TORCHWRAPPER_CONFIG``;
3. ``$TORCHWRAPPER_<KEY>`` variables (``TORCHWRAPPER_FORMAT=csv``; values are text, read as the
   validator reads strings: ``"10MB"``, ``"a, b"`` for a list);
4. what the program gives: ``TorchWrapper(config, **overrides)``'s dict or JSON file, the keyword
   overrides over it; for ``python -m torchwrapper run`` and ``%%torchwrapper``, the command line:
   ``--config FILE``, then each ``--set KEY=VALUE`` in order, then ``-o OUT_DIR``.

The children of ``run`` read layer 4 from ``$TORCHWRAPPER_AUTOSTART`` (the parent's complete
configuration as JSON, a file path, or ``1``: see _autostart.py), so they record as the parent does.

Nothing here checks a value: every source goes through the one validator (``_core.normalize_config``),
whose errors name the key, the value and what is accepted; this module adds which source it was
when that is not the program's own (the environment), and reports unreadable files and malformed
``--set`` items itself (ValueError; the command line turns it into its exit message).
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core

ENV_PREFIX = "TORCHWRAPPER_"
CONFIG_FILE_ENV = "TORCHWRAPPER_CONFIG"
AUTOSTART_ENV = "TORCHWRAPPER_AUTOSTART"  # not a config key: see _autostart.py
# Not config keys either: where on-demand capture keeps its control files, and the `run` process
# of a job (so that one capture command reaches every rank); and, for tests, an offset planted in this
# process's clock (src/clock.c), which the alignment of ranks' clocks must measure back.
NOT_CONFIG_ENV = (CONFIG_FILE_ENV, AUTOSTART_ENV, "TORCHWRAPPER_CONTROL_DIR", "TORCHWRAPPER_RUN_PID",
                  "TORCHWRAPPER_DEBUG_CLOCK_OFFSET_NS")

Given = Union[None, Mapping[str, Any], str, os.PathLike]


def _unjsonable(value: Any) -> str:
    """json.dumps' default= for config values: the one message for a value that is not JSON."""
    raise ValueError(f"config value {value!r} of type {type(value).__name__!r} is not accepted: give strings, "
                     f"numbers, lists or null")


def normalize(values: Mapping[str, Any], from_strings: bool = False, defaults: str = "torchwrapper") -> Dict[str, Any]:
    """values checked and completed by the one validator (in C) with the defaults of ``defaults``
    ("torchwrapper": TorchWrapper's, the original tool's; "profile": profile()'s); from_strings:
    the values are text, as environment variables are."""
    return json.loads(_core.normalize_config(json.dumps(values, default=_unjsonable), from_strings,
                                             defaults=defaults))


def read_file(path: str, what: str) -> Dict[str, Any]:
    """The JSON object in a config file; errors say which source named it (what) and why not."""
    try:
        with open(path) as f:
            values = json.load(f)
    except OSError as error:
        raise ValueError(f"{what}: cannot read the config file {path!r}: {error.strerror}") from None
    except ValueError as error:
        raise ValueError(f"{what}: the config file {path!r} is not valid JSON: {error}") from None
    if not isinstance(values, dict):
        raise ValueError(f"{what}: the config file {path!r} must hold a JSON object, not {type(values).__name__}")
    return values


def environment(environ: Mapping[str, str]) -> List[Tuple[Dict[str, Any], bool]]:
    """Layers 2 and 3: ($TORCHWRAPPER_CONFIG's values, False) and ($TORCHWRAPPER_<KEY> values,
    True: they are text), each where present."""
    sources = []
    if environ.get(CONFIG_FILE_ENV):
        sources.append((read_file(environ[CONFIG_FILE_ENV], f"${CONFIG_FILE_ENV}"), False))
    values = {key[len(ENV_PREFIX):].lower(): value for key, value in environ.items()
              if key.startswith(ENV_PREFIX) and key not in NOT_CONFIG_ENV}
    if values:
        sources.append((values, True))
    return sources


def given(config: Given = None, overrides: Optional[Mapping[str, Any]] = None) -> Optional[Dict[str, Any]]:
    """Layer 4 from a program: config (a dict, or the path of a JSON file), the overrides over it."""
    if isinstance(config, (str, os.PathLike)):
        values = read_file(os.fspath(config), "config")
    elif config is None:
        values = None
    elif isinstance(config, Mapping):
        values = dict(config)
    else:
        raise TypeError(f"config must be a dict or the path of a JSON file, not {type(config).__name__!r}")
    if overrides:
        values = dict(values or {}, **overrides)
    return values


def set_item(config: Dict[str, Any], item: str) -> None:
    """Applies one --set KEY=VALUE to config: the value as JSON where it is (numbers, lists, null,
    objects), else as text ("csv", "10MB"); KEY.SUB sets a key of an object value."""
    key, sep, value = item.partition("=")
    if not sep:
        raise ValueError(f"--set {item!r}: expected KEY=VALUE")
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = value
    key, dot, sub = key.partition(".")
    if dot:                               # --set schedule.active=5: into the object the file gave, if any
        if not isinstance(config.get(key), dict):
            config[key] = {}
        config[key][sub] = parsed
    else:
        config[key] = parsed


def command_line(config_file: Optional[str], sets: Sequence[str], out_dir: Optional[str]) -> Dict[str, Any]:
    """Layer 4 from `run`'s or the magics' options: --config FILE, then --set items in order, then -o."""
    config: Dict[str, Any] = read_file(config_file, "--config") if config_file else {}
    for item in sets:
        set_item(config, item)
    if out_dir:
        config["out_dir"] = out_dir
    return config


# `run`'s own defaults, over TorchWrapper's (the original tool's, kept for its class): what a profile
# left on wants. CSV: 96 bytes a record against JSON Lines' 256 (bench_writer), and a writer at the
# lowest priority is starved while torch's workers spin, so the training thread does the writing:
# transformers' BERT through run, 2,500 steps, writing on it 822 -> 282 ms, the loop faster in 6 of 6
# interleaved process pairs (NEWS).
RUN_DEFAULTS: Dict[str, Any] = {"format": "csv"}


def from_autostart(value: str) -> Dict[str, Any]:
    """Layer 4 of a child of `run`: what a value of $TORCHWRAPPER_AUTOSTART stands for (errors name
    the value)."""
    text = value.strip()
    if text.startswith("{"):
        try:
            config = json.loads(text)
        except ValueError as error:
            raise ValueError(f"${AUTOSTART_ENV} is not valid JSON ({error}): {value!r}") from None
        if not isinstance(config, dict):
            raise ValueError(f"${AUTOSTART_ENV} must hold a JSON object, a config file path or 1, not {value!r}")
        return config
    if text == "1":
        return {}
    return read_file(text, f"${AUTOSTART_ENV}")


def for_children(config: Mapping[str, Any]) -> str:
    """The value of $TORCHWRAPPER_AUTOSTART that gives a child this complete configuration, with
    out_dir absolute (a child may run in another working directory)."""
    return json.dumps(dict(config, out_dir=os.path.abspath(config["out_dir"])))


def load_config(config: Given = None, environ: Optional[Mapping[str, str]] = None,
                defaults: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The complete configuration from, in increasing priority: the defaults (TorchWrapper's, with
    an entry point's own ``defaults`` over them: RUN_DEFAULTS), the JSON file named by
    $TORCHWRAPPER_CONFIG, $TORCHWRAPPER_<KEY> variables, and ``config`` (a dict, or the path of a
    JSON file). Every source goes through the same validator (in C); errors name the key, the value
    and what is accepted."""
    environ = os.environ if environ is None else environ
    sources = ([(dict(defaults), False)] if defaults else []) + environment(environ)
    values = given(config)
    if values is not None:
        sources.append((values, False))
    merged: Dict[str, Any] = {}
    for values, from_strings in sources:
        try:
            checked = normalize(values, from_strings)
        except ValueError as error:
            where = " (from $TORCHWRAPPER_* environment variables)" if from_strings else ""
            raise ValueError(f"{error}{where}") from None
        merged.update({key: checked[key] for key in values})
    return normalize(merged)
