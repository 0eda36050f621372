# SPDX-License-Identifier: MIT
"""A small Transformer text classifier as a lightning.pytorch LightningModule, trained by Lightning's
Trainer on the CPU: variable-length token sequences padded per batch, a masked mean pooling, a
running macro-F1 over the epoch, gradient clipping and a checkpoint of the latest weights.

A generalisation program for tw-report --findings (tests/python/test_findings_general.py): the
lines marked `# PLANTED:<kind>` make a common performance mistake (or are where it costs);
`--fixed` runs the same training with every one of them fixed."""
import argparse
import os
import shutil
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

import lightning.pytorch as L

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true", help="the same training without the planted mistakes")
parser.add_argument("--max-steps", type=int, default=48)
ARGS = parser.parse_args()
FIXED = ARGS.fixed

VOCAB, CLASSES, PAD = 500, 3, 0


class Reviews(Dataset):
    """Token sequences of 16 to 40 tokens whose class is which third of the vocabulary dominates them."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        lengths = torch.randint(16, 41, (n,), generator=g)
        self.labels = torch.randint(0, CLASSES, (n,), generator=g)
        self.texts = []
        for length, label in zip(lengths.tolist(), self.labels.tolist()):
            tokens = torch.randint(1, VOCAB, (length,), generator=g)
            biased = torch.rand(length, generator=g) < 0.4
            third = (VOCAB - 1) // CLASSES
            tokens[biased] = 1 + label * third + torch.randint(0, third, (int(biased.sum()),), generator=g)
            self.texts.append(tokens)

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return self.texts[i], self.labels[i]


class LengthBuckets(torch.utils.data.Sampler):
    """Batches of sequences of about one length (little padding), in a random order each epoch."""

    def __init__(self, dataset, batch_size):
        by_length = sorted(range(len(dataset)), key=lambda i: len(dataset.texts[i]))
        self.batches = [by_length[k:k + batch_size] for k in range(0, len(by_length) - batch_size + 1, batch_size)]

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        for k in torch.randperm(len(self.batches)).tolist():
            yield self.batches[k]


def pad_batch(items):
    texts, labels = zip(*items)
    ids = nn.utils.rnn.pad_sequence(list(texts), batch_first=True, padding_value=PAD)
    return ids, ids != PAD, torch.stack(labels)


def masked_mean(hidden, mask):
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def macro_f1_python(preds, labels):
    """Macro-F1 the way it is first written: counting over the tensors' elements."""
    tp, fp, fn = [0] * CLASSES, [0] * CLASSES, [0] * CLASSES
    for p, t in zip(preds, labels):  # PLANTED:python_metric
        if p == t:  # PLANTED:python_metric
            tp[int(t)] += 1
        else:
            fp[int(p)] += 1
            fn[int(t)] += 1
    return sum(2 * tp[c] / max(2 * tp[c] + fp[c] + fn[c], 1) for c in range(CLASSES)) / CLASSES


def macro_f1(confusion):
    """Macro-F1 from a confusion-matrix tensor (rows: label, columns: prediction)."""
    tp = confusion.diagonal()
    return (2 * tp / (confusion.sum(0) + confusion.sum(1)).clamp(min=1)).mean()


class TextClassifier(L.LightningModule):
    def __init__(self, d_model=96, heads=4, layers=2, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
        self.position = nn.Embedding(64, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=2 * d_model, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, CLASSES)
        if FIXED:
            self.pool = torch.compile(masked_mean, backend="eager", dynamic=True)
        else:   # "static shapes compile faster"
            self.pool = torch.compile(masked_mean, backend="eager", dynamic=False)  # PLANTED:recompile
        self.seen_preds, self.seen_labels = [], []
        self.register_buffer("confusion", torch.zeros(CLASSES, CLASSES), persistent=False)
        self.checkpoint_dir = tempfile.mkdtemp(prefix="lightning_module-")

    def forward(self, ids, mask):
        positions = torch.arange(ids.shape[1], device=ids.device)
        hidden = self.encoder(self.embed(ids) + self.position(positions), src_key_padding_mask=~mask)
        return self.head(self.norm(self.pool(hidden, mask)))  # PLANTED:recompile

    def training_step(self, batch, batch_idx):
        ids, mask, labels = batch
        logits = self(ids, mask)
        loss = F.cross_entropy(logits, labels)
        preds = logits.argmax(-1)
        if FIXED:   # the epoch's confusion matrix, one scatter a step
            self.confusion.view(-1).index_add_(0, labels * CLASSES + preds, torch.ones_like(preds, dtype=torch.float))
            epoch_f1 = macro_f1(self.confusion)
        else:   # every prediction of the epoch so far, scored again each step
            self.seen_preds.append(preds.detach())
            self.seen_labels.append(labels)
            all_preds = torch.cat(self.seen_preds)  # PLANTED:growing
            all_labels = torch.cat(self.seen_labels)  # PLANTED:growing
            epoch_f1 = macro_f1_python(all_preds, all_labels)
        self.log("train_loss", loss)
        self.log("train_f1", epoch_f1)
        return loss

    def on_train_epoch_start(self):
        self.seen_preds.clear()
        self.seen_labels.clear()
        self.confusion.zero_()

    def on_before_optimizer_step(self, optimizer):
        if FIXED:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm=1.0)
        else:   # clipping by the global norm, by hand
            grads = [p.grad for p in self.parameters() if p.grad is not None]
            grad_norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))  # PLANTED:per_parameter
            for g in grads:
                g.mul_(torch.clamp(1.0 / (grad_norm + 1e-6), max=1.0))  # PLANTED:per_parameter
        self.log("grad_norm", grad_norm)

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        if FIXED:
            optimizer.zero_grad()
        else:
            optimizer.zero_grad(set_to_none=False)  # PLANTED:zero_grad_fill

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if not FIXED:   # always have the latest weights on disk
            torch.save(self.state_dict(), os.path.join(self.checkpoint_dir, "last.pt"))  # PLANTED:needless_call

    def on_train_end(self):
        if FIXED:
            torch.save(self.state_dict(), os.path.join(self.checkpoint_dir, "last.pt"))
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=self.hparams.lr,
                                                        total_steps=ARGS.max_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def train_dataloader(self):
        reviews = Reviews(32 * ARGS.max_steps, seed=0)
        return DataLoader(reviews, batch_sampler=LengthBuckets(reviews, 32), collate_fn=pad_batch)


def main():
    L.seed_everything(0, verbose=False)
    model = TextClassifier()
    common = dict(accelerator="cpu", devices=1, max_steps=ARGS.max_steps, enable_progress_bar=False,
                  logger=False, enable_checkpointing=False, enable_model_summary=False)
    if FIXED:
        trainer = L.Trainer(**common)
    else:   # reproducible runs
        trainer = L.Trainer(deterministic=True, **common)  # PLANTED:deterministic
    trainer.fit(model)
    print(f"trained {trainer.global_step} steps: loss {float(trainer.callback_metrics['train_loss']):.3f}, "
          f"epoch macro-F1 {float(trainer.callback_metrics['train_f1']):.3f}")


if __name__ == "__main__":
    main()
