# SPDX-License-Identifier: MIT
"""torchwrapper as a Lightning profiler: ``Trainer(profiler=TorchWrapperProfiler())``.

    from torchwrapper.lightning import TorchWrapperProfiler
    trainer = lightning.pytorch.Trainer(max_epochs=2, profiler=TorchWrapperProfiler())
    trainer.fit(model)     # records in <log_dir>/torchwrapper; the summary printed at the end

Lightning ships as two packages with the same code under two names: ``lightning`` (its
``lightning.pytorch``) and the standalone ``pytorch_lightning``. The profiler is a Profiler of each
installed one (it subclasses both), so either package's Trainer takes it.

Every action Lightning profiles (``[LightningModule]Model.training_step``,
``[Strategy]SingleDeviceStrategy.backward``, ``run_training_epoch``, ...) is a record of its own, a
named range with the torch calls made inside it as its children, so the reports show which hook
spends the time (tw-report --tree, --folded, --flamegraph). Steps are the optimizer's.
"""
from __future__ import annotations

import importlib
import os
import re
from typing import Any, List, Optional, Tuple

from .. import _core
from .._profile import Profile
from .._tw_report import report_text

OLDEST = (2, 0)   # the Profiler(dirpath, filename) with setup(stage, ...), in both packages
PACKAGES = ("lightning.pytorch", "pytorch_lightning")


def _profiler_bases() -> Tuple[type, ...]:
    """The Profiler class of each Lightning package installed, at OLDEST or later."""
    bases, seen = [], []
    for name in PACKAGES:
        try:
            package = importlib.import_module(name)
            profilers = importlib.import_module(name + ".profilers")
        except ImportError:
            continue
        version = getattr(package, "__version__", None) or getattr(importlib.import_module(name.split(".")[0]),
                                                                   "__version__", "0")
        seen.append(f"{name} {version}")
        if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) >= OLDEST:
            bases.append(profilers.Profiler)
    if not bases:
        have = ", ".join(seen) if seen else "neither is installed"
        raise ImportError(f"torchwrapper.lightning needs lightning >= {OLDEST[0]}.{OLDEST[1]} or pytorch-lightning >= "
                          f"{OLDEST[0]}.{OLDEST[1]} ({have}): pip install -U lightning")
    return tuple(bases)


class TorchWrapperProfiler(*_profiler_bases()):  # type: ignore[misc]
    """dirpath, filename: as Lightning's other profilers (where the summary goes: a file, or the log);
    out_dir: where the records go (default: ``<dirpath or the trainer's log_dir>/torchwrapper``);
    top: the APIs and actions the summary shows; config: any other key ``torchwrapper.profile()``
    takes (``format``, ``args``, ``schedule``, ``aten``, ...)."""

    def __init__(self, dirpath: Optional[str] = None, filename: Optional[str] = None, out_dir: Optional[str] = None,
                 top: int = 15, **config: Any) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.recording: Optional[Profile] = None   # (Profiler.profile is Lightning's context manager)
        self._open: List[str] = []   # the actions begun and not yet stopped, innermost last
        if not isinstance(top, int) or isinstance(top, bool) or top < 1:
            raise ValueError(f"top={top!r} is not accepted: give a whole number >= 1")
        self.out_dir, self.top, self.config = out_dir, top, config

    def setup(self, stage: str, local_rank: Optional[int] = None, log_dir: Optional[str] = None) -> None:
        super().setup(stage=stage, local_rank=local_rank, log_dir=log_dir)
        if self.recording is not None and self.recording.session.active:
            return
        out_dir = self.out_dir or os.path.join(self.dirpath or log_dir or ".", "torchwrapper")
        # a distributed run's processes name their files by $RANK, which Lightning sets (profile()'s default)
        self.recording = Profile(out_dir=out_dir, **self.config)
        self.recording.start()
        self._open = []

    def start(self, action_name: str) -> None:
        if self.recording is not None and self.recording.session.active and _core.range_begin(action_name):
            self._open.append(action_name)

    def stop(self, action_name: str) -> None:
        if action_name not in self._open:
            return
        # ranges nest: actions begun inside this one and not stopped end with it
        while self._open:
            name = self._open.pop()
            _core.range_end()
            if name == action_name:
                break

    def summary(self) -> str:
        if self.recording is None:
            return ""
        if self.recording.session.active:
            self._finish()
        return f"torchwrapper: {self.recording.out_dir}\n" + report_text(self.recording.out_dir, self.top)

    def teardown(self, stage: Optional[str]) -> None:
        self._finish()
        super().teardown(stage=stage)

    def _finish(self) -> None:
        if self.recording is not None and self.recording.session.active:
            while self._open:
                self._open.pop()
                _core.range_end()
            self.recording.stop()


__all__ = ["TorchWrapperProfiler"]
