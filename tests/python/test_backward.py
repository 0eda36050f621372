# SPDX-License-Identifier: MIT
"""Inside backward (config aten "backward"): every autograd node a backward pass evaluates is a
record of its own, named as torch names it, charged to the forward call, module and site that
created it; compared with torch.profiler's autograd events on real training steps."""
import collections
import os
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchwrapper as tw
from torchwrapper import _core

LAYER = os.path.join(os.path.dirname(os.path.abspath(tw.__file__)), "_torch.so")
pytestmark = pytest.mark.skipif(not os.path.exists(LAYER), reason="the libtorch layer was not built (configure)")

PROFILER_PREFIX = "autograd::engine::evaluate_function: "


def is_node(record):
    return record.fwd_call_id != 0 or record.api.endswith(("Backward0", "Backward1", "AccumulateGrad")) or \
        "Backward" in record.api


class MLP(nn.Module):
    def __init__(self, widths=(8, 16, 24, 4)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3)
        self.bn = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 3, padding=1)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        x = F.relu(self.conv2(x)).mean(dim=(2, 3))
        return self.head(x)


def transformer_block():
    return nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)


WORKLOADS = {
    "mlp": (lambda: MLP(), lambda: torch.randn(4, 8), lambda out: out.pow(2).mean()),
    "cnn": (lambda: SmallCNN(), lambda: torch.randn(2, 3, 10, 10), lambda out: F.cross_entropy(out, torch.tensor([1, 3]))),
    "transformer": (transformer_block, lambda: torch.randn(2, 5, 16), lambda out: out.square().mean()),
}


def one_step(model, x, loss_of, opt):
    opt.zero_grad()
    loss_of(model(x)).backward()
    opt.step()


def profiler_nodes(make_model, make_input, loss_of):
    torch.manual_seed(0)
    model, x = make_model(), make_input()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    one_step(model, x, loss_of, opt)   # warm-up, as in the profiled run
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        one_step(model, x, loss_of, opt)
    return collections.Counter(e.name[len(PROFILER_PREFIX):] for e in prof.events()
                               if e.name.startswith(PROFILER_PREFIX))


def torchwrapper_nodes(make_model, make_input, loss_of, **config):
    torch.manual_seed(0)
    model, x = make_model(), make_input()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    one_step(model, x, loss_of, opt)
    with tw.profile(**config) as prof:
        one_step(model, x, loss_of, opt)
    return prof, model


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_backward_nodes_are_the_nodes_torch_profiler_sees(workload):
    expected = profiler_nodes(*WORKLOADS[workload])
    assert expected, "torch.profiler saw no autograd node"
    prof, _ = torchwrapper_nodes(*WORKLOADS[workload])
    assert prof.session.stats()["backward"] == "on"
    records = prof.records()
    (backward,) = [r for r in records if r.api == "torch.Tensor.backward"]
    nodes = [r for r in records if r.parent_id == backward.call_id or
             (r.depth > backward.depth and backward.start_ns <= r.start_ns <= backward.start_ns + backward.cost_ns
              and r.tid == backward.tid and r.api in expected)]
    assert collections.Counter(r.api for r in nodes if r.api in expected or "Backward" in r.api
                               or r.api.endswith("AccumulateGrad")) == expected
    # the nodes ran inside the backward call on this (CPU) thread: its self time is what is left
    children = [r for r in records if r.parent_id == backward.call_id]
    assert backward.self_ns <= backward.cost_ns - sum(r.cost_ns for r in children) + 1000


