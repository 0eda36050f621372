# SPDX-License-Identifier: MIT
"""Run in a fresh interpreter by test_api_names.py: prints, as JSON, the API names that getAPIName
gives and that a training loop records, after the process state that argv[1] names.

    python api_names_probe.py SCENARIO PATHS_FILE
SCENARIO: fresh | after-session | during-session | import:MODULE[,MODULE...] (imported before torch)
PATHS_FILE: JSON list of dotted API names to resolve (from a fresh process's discovery), or "-" to
print that list instead.
"""
import importlib
import json
import sys

scenario, paths_file = sys.argv[1], sys.argv[2]
if scenario.startswith("import:"):
    for module in scenario[len("import:"):].split(","):
        importlib.import_module(module)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torchwrapper as tw  # noqa: E402
from models import train  # noqa: E402

# The table of test_api.py, captured as plain objects now (before any optimizer is built: torch
# then replaces Adam.step by a hook around it, and this is the original).
TABLE = {
    "torch.optim.Adam": torch.optim.Adam, "torch.optim.Adam.step": torch.optim.Adam.step,
    "torch.optim.SGD.step": torch.optim.SGD.step,
    "torch.optim.Optimizer.zero_grad": torch.optim.Optimizer.zero_grad,
    "torch.nn.Linear.forward": torch.nn.Linear.forward, "torch.nn.functional.relu": F.relu,
    "torch.nn.functional.linear": F.linear, "torch.Tensor.add": torch.Tensor.add,
    "torch.Tensor.__add__": torch.Tensor.__add__, "torch.add": torch.add, "torch.stft": torch.stft,
    "torch.optim.lr_scheduler.LRScheduler.step": torch.optim.lr_scheduler.LRScheduler.step,
    "torch.nn.utils.clip_grad_norm_": torch.nn.utils.clip_grad_norm_,
}


def resolve(path):
    """The object at a dotted path, through modules already imported and attributes."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:split]))
        if module is not None:
            obj = module
            for part in parts[split:]:
                obj = getattr(obj, part)
            return obj
    raise LookupError(path)


def names(paths):
    out = {key: tw.getAPIName(obj) for key, obj in TABLE.items()}
    for path in paths:
        out["path:" + path] = tw.getAPIName(resolve(path))
    return out


def recorded():
    # Unprofiled first: the first optimizer step imports modules lazily (torch._dynamo, whose
    # import calls torch functions); those calls are real, but are not what is compared here.
    train("cnn_adam", 1)
    train("mlp_sgd", 1)
    with tw.profile() as prof:
        train("cnn_adam", 2)
        train("mlp_sgd", 1)
    return sorted({r.api for r in prof.records()})


if paths_file == "-":
    from torchwrapper._discover import discover

    print(json.dumps(sorted(name for _, name in discover(exclude=[]).names.values())))
    sys.exit(0)

with open(paths_file) as f:
    paths = json.load(f)
result = {}
if scenario == "after-session":
    result["recorded"] = recorded()   # builds optimizers while profiled: torch hooks our wrappers
    result["names"] = names(paths)
elif scenario == "during-session":
    originals = {path: resolve(path) for path in paths}
    with tw.profile() as prof:
        train("cnn_adam", 1)
        import json.tool  # noqa: F401  a module imported while profiling: the name index is rebuilt
        table = {key: tw.getAPIName(obj) for key, obj in TABLE.items()}
        table.update({"path:" + p: tw.getAPIName(obj) for p, obj in originals.items()})
        table.update({"wrapped:" + p: tw.getAPIName(resolve(p)) for p in paths})
    result["names"] = table
    result["recorded"] = recorded()
else:
    result["names"] = names(paths)
    result["recorded"] = recorded()
print(json.dumps(result))
