# SPDX-License-Identifier: MIT
"""FLOPs per call (config flops): each call's own FLOPs and each backward node's, compared with
torch.utils.flop_counter.FlopCounterMode on real training steps: forward and backward separately,
exactly, per step and per module, for a GPT-2-class language model (scaled_dot_product_attention),
a ResNet-class CNN (a grouped convolution, batch norm, residuals), an MLP, and recurrent networks
(a Conv1d front end with nn.GRU, nn.LSTM or nn.RNN); and the formulas one API at a time (matmul's
folding, einsum, transposed and unbatched convolutions, attention, GRU, LSTM and RNN in all their
forms, their cells). test_flops_report.py has the config, the files and the reports."""
import collections
import contextlib
import os
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

import torchwrapper as tw

LAYER = os.path.join(os.path.dirname(os.path.abspath(tw.__file__)), "_torch.so")
pytestmark = pytest.mark.skipif(not os.path.exists(LAYER), reason="the libtorch layer was not built (configure)")

aten = torch.ops.aten


# FlopCounterMode has no formula for CPU's fused attention kernel (it counts it as 0); torchwrapper
# counts it with FlopCounterMode's own formulas for the CUDA kernels, given here as custom_mapping.
def _cpu_attention(query, key, value, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(query, key, value)


def _cpu_attention_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs):
    return sdpa_backward_flop_count(grad_out, query, key, value)


CPU_ATTENTION = {aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention,
                 aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward}


def counter():
    return FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION)


@contextlib.contextmanager
def onednn_off():
    """FlopCounterMode has no formula for oneDNN's LSTM kernel (mkldnn_rnn_layer, what nn.LSTM runs
    on CPU in float32 without a projection), which it counts as 0; torchwrapper counts it as
    FlopCounterMode counts the same LSTM with oneDNN off: the steps' products, as GRU and RNN always
    run. References are taken that way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # "TF32 acceleration on top of oneDNN ..."
        with torch.backends.mkldnn.flags(enabled=False):
            yield


# ---- the models ----------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """GPT-2's shape, small: token and position embeddings, pre-norm blocks, a tied head."""

    def __init__(self, vocab=50, context=16, width=32, heads=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)   # the head shares the embedding's weight


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride, groups=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2, groups=2)   # a grouped convolution
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class MLP(nn.Module):
    def __init__(self, widths=(12, 32, 24, 5)):
        super().__init__()
        self.layers = nn.Sequential(*[m for a, b in zip(widths, widths[1:]) for m in (nn.Linear(a, b), nn.ReLU())][:-1])

    def forward(self, x):
        return self.layers(x)


class Recurrent(nn.Module):
    """Issue 47's model: a Conv1d front end, a recurrent network over its steps, a linear head on the
    last step's output (batch_first or not, as the network takes it)."""

    def __init__(self, rnn=nn.GRU, channels=8, width=24, classes=5, **kwargs):
        super().__init__()
        self.conv = nn.Conv1d(channels, 16, 3, padding=1)
        self.rnn = rnn(16, width, **kwargs)
        self.batch_first = kwargs.get("batch_first", False)
        self.head = nn.Linear(width * (2 if kwargs.get("bidirectional") else 1), classes)

    def forward(self, x):   # x: (batch, channels, steps)
        y = F.relu(self.conv(x))
        y, _ = self.rnn(y.transpose(1, 2) if self.batch_first else y.permute(2, 0, 1))
        return self.head(y[:, -1] if self.batch_first else y[-1])


def _recurrent_batch(step):
    g = torch.Generator().manual_seed(step)
    labels = torch.randint(0, 5, (4,), generator=g)
    return torch.randn(4, 8, 20, generator=g), lambda out: F.cross_entropy(out, labels)


def _gpt_batch(step):
    g = torch.Generator().manual_seed(step)
    idx = torch.randint(0, 50, (3, 16), generator=g)
    return idx, lambda out: F.cross_entropy(out.reshape(-1, out.shape[-1]), idx.reshape(-1))