def test_each_linear_layers_nodes_are_charged_to_its_module_and_call():
    widths = (8, 16, 24, 4)
    prof, model = torchwrapper_nodes(lambda: MLP(widths), lambda: torch.randn(4, 8), lambda out: out.pow(2).mean())
    records = prof.records()
    by_id = {r.call_id: r for r in records}
    addmm = [r for r in records if r.api == "AddmmBackward0"]
    assert len(addmm) == 3
    for node in addmm:
        forward = by_id[node.fwd_call_id]
        assert forward.api == node.fwd_api == "torch.nn.functional.linear"
        parent = by_id[forward.parent_id]   # the module forward around it
        assert parent.api == "torch.nn.Linear.forward" and node.module == parent.module
        assert node.step == forward.step
        # the module is the right one, by its shapes: its input width is in the forward's arguments
    assert sorted(r.module for r in addmm) == ["MLP.layers.0", "MLP.layers.1", "MLP.layers.2"]
    relu = [r for r in records if r.api == "ReluBackward0"]
    assert len(relu) == 2 and {by_id[r.fwd_call_id].api for r in relu} == {"torch.relu"}   # F.relu calls torch.relu: the innermost
    accumulate = [r for r in records if r.api == "torch::autograd::AccumulateGrad"]
    assert len(accumulate) == 6 and all(r.fwd_call_id == 0 and r.fwd_api == "" for r in accumulate)
    assert prof.session.stats()["backward_unlinked"] == 0


def test_files_hold_the_nodes_and_their_forward_calls(tmp_path):
    for fmt in ("csv", "json"):
        out = str(tmp_path / fmt)
        prof, _ = torchwrapper_nodes(lambda: MLP(), lambda: torch.randn(4, 8), lambda out: out.pow(2).mean(),
                                     out_dir=out, format=fmt)
        rows = prof.records()
        frame = tw.load(out)
        nodes = frame[frame["fwd_call_id"] != 0]
        assert len(nodes) == sum(r.fwd_call_id != 0 for r in rows) > 0
        calls = frame.set_index("call_id")
        for _, node in nodes.iterrows():
            assert calls.loc[node["fwd_call_id"], "api"] == node["fwd_api"]
        assert set(nodes["api"]) >= {"AddmmBackward0", "ReluBackward0"}
        assert (frame[frame["fwd_call_id"] == 0]["fwd_api"] == "").all()


def test_no_grad_and_inference_mode_make_no_nodes():
    model, x = MLP(), torch.randn(4, 8)
    with tw.profile() as prof:
        with torch.no_grad():
            model(x)
        with torch.inference_mode():
            model(x)
    assert not [r for r in prof.records() if r.fwd_call_id or "Backward" in r.api]


