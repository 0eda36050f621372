# SPDX-License-Identifier: MIT
"""torch.compile under profiles: a compiled function is compiled once more for the first profile
(torch._dynamo's guards check the identity of torch's functions, which a profile replaces by
wrappers), and never again for later ones: the wrappers are the same objects at every start. Before,
each profile recompiled, and past torch._dynamo's recompile limit (8) the function ran uncompiled for
the rest of the process, profiled or not."""
import torch
from torch._dynamo.utils import counters

import torchwrapper as tw


def graphs():
    return counters["stats"]["unique_graphs"]


def test_a_compiled_module_is_compiled_once_for_profiling_not_at_every_profile(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    compiled = torch.compile(model, backend="eager")  # dynamo's graphs, no code generation: fast
    x = torch.randn(4, 8)
    expected = model(x)
    compiled(x)
    before = graphs()
    limit = torch._dynamo.config.recompile_limit if hasattr(torch._dynamo.config, "recompile_limit") \
        else torch._dynamo.config.cache_size_limit
    for i in range(limit + 2):
        with tw.profile(out_dir=str(tmp_path / str(i)), format="csv"):
            assert torch.equal(compiled(x), expected)
        assert torch.equal(compiled(x), expected)  # unprofiled again: the first graph, still cached
        assert graphs() == before + 1, f"profile {i} compiled again"
        frame = tw.load(str(tmp_path / str(i)))  # the compiled graph's calls are profiled
        assert (frame["api"] == "torch.nn.functional.linear").sum() == 2
    assert "cache_size_limit" not in counters.get("recompiles", {}) and not counters["frames"].get("recompile_limit")
