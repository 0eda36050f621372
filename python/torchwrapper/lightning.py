# SPDX-License-Identifier: MIT
"""torchwrapper.lightning: Lightning's profiler (TorchWrapperProfiler), whose code is in
torchwrapper.integrations.lightning: this name is that module."""
import sys

from .integrations import lightning as _lightning

sys.modules[__name__] = _lightning