def _resnet_batch(step):
    g = torch.Generator().manual_seed(step)
    labels = torch.randint(0, 10, (4,), generator=g)
    return torch.randn(4, 3, 12, 12, generator=g), lambda out: F.cross_entropy(out, labels)


def _mlp_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(7, 12, generator=g), lambda out: out.pow(2).mean()


WORKLOADS = {"gpt": (GPT, _gpt_batch), "resnet": (ResNet, _resnet_batch), "mlp": (MLP, _mlp_batch),
             # recurrent: 2 bidirectional GRU layers, batch first; 2 LSTM layers (oneDNN's kernel);
             # 3 bidirectional ReLU RNN layers, steps first
             "gru": (lambda: Recurrent(nn.GRU, num_layers=2, bidirectional=True, batch_first=True), _recurrent_batch),
             "lstm": (lambda: Recurrent(nn.LSTM, num_layers=2), _recurrent_batch),
             "rnn": (lambda: Recurrent(nn.RNN, num_layers=3, bidirectional=True, nonlinearity="relu"),
                     _recurrent_batch)}
STEPS = 2


def reference(make_model, batch):
    """FlopCounterMode's totals per step, forward and backward apart, and its per-module table of
    each step's forward and backward together (oneDNN off: see onednn_off)."""
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = []
    for step in range(STEPS):
        x, loss_of = batch(step)
        opt.zero_grad()
        with onednn_off(), counter() as fwd:
            loss = loss_of(model(x))
        with onednn_off(), counter() as bwd:
            loss.backward()
        opt.step()
        with onednn_off(), counter() as both:
            loss = loss_of(model(x))
            loss.backward()
        opt.zero_grad()
        steps.append((fwd.get_total_flops(), bwd.get_total_flops(),
                      {name: sum(ops.values()) for name, ops in both.get_flop_counts().items()},
                      {name: sum(ops.values()) for name, ops in fwd.get_flop_counts().items()}))
    return model, steps


def profiled(make_model, batch, **config):
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with tw.profile(**config) as prof:
        for step in range(STEPS):
            x, loss_of = batch(step)
            opt.zero_grad()
            loss_of(model(x)).backward()
            opt.step()   # ends the step
    return model, prof


def is_node(record):
    return record.fwd_call_id != 0 or "Backward" in record.api or record.api.endswith("AccumulateGrad")


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_flops_per_step_equal_flop_counter_modes_forward_and_backward(workload):
    make_model, batch = WORKLOADS[workload]
    _, expected = reference(make_model, batch)
    _, prof = profiled(make_model, batch)
    assert prof.session.stats()["flops"] == "on"
    records = prof.records()
    for step, (fwd, bwd, _, _) in enumerate(expected):
        assert fwd > 0 and bwd > 0
        in_step = [r for r in records if r.step == step]
        assert sum(r.flops for r in in_step if not is_node(r)) == fwd, f"forward, step {step}"
        assert sum(r.flops for r in in_step if is_node(r)) == bwd, f"backward, step {step}"
        # flops_total of the outermost calls adds up to the same: nothing counted twice
        assert sum(r.flops_total for r in in_step if r.depth == 0) == fwd + bwd


# Modules that run beside another branch of the model (see the test below).
BRANCHES = {"resnet": {"ResNet.layer2.down", "ResNet.layer2.down.0"}}


