# SPDX-License-Identifier: MIT
"""torchwrapper.hf: transformers' Trainer callback (TorchWrapperCallback), whose code is in
torchwrapper.integrations.hf: this name is that module."""
import sys

from .integrations import hf as _hf

sys.modules[__name__] = _hf
