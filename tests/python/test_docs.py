# SPDX-License-Identifier: MIT
"""The generated pages of docs/ are current (tests/docs/generate.py writes them from the validator's
key table, the schema and tw-report --help: make docs), and every tw-report option the README and
docs name exists."""
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
BUILD = os.environ.get("top_builddir", ROOT)


def test_the_generated_pages_are_current(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "docs", "generate.py"), str(tmp_path)],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stderr
    stale = []
    for name in sorted(os.listdir(tmp_path)):
        with open(tmp_path / name, encoding="utf-8") as f, open(os.path.join(ROOT, "docs", name), encoding="utf-8") as g:
            if f.read() != g.read():
                stale.append(name)
    assert not stale, f"docs/{stale} are not what tests/docs/generate.py writes now: run make docs"


def test_every_tw_report_option_named_in_the_readme_and_docs_exists():
    help_text = subprocess.run([os.path.join(BUILD, "tw-report"), "--help"], capture_output=True, text=True).stdout
    options = set(re.findall(r"(--[a-z][a-z-]+)", help_text))
    pages = [os.path.join(ROOT, "README.md")] + [os.path.join(ROOT, "docs", n) for n in os.listdir(os.path.join(ROOT, "docs"))]
    unknown = set()
    for page in pages:
        with open(page, encoding="utf-8") as f:
            for command in re.findall(r"tw-report ([^\n`]*)", f.read()):
                unknown |= {o for o in re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", command) if o not in options}
    assert not unknown, f"tw-report has no options {sorted(unknown)}"


def test_every_page_of_docs_ships_in_the_sdist():
    """make dist ships what Makefile.am's EXTRA_DIST names: docs/ is listed page by page (the directory's
    name is also the phony `make docs` target), so a new page must be added there."""
    with open(os.path.join(ROOT, "Makefile.am")) as f:
        listed = set(re.findall(r"docs/[\w.-]+\.md", f.read()))
    pages = {f"docs/{name}" for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")}
    assert pages - listed == set(), "pages missing from EXTRA_DIST in Makefile.am"
