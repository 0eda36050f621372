# SPDX-License-Identifier: MIT
"""Fine-tuning a tiny random-init BERT for sentiment with transformers' Trainer on the CPU: a Dataset of
generated review texts and its own word-piece tokenizer, a padding collator, a class-weighted loss in a
Trainer subclass, and callbacks that keep an exponential moving average of the weights and look at a
probe batch every few steps.

A generalisation program for tw-report --findings (tests/python/test_findings_general.py): the
lines marked `# PLANTED:<kind>` make a common performance mistake (or are where it costs);
`--fixed` runs the same training with every one of them fixed."""
import argparse
import copy
import random
import shutil
import tempfile
import unicodedata

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,
                          TrainingArguments)

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true", help="the same training without the planted mistakes")
parser.add_argument("--max-steps", type=int, default=48)
ARGS = parser.parse_args()
FIXED = ARGS.fixed

MAX_LEN, BATCH = 64, 16
PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "qua", "ish", "ent", "ion", "er", "ly"]
PIECES += SYLLABLES + ["##" + s for s in SYLLABLES]
GOOD = ["kalo", "mine", "rusaly", "toviish", "zepoent"]
BAD = ["quaer", "nelo", "satoion", "vize", "poquaent"]
PIECES += GOOD + BAD
VOCAB = {piece: i for i, piece in enumerate(PIECES)}


def basic_clean(text):
    """BERT's basic tokenizer, character by character: control characters dropped, white space
    normalised, accents stripped, punctuation split off."""
    out = []
    for ch in unicodedata.normalize("NFD", text.lower()):
        category = unicodedata.category(ch)
        if ch in " \t\n\r" or category == "Zs":
            out.append(" ")
        elif category.startswith("C") or category == "Mn":
            continue
        elif category.startswith("P"):
            out.extend((" ", ch, " "))
        else:
            out.append(ch)
    return "".join(out)


def wordpiece(text):
    """Greedy longest-match word pieces of the cleaned text, as BERT's tokenizer does it, then
    [CLS] ... [SEP] and truncation to MAX_LEN."""
    ids = [VOCAB["[CLS]"]]
    for word in basic_clean(text).split():
        start, pieces = 0, []
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in VOCAB:
                    pieces.append(VOCAB[piece])
                    break
                end -= 1
            else:
                pieces = [VOCAB["[UNK]"]]
                break
            start = end
        ids.extend(pieces)
    return ids[:MAX_LEN - 1] + [VOCAB["[SEP]"]]


def review(index):
    """A generated review: a long text of filler words with a few good or bad ones in it, and its label."""
    rnd = random.Random(index)
    label = rnd.randrange(2)
    cue = GOOD if label else BAD
    words = []
    for _ in range(rnd.randrange(300, 700)):
        if rnd.random() < 0.15:
            words.append(rnd.choice(cue))
        else:
            words.append("".join(rnd.choice(SYLLABLES) for _ in range(rnd.randrange(1, 4))))
        if rnd.random() < 0.1:
            words[-1] += rnd.choice(".,!?")
    return " ".join(words), label


class Reviews(torch.utils.data.Dataset):
    def __init__(self, n, first=0):
        self.items = [review(first + i) for i in range(n)]
        if FIXED:   # tokenized once, up front, like dataset.map(tokenize)
            self.encoded = [torch.tensor(wordpiece(text)) for text, _ in self.items]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        text, label = self.items[i]
        if FIXED:
            return {"input_ids": self.encoded[i], "labels": label}
        return {"input_ids": torch.tensor(wordpiece(text)), "labels": label}  # PLANTED:input_bound


def collate(features):
    ids = torch.nn.utils.rnn.pad_sequence([f["input_ids"] for f in features], batch_first=True,
                                          padding_value=VOCAB["[PAD]"])
    return {"input_ids": ids, "attention_mask": (ids != VOCAB["[PAD]"]).long(),
            "labels": torch.tensor([f["labels"] for f in features])}


class WeightedLossTrainer(Trainer):
    """A class-weighted cross entropy, and the training accuracy kept for the log."""

    def __init__(self, *args, class_weights, **kwargs):
        super().__init__(*args, **kwargs)
        self.class_weights = class_weights
        self.train_accuracy = []
        self.correct, self.seen = torch.zeros(()), 0

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = F.cross_entropy(outputs.logits, labels, weight=self.class_weights)
        hits = (outputs.logits.argmax(-1) == labels).float()
        if FIXED:
            self.correct += hits.sum().detach()
            self.seen += len(labels)
        else:
            self.train_accuracy.append(hits.mean().item())  # PLANTED:host_sync
        return (loss, outputs) if return_outputs else loss


class EMACallback(TrainerCallback):
    """An exponential moving average of the weights, for a smoother model to ship."""

    def __init__(self, decay=0.95):
        self.decay, self.ema = decay, None

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if FIXED:
            if self.ema is None:
                self.ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(self.decay))
            self.ema.update_parameters(model)
            return
        previous, self.ema = self.ema, copy.deepcopy(model)  # PLANTED:needless_call
        if previous is not None:
            with torch.no_grad():
                for new, old in zip(self.ema.parameters(), previous.parameters()):  # PLANTED:per_parameter
                    new.mul_(1 - self.decay).add_(old, alpha=self.decay)  # PLANTED:per_parameter


class ProbeCallback(TrainerCallback):
    """Every 8 steps, the model's confidence on a fixed probe batch, to watch it learn."""

    def __init__(self, probe):
        self.probe, self.history = probe, []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % 8:
            return
        model.eval()
        inputs = {k: v for k, v in self.probe.items() if k != "labels"}
        if FIXED:
            with torch.inference_mode():
                logits = model(**inputs).logits
        else:
            logits = model(**inputs).logits  # PLANTED:eval_with_grad
        confidence = logits.softmax(-1).gather(1, self.probe["labels"][:, None]).mean()
        self.history.append(confidence.detach())
        model.train()


def main():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=MAX_LEN, num_labels=2)
    model = BertForSequenceClassification(config)
    train_set = Reviews(BATCH * ARGS.max_steps)
    probe = collate([Reviews(64, first=10_000)[i] for i in range(64)])
    output_dir = tempfile.mkdtemp(prefix="hf_trainer-")
    args = TrainingArguments(output_dir=output_dir, max_steps=ARGS.max_steps, per_device_train_batch_size=BATCH,
                             learning_rate=3e-3, warmup_steps=4, weight_decay=0.01, logging_strategy="no",
                             save_strategy="no", report_to=[], use_cpu=True, dataloader_num_workers=0, seed=0,
                             disable_tqdm=True)
    ema, probe_watch = EMACallback(), ProbeCallback(probe)
    trainer = WeightedLossTrainer(model=model, args=args, train_dataset=train_set, data_collator=collate,
                                  callbacks=[ema, probe_watch], class_weights=torch.tensor([1.0, 1.2]))
    try:
        result = trainer.train()
    finally:
        shutil.rmtree(output_dir, ignore_errors=True)
    accuracy = (float(trainer.correct) / trainer.seen if FIXED
                else sum(trainer.train_accuracy) / len(trainer.train_accuracy))
    print(f"trained {result.global_step} steps: loss {result.training_loss:.3f}, train accuracy {accuracy:.2f}, "
          f"probe confidence {[round(float(c), 2) for c in probe_watch.history]}")


if __name__ == "__main__":
    main()