def module_flops(records):
    """Per module path (named as FlopCounterMode names modules: the model's class, then the path in
    it): the flops_total of its forward calls, and of the backward nodes charged to it or to modules
    under it."""
    fwd, both = collections.Counter(), collections.Counter()
    for r in records:
        if r.module is None:
            continue
        name = r.module
        if is_node(r):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                both[".".join(parts[:i])] += r.flops
        elif r.api.endswith(".forward"):
            fwd[name] += r.flops_total
            both[name] += r.flops_total
    return fwd, both


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_flops_per_module_equal_flop_counter_modes_table(workload):
    make_model, batch = WORKLOADS[workload]
    model, expected = reference(make_model, batch)
    _, prof = profiled(make_model, batch)
    records = prof.records()
    for step, (_, _, table, fwd_table) in enumerate(expected):
        fwd, both = module_flops([r for r in records if r.step == step])
        # the modules reported: every one whose forward counted FLOPs, torch's and the model's own
        # classes (GPT, Block, Attention): the same set as FlopCounterMode's
        reported = {name for name, n in fwd.items() if n}
        assert reported == {name for name, n in fwd_table.items() if name != "Global" and n}
        assert {name: fwd[name] for name in reported} == {name: fwd_table.get(name, 0) for name in reported}
        # with backward: FlopCounterMode's module tracker counts under a module whatever runs between
        # the gradient of its output and those of its inputs. For a branch that runs beside another
        # (a residual block's downsample), that interval holds the other branch's nodes too, which
        # it then counts there as well; the block around both is exact again.
        overlapping = BRANCHES.get(workload, set())
        assert {name: both[name] for name in reported - overlapping} == \
            {name: table.get(name, 0) for name in reported - overlapping}
        for name in overlapping:
            assert fwd_table[name] < both[name] < table[name]


def test_a_retained_graphs_second_backward_counts_again():
    torch.manual_seed(0)
    model, x = MLP(), torch.randn(7, 12)
    with counter() as once:
        model(x).pow(2).mean().backward()
    with tw.profile() as prof:
        loss = model(x).pow(2).mean()
        loss.backward(retain_graph=True)
        loss.backward()
    nodes = [r for r in prof.records() if is_node(r)]
    first = once.get_total_flops() - sum(r.flops for r in prof.records() if not is_node(r))
    assert first > 0 and sum(r.flops for r in nodes) == 2 * first
    addmm = [r for r in nodes if r.api == "AddmmBackward0"]
    assert len(addmm) == 6 and [r.flops for r in addmm[:3]] == [r.flops for r in addmm[3:]]


# ---- one API at a time ---------------------------------------------------------------------------

