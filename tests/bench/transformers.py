# SPDX-License-Identifier: MIT
"""Transformer-class training workloads for the benchmarks, defined here (no download, no
torchvision): a decoder-only language model (GPT-2 class) and an encoder classifier (BERT class),
each trained with AdamW, clip_grad_norm_ and a learning-rate scheduler on generated tokens.

Run as a script (``python transformers.py gpt|bert STEPS [BLOCKS]``) it trains in blocks of STEPS
steps and prints one line of JSON per block with the block's loop time: that is what
``python -m torchwrapper run`` is timed on (process level, loop time only).
"""
from __future__ import annotations

import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, HIDDEN, HEADS, LAYERS, SEQ, BATCH = 1000, 128, 4, 2, 32, 4


class Attention(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.proj = nn.Linear(HIDDEN, HIDDEN)
        self.dropout = nn.Dropout(0.1)
        self.causal = causal

    def forward(self, x, padding=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(HIDDEN, dim=2)
        q, k, v = (y.view(b, t, HEADS, c // HEADS).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=padding, is_causal=self.causal,
                                           dropout_p=0.1 if self.training else 0.0)
        return self.dropout(self.proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class Block(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.attn = Attention(causal)
        self.mlp = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN),
                                 nn.Dropout(0.1))

    def forward(self, x, padding=None):
        x = x + self.attn(self.ln1(x), padding)
        return x + self.mlp(self.ln2(x))


class DecoderLM(nn.Module):
    """GPT-2 class: token and position embeddings, causal blocks, final LayerNorm, tied head."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(SEQ, HIDDEN)
        self.dropout = nn.Dropout(0.1)
        self.blocks = nn.ModuleList(Block(causal=True) for _ in range(LAYERS))
        self.ln = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.head.weight = self.tokens.weight   # tied

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.dropout(self.tokens(idx) + self.positions(pos))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class EncoderClassifier(nn.Module):
    """BERT class: embeddings with LayerNorm, bidirectional blocks with a padding mask, pooled head."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(SEQ, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN)
        self.blocks = nn.ModuleList(Block(causal=False) for _ in range(LAYERS))
        self.pool = nn.Linear(HIDDEN, HIDDEN)
        self.classify = nn.Linear(HIDDEN, classes)

    def forward(self, idx, lengths):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.ln(self.tokens(idx) + self.positions(pos))
        keep = pos[None, :] < lengths[:, None]                     # (batch, seq)
        padding = keep[:, None, None, :]                           # broadcast over heads and queries
        for block in self.blocks:
            x = block(x, padding)
        return self.classify(torch.tanh(self.pool(x[:, 0])))


def _optimizer(model):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * 0.5 * (1 + math.cos(s / 1000)))
    return opt, sched


def gpt_step_factory(seed: int = 0):
    torch.manual_seed(seed)
    model = DecoderLM()
    opt, sched = _optimizer(model)
    data = torch.randint(0, VOCAB, (BATCH, SEQ + 1))

    def loss():
        logits = model(data[:, :-1])
        return F.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))
    return _training_step(model, opt, sched, loss)


def bert_step_factory(seed: int = 0):
    torch.manual_seed(seed)
    model = EncoderClassifier()
    opt, sched = _optimizer(model)
    data = torch.randint(0, VOCAB, (BATCH, SEQ))
    lengths = torch.tensor([SEQ, SEQ - 5, SEQ - 11, 9])
    labels = torch.randint(0, 4, (BATCH,))

    def loss():
        return F.cross_entropy(model(data, lengths), labels)
    return _training_step(model, opt, sched, loss)


def _training_step(model, opt, sched, compute_loss):
    """One training step: the loss, backward, clip_grad_norm_, the optimizer and scheduler steps."""
    def step():
        loss = compute_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss
    return step


FACTORIES = {"gpt": gpt_step_factory, "bert": bert_step_factory}


def main(argv):
    name, steps = argv[0], int(argv[1])
    blocks = int(argv[2]) if len(argv) > 2 else 1
    torch.set_num_threads(int(argv[3]) if len(argv) > 3 else torch.get_num_threads())
    step = FACTORIES[name]()
    for block in range(blocks):
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            step()
        print(json.dumps({"block": block, "ns": time.perf_counter_ns() - t0}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
