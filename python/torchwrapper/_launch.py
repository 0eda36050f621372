# SPDX-License-Identifier: MIT
"""The console-script launcher of the programs a wheel carries inside the package (tw-report).

A wheel cannot know where pip will put its scripts relative to the package, so a compiled program
installed into a script directory could not find the libraries bundled in torchwrapper.libs/. The
wheel keeps the program next to the extension module (the same $ORIGIN-relative RUNPATH works for
both) and pip's console script for it runs main(), which replaces the process with the program.
"""
from __future__ import annotations

import os
import sys


def main() -> None:
    name = os.path.basename(sys.argv[0])
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if not os.access(program, os.X_OK):
        sys.stderr.write("%s: no program %s in the torchwrapper package (%s)\n"
                         % (name, name, os.path.dirname(program)))
        sys.exit(127)
    sys.stdout.flush()
    os.execv(program, [name] + sys.argv[1:])