def _calls():
    g = torch.Generator().manual_seed(1)

    def t(*shape, grad=False):
        return torch.randn(*shape, generator=g).requires_grad_(grad)

    a34, b45 = t(3, 4, grad=True), t(4, 5, grad=True)
    batched = t(2, 3, 4, grad=True)
    strided = t(3, 2, 4).transpose(0, 1)   # its batch cannot fold: a bmm
    v4, v4g = t(4), t(4, grad=True)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x8 = t(2, 5, 8, grad=True)
    return [
        ("mm", lambda: torch.mm(a34, b45)),
        ("Tensor.mm", lambda: a34.mm(b45)),
        ("@ 2-D", lambda: a34 @ b45),
        ("__rmatmul__", lambda: b45.__rmatmul__(a34)),
        ("matmul 1-D x 2-D", lambda: torch.matmul(v4g, b45)),
        ("matmul 2-D x 1-D (mv)", lambda: torch.matmul(a34, v4g)),
        ("matmul 1-D x 1-D (dot)", lambda: torch.matmul(v4, v4g)),
        ("matmul 3-D x 1-D folded (mv)", lambda: torch.matmul(batched, v4)),
        ("matmul 3-D x 1-D, grad (mv)", lambda: torch.matmul(batched, v4g)),
        ("matmul 3-D strided x 1-D (bmm)", lambda: torch.matmul(strided, v4)),
        ("matmul 3-D x 2-D", lambda: batched @ b45),
        ("matmul broadcast", lambda: torch.matmul(t(5, 1, 3, 4, grad=True), t(2, 4, 6))),
        ("Tensor.matmul 2-D x 3-D", lambda: a34.matmul(t(2, 4, 5))),
        ("linalg.matmul broadcast", lambda: torch.linalg.matmul(t(2, 3, 4, grad=True), b45)),
        ("addmm", lambda: torch.addmm(t(5, grad=True), a34, b45)),
        ("Tensor.addmm", lambda: t(3, 5).addmm(a34, b45)),
        ("bmm", lambda: torch.bmm(batched, t(2, 4, 6, grad=True))),
        ("Tensor.bmm", lambda: batched.bmm(t(2, 4, 6))),
        ("baddbmm", lambda: torch.baddbmm(t(2, 3, 6), batched, t(2, 4, 6, grad=True))),
        ("einsum bij,bjk->bik", lambda: torch.einsum("bij,bjk->bik", batched, t(2, 4, 6, grad=True))),
        ("einsum ij,jk (implicit)", lambda: torch.einsum("ij,jk", a34, b45)),
        ("einsum outer i,j->ij (mul)", lambda: torch.einsum("i,j->ij", v4g, t(3))),
        ("einsum ...ij,...jk->...ik", lambda: torch.einsum("...ij,...jk->...ik", batched, t(4, 2))),
        ("einsum ij,jk->i (sum first)", lambda: torch.einsum("ij,jk->i", a34, b45)),
        ("einsum list", lambda: torch.einsum("bhqd,bhkd->bhqk", [t(2, 2, 3, 4, grad=True), t(2, 2, 5, 4)])),
        ("linear 2-D", lambda: F.linear(a34, t(6, 4, grad=True), t(6, grad=True))),
        ("linear 3-D, no bias", lambda: F.linear(batched, t(6, 4, grad=True))),
        ("linear 1-D", lambda: F.linear(v4g, t(6, 4))),
        ("linear keyword", lambda: F.linear(input=batched, weight=t(6, 4, grad=True), bias=t(6))),
        ("conv1d unbatched", lambda: F.conv1d(t(2, 9, grad=True), t(4, 2, 3, grad=True))),
        ("conv2d grouped, stride", lambda: F.conv2d(t(2, 4, 9, 9, grad=True), t(6, 2, 3, 3, grad=True), None, 2, 1,
                                                    1, 2)),
        ("conv2d input needs no grad", lambda: F.conv2d(t(2, 3, 8, 8), t(5, 3, 3, 3, grad=True), t(5, grad=True))),
        ("conv2d padding same", lambda: F.conv2d(t(1, 2, 7, 7, grad=True), t(3, 2, 4, 4), padding="same")),
        ("conv3d dilated", lambda: F.conv3d(t(1, 2, 6, 6, 6, grad=True), t(3, 2, 2, 2, 2, grad=True), dilation=2)),
        ("conv_transpose1d", lambda: F.conv_transpose1d(t(2, 4, 7, grad=True), t(4, 3, 3, grad=True), stride=2)),
        ("conv_transpose2d grouped", lambda: F.conv_transpose2d(t(1, 4, 5, 5, grad=True), t(4, 3, 3, 3, grad=True),
                                                                groups=2, output_padding=1, stride=2)),
        ("conv_transpose3d", lambda: F.conv_transpose3d(t(1, 2, 3, 3, 3), t(2, 2, 2, 2, 2, grad=True))),
        ("attention", lambda: F.scaled_dot_product_attention(t(2, 3, 6, 4, grad=True), t(2, 3, 5, 4, grad=True),
                                                             t(2, 3, 5, 8, grad=True))),
        ("attention, mask (math)", lambda: F.scaled_dot_product_attention(
            t(2, 6, 4, grad=True), t(2, 5, 4, grad=True), t(2, 5, 8, grad=True), attn_mask=t(6, 5, grad=True))),
        ("MultiheadAttention", lambda: mha(x8, x8, x8)[0]),
    ]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("name,call", _calls(), ids=[name for name, _ in _calls()])
def test_each_api_counts_what_flop_counter_mode_counts(name, call):
    with counter() as fwd:
        out = call()
    with counter() as bwd:
        if out.requires_grad:
            out.sum().backward()
    with tw.profile() as prof:
        out = call()
        if out.requires_grad:
            out.sum().backward()
    records = prof.records()
    # the outermost calls' totals (the tensors made for the call count none)
    assert sum(r.flops_total for r in records if r.depth == 0 and not is_node(r)
               and r.api != "torch.Tensor.backward") == fwd.get_total_flops(), name
    assert sum(r.flops for r in records if not is_node(r)) == fwd.get_total_flops(), name
    assert sum(r.flops for r in records if is_node(r)) == bwd.get_total_flops(), name


