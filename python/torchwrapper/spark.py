# SPDX-License-Identifier: MIT
"""torchwrapper.spark: record files read by Spark (read, spark_schema), whose code is in
torchwrapper.integrations.spark: this name is that module."""
import sys

from .integrations import spark as _spark

sys.modules[__name__] = _spark
