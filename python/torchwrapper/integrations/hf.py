# SPDX-License-Identifier: MIT
"""torchwrapper inside Hugging Face's ``transformers.Trainer``: a ``TrainerCallback``.

    from torchwrapper.hf import TorchWrapperCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[TorchWrapperCallback()])
    trainer.train()      # records in args.output_dir/torchwrapper, the top APIs in the trainer's log

Profiling starts when training begins and stops when its last step ends (or training ends early).
Steps are the trainer's: each of its optimizer steps (``state.global_step``, gradient accumulation
included) ends one, so the records' ``step`` column is the global step less one, and a ``schedule``
or ``on_demand`` config counts them.
Each process of a distributed run (accelerate, torchrun) writes files of its own, named by its rank.
"""
from __future__ import annotations

import logging
import os
import re
from typing import Any, Optional

import transformers
from transformers import TrainerCallback

from .._profile import Profile
from .._tw_report import report_text

OLDEST = (4, 30)   # TrainerState.max_steps, TrainingArguments.process_index and world_size, use_cpu


def version_tuple(text: str) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


if version_tuple(transformers.__version__) < OLDEST:
    raise ImportError(f"torchwrapper.hf needs transformers >= {OLDEST[0]}.{OLDEST[1]}, and this is transformers "
                      f"{transformers.__version__}: pip install -U transformers")

logger = logging.getLogger("transformers.trainer")  # the trainer's own logger: its handlers and level


class TorchWrapperCallback(TrainerCallback):
    """Profiles ``Trainer.train()`` with torchwrapper.

    out_dir: where the files go (default: ``<args.output_dir>/torchwrapper``); top: how many APIs
    the trainer's log shows at the end, at level info (``TrainingArguments(log_level="info")``), and
    ``callback.table`` keeps (0: none); config: any other key ``torchwrapper.profile()`` takes
    (``format``, ``args``, ``schedule``, ``on_demand``, ``aten``, ...)."""

    def __init__(self, out_dir: Optional[str] = None, top: int = 10, **config: Any) -> None:
        if not isinstance(top, int) or isinstance(top, bool) or top < 0:
            raise ValueError(f"top={top!r} is not accepted: give a whole number >= 0")
        self.out_dir = out_dir
        self.top = top
        self.config = config
        self.profile: Optional[Profile] = None
        self.table = ""   # the top APIs of the last training, as logged

    def on_train_begin(self, args, state, control, **kwargs):
        if self.profile is not None and self.profile.session.active:
            self.profile.stop()   # left running by a train() that raised (no callback says so)
        out_dir = self.out_dir or os.path.join(args.output_dir, "torchwrapper")
        config = dict(self.config)
        if getattr(args, "world_size", 1) > 1 and "rank" not in config:
            config["rank"] = args.process_index   # each process its own files
        self.profile = Profile(out_dir=out_dir, **config)
        self.profile.start()
        self.profile.session.manual_steps()   # the trainer's steps, not each optimizer.step()

    def on_step_end(self, args, state, control, **kwargs):
        if self.profile is None or not self.profile.session.active:
            return
        if state.max_steps and state.global_step >= state.max_steps:
            self.on_train_end(args, state, control)   # the last step: what follows is not training
        else:
            self.profile.step()   # the trainer's optimizer step: one global step ends

    def on_train_end(self, args, state, control, **kwargs):
        profile, self.profile = self.profile, None
        if profile is None or not profile.session.active:
            return
        profile.stop()
        if self.top:
            self.table = top_table(profile, self.top)
            logger.info("torchwrapper: %s\n%s", profile.out_dir, self.table)


def top_table(profile: Profile, top: int) -> str:
    """The ``top`` APIs of a stopped profile by total time: tw-report's table (read by the C reader,
    streaming: a long run's files are not loaded into Python)."""
    return report_text(profile.out_dir, top).rstrip("\n")


__all__ = ["TorchWrapperCallback"]