# ---- recurrent networks, one call at a time -------------------------------------------------------

def _rnn_calls():
    """(name, API, call): call() runs a fresh forward (its own input and graph) and returns the loss.
    Every form torch.gru, torch.lstm, torch.rnn_tanh and torch.rnn_relu take from nn.GRU, nn.LSTM
    and nn.RNN: layers, directions, steps or batch first, packed sequences, no bias, LSTM's
    projection (no oneDNN then), an hx or an input that needs a gradient; and the cells."""
    def case(rnn, input_size=6, hidden=5, steps=7, batch=4, packed=False, hx_grad=False, x_grad=False,
             unbatched=False, **kwargs):
        torch.manual_seed(0)
        module = rnn(input_size, hidden, **kwargs)
        first = kwargs.get("batch_first", False)
        layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
        g = torch.Generator().manual_seed(1)
        shape = (steps, input_size) if unbatched else (batch, steps, input_size) if first else \
            (steps, batch, input_size)
        x = torch.randn(*shape, generator=g).requires_grad_(x_grad)
        h0 = torch.randn(*((layers,) if unbatched else (layers, batch)), kwargs.get("proj_size", 0) or hidden,
                         generator=g).requires_grad_(hx_grad)
        c0 = torch.randn(*h0.shape[:-1], hidden, generator=g)
        hx = (h0, c0) if rnn is nn.LSTM else h0

        def call():
            # looked up at each call: the profiled one (its node is then charged to it)
            inp = torch.nn.utils.rnn.pack_padded_sequence(x, [steps, 5, 5, 2][:batch], batch_first=first) \
                if packed else x
            out, h = module(inp, hx) if hx_grad else module(inp)
            out = out.data if packed else out
            return out.pow(2).sum() + (h[0] if rnn is nn.LSTM else h).sum()
        return call

    def cell(rnn, batch=3, hx_grad=False, **kwargs):
        torch.manual_seed(0)
        module = rnn(6, 5, **kwargs)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(*((batch,) if batch else ()), 6, generator=g)
        h = torch.randn(*((batch,) if batch else ()), 5, generator=g).requires_grad_(hx_grad)
        hx = (h, torch.randn(h.shape, generator=g)) if rnn is nn.LSTMCell else h

        def call():
            out = module(x, hx) if hx_grad else module(x)
            return (out[0] if rnn is nn.LSTMCell else out).pow(2).sum()
        return call

    return [
        ("GRU 2 layers, bidirectional, batch first", "torch.gru",
         case(nn.GRU, num_layers=2, bidirectional=True, batch_first=True)),
        ("GRU 1 layer, no bias", "torch.gru", case(nn.GRU, bias=False)),
        ("GRU 3 layers, bidirectional, packed", "torch.gru",
         case(nn.GRU, num_layers=3, bidirectional=True, packed=True)),
        ("GRU batch first, packed, hx and input need grad", "torch.gru",
         case(nn.GRU, num_layers=2, batch_first=True, packed=True, hx_grad=True, x_grad=True)),
        ("GRU unbatched", "torch.gru", case(nn.GRU, unbatched=True, x_grad=True)),
        ("LSTM (oneDNN) 2 layers, bidirectional, batch first", "torch.lstm",
         case(nn.LSTM, num_layers=2, bidirectional=True, batch_first=True)),
        ("LSTM (oneDNN) hx and input need grad", "torch.lstm",
         case(nn.LSTM, num_layers=2, hx_grad=True, x_grad=True)),
        ("LSTM (oneDNN) bidirectional, no bias, input needs grad", "torch.lstm",
         case(nn.LSTM, bidirectional=True, bias=False, x_grad=True)),
        ("LSTM packed, batch first", "torch.lstm", case(nn.LSTM, num_layers=2, batch_first=True, packed=True)),
        ("LSTM projection, bidirectional", "torch.lstm",
         case(nn.LSTM, num_layers=2, bidirectional=True, proj_size=3, hx_grad=True)),
        ("RNN tanh 2 layers, bidirectional, batch first", "torch.rnn_tanh",
         case(nn.RNN, num_layers=2, bidirectional=True, batch_first=True)),
        ("RNN relu, hx needs grad", "torch.rnn_relu", case(nn.RNN, nonlinearity="relu", hx_grad=True)),
        ("RNN relu 2 layers, bidirectional, packed, batch first", "torch.rnn_relu",
         case(nn.RNN, nonlinearity="relu", num_layers=2, bidirectional=True, batch_first=True, packed=True)),
        ("GRUCell", "torch.gru_cell", cell(nn.GRUCell)),
        ("GRUCell unbatched, hx needs grad", "torch.gru_cell", cell(nn.GRUCell, batch=0, hx_grad=True)),
        ("LSTMCell hx needs grad", "torch.lstm_cell", cell(nn.LSTMCell, hx_grad=True)),
        ("LSTMCell unbatched, no bias", "torch.lstm_cell", cell(nn.LSTMCell, batch=0, bias=False)),
        ("RNNCell tanh", "torch.rnn_tanh_cell", cell(nn.RNNCell)),
        ("RNNCell relu, hx needs grad", "torch.rnn_relu_cell", cell(nn.RNNCell, nonlinearity="relu", hx_grad=True)),
    ]


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("name,api,call", _rnn_calls(), ids=[name for name, _, _ in _rnn_calls()])
def test_recurrent_networks_count_what_flop_counter_mode_counts(name, api, call):
    with onednn_off():
        with counter() as fwd:
            loss = call()
        with counter() as bwd:
            loss.backward()
    assert fwd.get_total_flops() > 0 and bwd.get_total_flops() > 0
    # as the modules run by default (oneDNN's LSTM kernel), and as the reference ran
    for context in (contextlib.nullcontext, onednn_off):
        with context(), tw.profile() as prof:
            call().backward()
        records = prof.records()
        # the module's kernel call (nn.GRU calls it as torch._VF.gru) is recorded, with the FLOPs
        assert sum(r.flops for r in records if r.api == api) == fwd.get_total_flops(), name
        assert sum(r.flops for r in records if not is_node(r)) == fwd.get_total_flops(), name
        nodes = [r for r in records if is_node(r) and r.flops]
        assert sum(r.flops for r in nodes) == bwd.get_total_flops(), name
        assert {r.fwd_api for r in nodes} == {api}, name
        assert prof.session.stats()["backward_unlinked"] == 0


