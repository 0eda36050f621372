# SPDX-License-Identifier: MIT
"""Writes the generated reference pages of docs/ from their one source each:

  docs/configuration.md  the configuration keys: defaults per entry point and accepted values from
                         the C validator's key table (src/config/config_keys.c), through _core.normalize_config
  docs/schema.md         the record files' columns, from torchwrapper.schema() (_schema.py)
  docs/tw-report.md      tw-report's options, from its --help (src/report/cli.c)

  python tests/docs/generate.py [DIR]      (default: docs/ beside this tests/ folder)

tests/python/test_docs.py checks that the pages in docs/ are what this writes (make docs rewrites them).
Only the descriptions of the keys are written here: every default and accepted value is the validator's."""
import json
import os
import sys
from typing import Dict, List

import torchwrapper as tw
from torchwrapper import _config, _core

# What each key does (one sentence; the defaults and accepted values come from the validator).
KEYS = {
    "out_dir": "Where the record files, manifest, summary and sites files go; null keeps records in memory "
               "(profile()'s default).",
    "format": "The record files' format: JSON Lines or CSV (docs/schema.md).",
    "file_max_size": "No record file grows past this size: the writer closes a file before it would and opens the "
                     "next.",
    "file_name_spec": "How record files are named: timestamp, serial, or a template with {timestamp} {pid} {tid} "
                      "{rank} {index} {host}.",
    "modules": "The packages whose callables are wrapped.",
    "include": "API-name globs wrapped even when exclude names them.",
    "exclude": "API-name globs left unwrapped; null is the default list (torchwrapper.DEFAULT_EXCLUDE), "
               "[\"+glob\", ...] adds to it.",
    "args": "Argument summaries: shapes and dtypes (summary), none, or repr.",
    "gpu": "GPU timing with CUPTI: auto (when a GPU and CUPTI are found), on (say why not), off.",
    "max_files": "Keep only the newest N record files (a flight recorder); 0 keeps all.",
    "max_total_size": "Keep each kind's record files within this size on disk: the oldest are removed as new ones "
                      "open (a flight recorder, so that a profile left on for days keeps its newest records, not a "
                      "full disk), and a file holds at most half of it; 0 keeps all. summary.json still counts "
                      "every call, and the reports say what was removed.",
    "flush_interval": "Seconds between the writer's flushes of what the threads recorded.",
    "buffer_size": "The memory the recorded chunks may take before on_full applies.",
    "on_full": "When the buffer is full: drop records (counted in the manifest) or wait for the writer.",
    "tensor_stats": "Statistics of module inputs and outputs (mean, std, nan/inf counts) on sampled steps.",
    "track": "Parameter and gradient update events.",
    "schedule": "Which steps are recorded: {wait, warmup, active, repeat, skip_first} as torch.profiler's.",
    "records": "all: every call's record; summary: only the per-API totals.",
    "on_demand": "Capture the next N steps of a running job on request (python -m torchwrapper capture PID).",
    "sites": "Where calls are charged: boundary (the program's lines), all (every caller, torch's files "
             "included), off.",
    "aten": "Below the Python surface: autograd nodes charged to their forward call (backward), every aten "
            "op (all), off.",
    "flops": "FLOPs per call from the operands' sizes (matmul family, convolutions, attention, RNNs).",
    "peak_flops": "The device's peak FLOP/s for MFU; null: the GPU's from its name, none on a CPU.",
    "memory": "Bytes the allocators reported per call (allocated, freed, peak).",
    "compress": "Record files compressed as they are written (.csv.gz, .jsonl.gz; file_max_size counts "
                "compressed bytes; readable to the last flush after a kill).",
    "detail": "sampled: argument summaries, autograd nodes and FLOPs in steps 0-9 and one in 20 after (every call is "
              "still timed in every step; the reports say which steps have them), so that a profile costs little "
              "enough to leave on; all: in every step. Not given: all where args, aten, flops, memory or a "
              "schedule is given.",
}
ENTRY_POINTS = [("torchwrapper", "TorchWrapper"), ("run", "run"), ("profile", "profile()"), ("session", "Session")]