def test_retain_graph_grad_and_double_backward():
    model, x = MLP(), torch.randn(4, 8, requires_grad=True)
    with tw.profile() as prof:
        loss = model(x).pow(2).mean()
        loss.backward(retain_graph=True)
        loss.backward()
        (gx,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
    records = prof.records()
    addmm = [r for r in records if r.api == "AddmmBackward0"]
    # twice for the retained graph, once for grad(), and again in the double backward's graph
    assert len(addmm) >= 9
    by_id = {r.call_id: r for r in records}
    assert all(by_id[r.fwd_call_id].api == "torch.nn.functional.linear" for r in addmm if r.fwd_call_id in by_id)
    first, second = addmm[:3], addmm[3:6]
    assert [r.fwd_call_id for r in first] == [r.fwd_call_id for r in second]   # the same forward calls


def test_backward_from_two_threads_at_once():
    barrier = threading.Barrier(2)
    errors = []

    def train(seed):
        try:
            torch.manual_seed(seed)
            model, x = MLP(), torch.randn(16, 8)
            barrier.wait()
            for _ in range(20):
                model(x).pow(2).mean().backward()
        except Exception as error:   # noqa: BLE001 - reported below
            errors.append(error)

    with tw.profile() as prof:
        threads = [threading.Thread(target=train, args=(seed,)) for seed in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    records = prof.records()
    by_id = {r.call_id: r for r in records}
    addmm = [r for r in records if r.api == "AddmmBackward0"]
    assert len(addmm) == 2 * 20 * 3
    for node in addmm:
        forward = by_id[node.fwd_call_id]
        assert forward.tid == node.tid and forward.api == "torch.nn.functional.linear"
    assert len({r.tid for r in addmm}) == 2


def test_results_identical_and_nothing_left_in_libtorch_after_stop():
    def run(profiled):
        torch.manual_seed(0)
        model = MLP()
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        x = torch.randn(8, 8)
        losses = []
        for _ in range(5):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().clone() for p in model.parameters()]

    plain = run(False)
    with tw.profile() as prof:
        profiled = run(True)
    assert prof.session.stats()["backward"] == "on"
    assert plain[0] == profiled[0] and all(torch.equal(a, b) for a, b in zip(plain[1], profiled[1]))
    stray = _core.backward_stray_hooks()
    run(False)   # after stop: no callback of ours is left in libtorch
    assert _core.backward_stray_hooks() == stray
    with tw.profile() as again:   # a second session records again
        run(True)
    assert any(r.api == "AddmmBackward0" for r in again.records())


def test_aten_off_records_no_node_and_bad_values_are_named():
    model, x = MLP(), torch.randn(4, 8)
    with tw.profile(aten="off") as prof:
        model(x).sum().backward()
    assert not [r for r in prof.records() if "Backward" in r.api]
    assert prof.session.stats()["backward"] == "off"
    with pytest.raises(ValueError, match="config key 'aten': \"yes\" is not accepted: give one of: backward off all"):
        tw.profile(aten="yes")


def profiler_operators(make_model, make_input, loss_of):
    torch.manual_seed(0)
    model, x = make_model(), make_input()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    one_step(model, x, loss_of, opt)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        one_step(model, x, loss_of, opt)
    return collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_aten_all_records_every_operator_torch_profiler_sees(workload):
    expected = profiler_operators(*WORKLOADS[workload])
    assert expected["aten::mm"] + expected["aten::addmm"] + expected["aten::convolution"] > 0
    prof, _ = torchwrapper_nodes(*WORKLOADS[workload], aten="all", args="none")
    records = prof.records()
    # on the thread that ran the step; operators that torch's worker threads run (an intra-op pool's
    # aten::empty) are recorded too, where torch.profiler (thread-local callbacks) has none
    tid = threading.get_native_id()
    assert collections.Counter(r.api for r in records if r.api.startswith("aten::") and r.tid == tid) == expected
    # the nodes are all there too, as with aten "backward"
    assert collections.Counter(r.api for r in records if is_node(r) and not r.api.startswith("aten::")) == \
        profiler_nodes(*WORKLOADS[workload])


def test_aten_all_nests_operators_under_the_calls_and_nodes_that_run_them():
    prof, _ = torchwrapper_nodes(lambda: MLP(), lambda: torch.randn(4, 8), lambda out: out.pow(2).mean(),
                                 aten="all", args="none")
    records = prof.records()
    by_id = {r.call_id: r for r in records}
    addmm = [r for r in records if r.api == "aten::addmm"]
    assert len(addmm) == 3
    for op in addmm:   # aten::addmm inside aten::linear inside the profiled torch.nn.functional.linear
        linear = by_id[op.parent_id]
        assert linear.api == "aten::linear" and by_id[linear.parent_id].api == "torch.nn.functional.linear"
    for node in [r for r in records if r.api == "AddmmBackward0"]:
        ops = [r for r in records if r.parent_id == node.call_id]
        assert ops and all(r.api.startswith("aten::") for r in ops)
        assert node.fwd_api == "torch.nn.functional.linear"   # nodes keep their link
        assert node.self_ns <= node.cost_ns - sum(r.cost_ns for r in ops) + 1000
    # every operator is inside a profiled call or a node: none is outermost
    assert all(r.parent_id != 0 for r in records if r.api.startswith("aten::"))
    stray = _core.backward_stray_hooks()
    torch.ones(3, requires_grad=True).mul(2).sum().backward()   # after stop: no callback of ours left
    assert _core.backward_stray_hooks() == stray
    with tw.profile(aten="backward", args="none") as again:   # the next session observes nodes only
        MLP()(torch.randn(2, 8)).sum().backward()
    assert not [r for r in again.records() if r.api.startswith("aten::")]
    assert any(r.api == "AddmmBackward0" for r in again.records())


def test_a_layer_built_for_another_torch_is_refused_with_one_line():
    session = tw.Session(aten="backward", torch_layer=(LAYER, "0.0.1"))
    session.start()
    torch.ones(2, requires_grad=True).sum().backward()
    session.stop()
    stats = session.stats()
    assert stats["backward"] == "off"
    assert stats["backward_unavailable"] == (f"the libtorch layer was built against torch {torch.__version__} and "
                                             "this is torch 0.0.1: backward nodes are off (reinstall torchwrapper "
                                             "with this torch to have them)") or \
        stats["backward_unavailable"] == (f"the libtorch layer was built against torch {torch.__version__} and this "
                                          "is torch 0.0.1")
    assert "\n" not in stats["backward_unavailable"]


def test_each_feature_refused_by_another_torch_says_what_is_off_and_the_rest_records(monkeypatch):
    from torchwrapper import _profile
    monkeypatch.setattr(_profile, "_torch_layer", lambda: (LAYER, "0.0.1"))
    x = torch.ones(2, 2, requires_grad=True)
    with pytest.warns(RuntimeWarning, match="config memory: the libtorch layer was built against torch .* and this "
                                            "is torch 0.0.1: memory is not measured"):
        with tw.profile(aten="backward", flops=True, memory=True, args="none") as prof:
            torch.mm(x, x).sum().backward()
    stats = prof.stats()
    built = f"the libtorch layer was built against torch {torch.__version__} and this is torch 0.0.1"
    assert stats["backward"] == "off" and stats["backward_unavailable"] == (
        f"{built}: backward nodes are off (reinstall torchwrapper with this torch to have them)")
    assert stats["flops"] == "off" and stats["flops_unavailable"] == (
        f"{built}: FLOPs are not counted (reinstall torchwrapper with this torch to have them)")
    assert stats["memory"] == "off" and stats["memory_unavailable"] == (
        f"{built}: memory is not measured (reinstall torchwrapper with this torch to have it)")
    mm = [r for r in prof.records() if r.api == "torch.mm"]   # the calls themselves are recorded
    assert len(mm) == 1 and mm[0].flops == 0


def test_tw_report_charges_each_apis_nodes_to_its_bwd_column(tmp_path):
    import csv
    import subprocess
    import sys

    out = str(tmp_path / "out")
    torchwrapper_nodes(lambda: MLP(), lambda: torch.randn(4, 8), lambda o: o.pow(2).mean(), out_dir=out, format="csv")
    frame = tw.load(out)
    nodes = frame[frame["fwd_call_id"] != 0]
    expected = nodes.groupby("fwd_api")["cost_ns"].sum().to_dict()
    done = subprocess.run([sys.executable, "-m", "torchwrapper", "report", "--format", "csv", out], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stderr
    rows = {row["api"]: row for row in csv.DictReader(done.stdout.splitlines())}
    assert {api: int(row["bwd_ns"]) for api, row in rows.items() if int(row["bwd_ns"])} == expected
    assert int(rows["AddmmBackward0"]["calls"]) == 3   # the nodes keep rows of their own


def test_a_forked_child_records_its_own_backward_nodes(tmp_path):
    """A forked child (a DataLoader worker, a fork of the training process) inherits libtorch's
    callbacks: its nodes go to its own files, and the parent's and the child's stops both return."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os, sys, torch, torchwrapper as tw
        model = torch.nn.Linear(4, 3)
        x = torch.randn(2, 4)
        with tw.profile(out_dir=sys.argv[1], format="csv"):
            model(x).sum().backward()
            pid = os.fork()
            if pid == 0:
                for _ in range(3):
                    model(x).sum().backward()
                sys.exit(0)
            model(x).sum().backward()
            _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), pid)
    """)
    # No CUDA device in it: where there is one, torch itself refuses a backward pass in a forked child
    # once the parent's has run ("Unable to handle autograd's threading in combination with fork-based
    # multiprocessing": autograd's device threads do not survive fork), on a CPU model too.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    child_status, child = (int(word) for word in done.stdout.split()[-2:])
    assert child_status == 0, done.stderr  # the child's own stop (at its exit) returned
    frame = tw.load(str(tmp_path))
    assert (frame["pid"] == child).sum() > 0, "the child wrote no records"
    nodes = frame[frame["api"] == "AddmmBackward0"]
    assert (nodes["pid"] == child).sum() == 3 and (nodes["pid"] != child).sum() == 2
    calls = frame.set_index(["pid", "call_id"])
    for _, node in nodes.iterrows():
        assert calls.loc[(node["pid"], node["fwd_call_id"]), "api"] == "torch.nn.functional.linear"


def test_checkpointed_blocks_recompute_under_backward_and_their_nodes_are_charged_to_the_block():
    """torch.utils.checkpoint recomputes a block's forward during backward: the recomputed calls are
    recorded with the block's module path, and the block's nodes (made by the first forward; the
    recomputation only saves tensors again) are charged to the first forward's calls."""
    import torch.utils.checkpoint as checkpoint

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            return self.head(checkpoint.checkpoint(self.block, x, use_reentrant=False))

    torch.manual_seed(0)
    model, x = Net(), torch.randn(4, 8, requires_grad=True)
    expected_grad = None
    for profiled in (False, True):
        model.zero_grad()
        x.grad = None
        if profiled:
            with tw.profile() as prof:
                model(x).sum().backward()
        else:
            model(x).sum().backward()
            expected_grad = x.grad.clone()
    assert torch.equal(x.grad, expected_grad)  # results identical
    records = prof.records()
    by_id = {r.call_id: r for r in records}
    addmm = [r for r in records if r.api == "AddmmBackward0"]
    assert sorted(r.module for r in addmm) == ["Net.block.0", "Net.block.2", "Net.head"]
    for node in addmm:
        assert by_id[node.fwd_call_id].api == "torch.nn.functional.linear"
    # the block's forward ran twice, once recomputed inside backward: that time is the block's too
    linears = [r for r in records if r.api == "torch.nn.Linear.forward" and r.module in ("Net.block.0", "Net.block.2")]
    assert len(linears) == 4
    first_backward_node = min(r.call_id for r in records if r.fwd_call_id)
    assert sum(r.call_id > first_backward_node for r in linears) == 2
    assert prof.session.stats()["backward_unlinked"] == 0


def test_tensor_and_module_hooks_run_inside_backward_and_nodes_stay_linked():
    torch.manual_seed(0)
    model = MLP()
    seen = []
    model.layers[1].register_full_backward_hook(lambda module, gin, gout: seen.append("module"))
    x = torch.randn(4, 8, requires_grad=True)
    x.register_hook(lambda grad: seen.append("tensor") or grad * 2)
    with tw.profile() as prof:
        model(x).pow(2).mean().backward()
    assert seen == ["module", "tensor"]
    records = prof.records()
    addmm = [r for r in records if r.api == "AddmmBackward0"]
    assert sorted(r.module for r in addmm) == ["MLP.layers.0", "MLP.layers.1", "MLP.layers.2"]
    # full backward hooks add their own nodes (BackwardHookFunctionBackward), linked like the rest
    hooks = [r for r in records if r.api == "BackwardHookFunctionBackward"]
    assert hooks and all(r.fwd_call_id != 0 for r in hooks)
    assert prof.session.stats()["backward_unlinked"] == 0


def test_a_compiled_model_s_backward_is_one_node_charged_to_the_compiled_call():
    torch.manual_seed(0)
    model = MLP()
    compiled = torch.compile(model, backend="aot_eager")  # AOTAutograd's joint graph, no code generation
    x = torch.randn(4, 8)
    compiled(x).pow(2).mean().backward()  # compiles
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with tw.profile() as prof:
        compiled(x).pow(2).mean().backward()
    assert all(torch.equal(p.grad, e) for p, e in zip(model.parameters(), expected))
    records = prof.records()
    by_id = {r.call_id: r for r in records}
    nodes = [r for r in records if r.api == "CompiledFunctionBackward"]
    assert len(nodes) == 1 and nodes[0].fwd_call_id != 0
    # charged to a call made while the compiled graph's forward ran
    assert by_id[nodes[0].fwd_call_id].api == nodes[0].fwd_api != ""
    assert prof.session.stats()["backward_unlinked"] == 0


DDP_PROGRAM = """
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp, torchwrapper as tw

def main(rank, out):
    # a file store: no port to find free first, which another test's job could take meanwhile
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2)))
    x = torch.randn(4, 8) + rank
    model(x).sum().backward()   # warm-up: DDP's first backward builds its buckets
    with tw.profile(out_dir=os.path.join(out, str(rank)), format="csv"):
        model(x).sum().backward()
    dist.barrier()  # no rank leaves while the other still talks to it (gloo aborts on a closed peer)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(main, args=(sys.argv[1],), nprocs=2)
"""


def test_ddp_with_gloo_its_allreduce_runs_inside_backward_and_every_node_is_recorded(tmp_path):
    import subprocess
    import sys

    (tmp_path / "ddp.py").write_text(DDP_PROGRAM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(tmp_path / "ddp.py"), str(tmp_path / "out"), str(tmp_path / "store")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for rank in ("0", "1"):
        frame = tw.load(str(tmp_path / "out" / rank))
        nodes = frame[frame["api"] == "AddmmBackward0"]
        # DDP is the model: its class names the paths, named_modules()'s "module." the wrapped one
        assert len(nodes) == 2 and set(nodes["module"]) == {"DistributedDataParallel.module.0",
                                                            "DistributedDataParallel.module.1"}
        forwards = frame.set_index("call_id").loc[nodes["fwd_call_id"]]
        assert set(forwards["api"]) == {"torch.nn.functional.linear"}


def test_the_trace_draws_an_arrow_from_each_forward_call_to_its_backward_nodes(tmp_path):
    import json
    import subprocess

    build = os.environ.get("top_builddir", os.path.join(os.path.dirname(__file__), "..", ".."))
    tw_report = os.path.join(build, "tw-report")

    torch.manual_seed(0)
    model, x = MLP(), torch.randn(4, 8)
    with tw.profile(out_dir=str(tmp_path / "run"), format="csv") as prof:
        model(x).pow(2).mean().backward()
    nodes = {r.call_id: r for r in prof.records() if r.fwd_call_id}
    calls = {r.call_id: r for r in prof.records()}
    # and a run whose node rows come before their forward call's (another thread's records can)
    (tmp_path / "reversed").mkdir()
    (tmp_path / "reversed" / "tw-7-0001.csv").write_text(
        "call_id,api,start_ns,cost_ns,self_ns,gpu_ns,pid,tid,depth,parent_id,error,args,module,step,site,"
        "fwd_call_id,fwd_api\n"
        "9,AddmmBackward0,5000,100,100,0,7,8,0,0,0,,fc,0,0,2,torch.nn.functional.linear\n"
        "2,torch.nn.functional.linear,1000,300,300,0,7,7,1,1,0,,,0,0,0,\n")
    for run, expected in (("run", {n: (calls[r.fwd_call_id].tid, r.tid) for n, r in nodes.items()}),
                          ("reversed", {9: (7, 8)})):
        trace = tmp_path / f"{run}.json"
        done = subprocess.run([tw_report, "--trace", str(trace), str(tmp_path / run)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        events = json.loads(trace.read_text())["traceEvents"]
        # torch.profiler's fwdbwd arrows (Kineto's flow events): each ends on its node's event, at
        # the node's start; the node says its forward call as Sequence number and Fwd thread id
        arrows = [e for e in events if e.get("cat") == "fwdbwd"]
        starts = {e["id"]: e for e in arrows if e["ph"] == "s"}
        ends = {e["id"]: e for e in arrows if e["ph"] == "f"}
        at = {(e["pid"], e["tid"], e["ts"]): e for e in events if e["ph"] == "X" and e["cat"] == "cpu_op"}
        got = {}
        for i, end in ends.items():
            node = at[end["pid"], end["tid"], end["ts"]]
            fwd = at[starts[i]["pid"], starts[i]["tid"], starts[i]["ts"]]
            assert node["args"]["Sequence number"] == node["args"]["fwd_call_id"] == fwd["args"]["call_id"]
            if run == "run":
                assert node["args"]["Fwd thread id"] == fwd["tid"]
            got[node["args"]["call_id"]] = (starts[i]["tid"], end["tid"])
        assert got == expected and len(starts) == len(ends) == len(expected)