def test_recurrent_kernels_are_wrapped_in_torch_vf_only_while_profiling():
    import torch._VF

    assert "gru" not in vars(torch._VF)
    with tw.profile():
        assert torch._VF.gru.api_name == "torch.gru" and torch._VF.lstm_cell.api_name == "torch.lstm_cell"
        assert torch._VF.gru is torch.gru
        assert "dropout" not in vars(torch._VF)   # what has no formula is recorded through its callers
    assert not {"gru", "lstm", "rnn_tanh", "rnn_relu", "gru_cell", "lstm_cell"} & set(vars(torch._VF))
    assert torch._VF.gru is torch._C._VariableFunctions.gru


def test_a_long_recurrent_network_keeps_every_nodes_link():
    # a 2-layer bidirectional GRU over 300 steps makes ~17,000 nodes in one forward
    torch.manual_seed(0)
    model, x = nn.GRU(8, 16, num_layers=2, bidirectional=True), torch.randn(300, 2, 8)
    loss = model(x)[0].sum()
    with counter() as bwd:
        loss.backward()
    with tw.profile() as prof:
        model(x)[0].sum().backward()
    assert prof.session.stats()["backward_unlinked"] == 0
    assert sum(r.flops for r in prof.records() if is_node(r)) == bwd.get_total_flops() > 0