def accepted(key: str) -> str:
    """What the validator says a key accepts: its message for a value no key takes."""
    try:
        _core.normalize_config(json.dumps({key: [[["?"]]]}))
    except ValueError as error:
        message = str(error)   # "config key 'format': [...] is not accepted: give one of: json csv"
        for cut in (" is not accepted: ", " is not "):
            if cut in message:
                return message.split(cut, 1)[1]
        return message
    return "any JSON value"


def configuration() -> str:
    defaults = {name: json.loads(_core.normalize_config("{}", defaults=name)) for name, _ in ENTRY_POINTS
                if name != "run"}
    defaults["run"] = dict(defaults["torchwrapper"], **_config.RUN_DEFAULTS)   # run's own, over TorchWrapper's
    keys = list(defaults["torchwrapper"])
    missing = [key for key in keys if key not in KEYS]
    if missing:
        raise SystemExit(f"tests/docs/generate.py: describe the new config keys {missing} in KEYS")
    lines = ["# Configuration", "",
             "<!-- generated by tests/docs/generate.py from the validator's key table (src/config/config_keys.c): "
             "make docs -->", "",
             "Every entry point takes the same keys, checked by one validator in C: `TorchWrapper({...})`, "
             "`torchwrapper.profile(**keys)`, `python -m torchwrapper run --set KEY=VALUE` or `--config FILE`, "
             "and the environment (`TORCHWRAPPER_<KEY>`). A bad key or value is an error that names it and what "
             "is accepted. Defaults differ by entry point only where said.", "",
             "Where sources disagree (python/torchwrapper/_config.py reads them all), the later in this list wins, "
             "key by key: the defaults, the JSON file named by `$TORCHWRAPPER_CONFIG`, `TORCHWRAPPER_<KEY>` "
             "variables, then the program's own: `TorchWrapper`'s dict or file (its keyword arguments over it), "
             "or `run`'s `--config FILE`, then each `--set` in order, then `-o`. `profile()` and the notebook "
             "magics (`--config`, `--set`, `-o` as `run`'s) read their arguments only.", ""]
    for key in keys:
        lines.append(f"## `{key}`")
        lines.append("")
        lines.append(KEYS[key])
        lines.append("")
        labels: Dict[str, List[str]] = {}   # each default, with the entry points that have it, in order
        for name, label in ENTRY_POINTS:
            labels.setdefault(json.dumps(defaults[name][key]), []).append(label)
        if len(labels) == 1:
            lines.append(f"- default: `{json.dumps(defaults['torchwrapper'][key])}`")
        else:
            for value, names in labels.items():
                lines.append(f"- default for {', '.join(names)}: `{value}`")
        lines.append(f"- accepted: {accepted(key)}")
        lines.append("")
    return "\n".join(lines)


def schema() -> str:
    data = tw.schema()
    lines = ["# The record files", "",
             "<!-- generated by tests/docs/generate.py from torchwrapper.schema() (_schema.py): make docs -->", "",
             f"Schema version {data['schema_version']}. Encodings:", ""]
    lines += [f"- {name}: {text}" for name, text in data["encoding"].items()] + [""]
    for kind, spec in data["kinds"].items():
        lines += [f"## {kind} (version {spec['version']})", "", spec.get("description", ""), ""]
        if spec.get("files"):
            lines += [f"Files: {spec['files']}", ""]
        lines += ["| column | type | unit | description |", "|---|---|---|---|"]
        for column in spec["columns"] + spec.get("derived", []):
            description = column["description"].replace("|", "\\|")
            lines.append(f"| `{column['name']}` | {column['type']} | {column.get('unit') or ''} | {description} |")
        lines.append("")
    notes = data.get("notes")
    if notes:
        lines += ["## Notes", ""]
        lines += [f"- {note}" for note in (notes if isinstance(notes, list) else [notes])] + [""]
    return "\n".join(lines)


def tw_report() -> str:
    status, output, _ = _core.report_output(["tw-report", "--help"])
    return "\n".join(["# tw-report", "",
                      "<!-- generated by tests/docs/generate.py from tw-report --help (src/report/cli.c): "
                      "make docs -->", "", "```", output.rstrip("\n"), "```", ""])


PAGES = {"configuration.md": configuration, "schema.md": schema, "tw-report.md": tw_report}


def main(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for name, make in PAGES.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(make())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "docs"))
