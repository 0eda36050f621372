# SPDX-License-Identifier: MIT
"""torchwrapper's integrations with other tools, each imported only when asked for: notebooks
(jupyter: ``%load_ext torchwrapper``), transformers' Trainer (hf), Lightning's Trainer (lightning)
and Spark (spark). They use the package (profile(), the files' schema) and nothing in it uses them;
``torchwrapper.hf``, ``torchwrapper.lightning`` and ``torchwrapper.spark`` are these modules."""
