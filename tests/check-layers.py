# SPDX-License-Identifier: MIT
"""make check-layers (run by make check): the layers of docs/design.md ("Layout"), held against the code.

A file is a C or C++ source with its own headers (x.c with x.h and x_internal.h beside it), or a
header that no source owns (the library's public headers, include/torchwrapper/, are each a file:
the contract between the stages, in the folder of their source for the direction); a Python module
is a file. A file uses another when it includes one of its headers, calls a function or reads a
variable that the other defines (nm on the objects of the build tree: the calls no include shows),
or imports it (Python, at any depth: an import inside a function or under TYPE_CHECKING is one too).

It fails on:
  - a circle: files that use each other, through any number of others (a file is above what it
    uses, and never called back by it);
  - a use against the direction between folders: in src/, record <- write <- (files) -> read ->
    report, with config and gpu used by them and using none of them, and src/ itself (what every
    stage uses) using no folder; in python/core/, below and watch <- call <- session <- the module
    (python/core/ itself); the library knows nothing of the extension nor of the libtorch layer, and
    the libtorch layer nothing of either;
  - an import of torchwrapper.integrations from the package, but for its face (__init__.py) and the
    old names kept for them (torchwrapper.hf, .lightning, .spark);
  - a folder of src/ or python/core/ without a README.md that says its job.

With no objects built (a tree never built), the calls are not read, and it says so.
"""
import argparse
import ast
import fnmatch
import os
import re
import subprocess
import sys
from collections import defaultdict

# The direction between folders: what each may use (its own files always). "" is the folder itself
# (src/, python/core/).
SRC_USES = {
    "": set(),
    "config": {""},
    "gpu": {"", "config"},
    "record": {"", "config", "gpu"},
    "write": {"", "config", "gpu", "record"},
    "read": {"", "config", "gpu"},
    "report": {"", "config", "gpu", "read"},
}
CORE_USES = {
    "below": set(),
    "watch": set(),
    "call": {"below", "watch"},
    "session": {"below", "watch", "call"},
    "": {"below", "watch", "call", "session"},
}
# The library's public headers whose name is no source's: their folder.
PUBLIC_FOLDER = {"common.h": "", "gpu.h": "gpu", "report.h": "report", "torchwrapper.h": None}
# Circles left to their owners for now, by the files they are made of (a glob of paths).
KNOWN_CIRCLES = []
# The old names of the integrations, kept as aliases of torchwrapper.integrations' modules.
INTEGRATION_ALIASES = {"torchwrapper.hf", "torchwrapper.lightning", "torchwrapper.spark"}
C_TREES = ("src", "python/core", "libtorch", "include/torchwrapper")
INCLUDE_DIRS = ("include", "src", "python/core", ".")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def walk(top, suffixes, hidden=False):
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if hidden or not x.startswith("."))
        for f in sorted(files):
            if f.endswith(suffixes):
                yield os.path.join(d, f)


class Tree:
    def __init__(self, srcdir, builddir):
        self.srcdir, self.builddir = srcdir, builddir
        self.uses = defaultdict(dict)   # file -> {file it uses: what it takes (a header, names)}
        self.problems = []
        self.notes = []

    def rel(self, path):
        return os.path.relpath(path, self.srcdir)

    # ---- C and C++ ---------------------------------------------------------------------------

    def read_c(self):
        files = [self.rel(p) for top in C_TREES for p in walk(os.path.join(self.srcdir, top), (".c", ".h", ".cpp"))]
        sources = {f for f in files if f.endswith((".c", ".cpp"))}
        self.owner = {}
        for f in files:
            if f in sources:
                self.owner[f] = f
                continue
            d, name = os.path.split(f)
            stem = name[:-2]
            own = None
            for base in (stem, stem[:-len("_internal")] if stem.endswith("_internal") else None):
                for ext in (".c", ".cpp"):
                    if base and os.path.join(d, base + ext) in sources:
                        own = os.path.join(d, base + ext)
            self.owner[f] = own or f
        for f in files:
            with open(os.path.join(self.srcdir, f), encoding="utf-8") as fh:
                text = fh.read()
            for inc in INCLUDE.findall(text):
                target = self.resolve(f, inc)
                if target is None:
                    continue
                a, b = self.owner[f], self.owner[target]
                if a != b:
                    self.uses[a].setdefault(b, set()).add("#include \"%s\"" % inc)
        self.c_files = set(self.owner.values())

    def resolve(self, f, inc):
        for base in [os.path.dirname(f)] + list(INCLUDE_DIRS):
            p = os.path.normpath(os.path.join(base, inc))
            if p in self.owner:
                return p
        return None   # config.h (the configure's), system headers

    def read_calls(self):
        objects = []
        for top in ("src", "python/core", "libtorch"):
            for p in walk(os.path.join(self.builddir, top), (".o",), hidden=True):
                if os.path.basename(os.path.dirname(p)) == ".libs":
                    objects.append(p)
        if not objects:
            self.notes.append("no objects in %s: calls between files not read (build first)" % self.builddir)
            return
        defined, undefined = {}, defaultdict(set)
        for o in objects:
            d = os.path.relpath(os.path.dirname(os.path.dirname(o)), self.builddir)
            stem = os.path.basename(o)[:-2].split("-", 1)[-1]
            source = next((os.path.join(d, stem + ext) for ext in (".c", ".cpp")
                           if os.path.exists(os.path.join(self.srcdir, d, stem + ext))), None)
            if source is None:
                continue
            out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in "TDBRCVWG":
                    defined.setdefault(parts[2], source)
                elif len(parts) == 2 and parts[0] == "U":
                    undefined[source].add(parts[1])
        for source, names in undefined.items():
            for name in names:
                other = defined.get(name)
                if other is not None and other != source:
                    self.uses[source].setdefault(other, set()).add(name)

    # ---- Python ------------------------------------------------------------------------------

    def read_python(self):
        top = os.path.join(self.srcdir, "python", "torchwrapper")
        modules = {}
        for p in walk(top, (".py",)):
            name = os.path.relpath(p, os.path.dirname(top))[:-3].replace(os.sep, ".")
            modules[name[:-len(".__init__")] if name.endswith(".__init__") else name] = p
        self.py_modules = modules
        for name, path in modules.items():
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
            f = self.rel(path)
            for node in ast.walk(tree):
                targets = []
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = package
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    base = (base + "." + node.module if node.module else base) if node.level else node.module
                    for a in node.names:
                        sub = base + "." + a.name
                        # a submodule; else a name from the module (an extension module such as
                        # _core is no file of the tree)
                        targets.append(sub if sub in modules or a.name.startswith("_core") else base)
                for t in targets:
                    if t in modules and t != name:
                        self.uses[f].setdefault(self.rel(modules[t]), set()).add("import %s" % t)

    # ---- the checks --------------------------------------------------------------------------

    def strong_parts(self, nodes):
        """The circles among nodes: Tarjan's strongly connected components of more than one file."""
        index, low, stack, on, out = {}, {}, [], set(), []
        counter = [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in self.uses.get(v, ()):
                if w not in nodes:
                    continue
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                part = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    part.append(w)
                    if w == v:
                        break
                if len(part) > 1:
                    out.append(sorted(part))

        sys.setrecursionlimit(10000)
        for v in sorted(nodes):
            if v not in index:
                visit(v)
        return out

    def circles(self):
        nodes = set(self.uses) | {b for v in self.uses.values() for b in v}
        left = {glob: [] for glob, _why in KNOWN_CIRCLES}
        for part in self.strong_parts(nodes):
            # A circle that runs through files left to their owners is theirs; what remains once
            # they are taken out is not.
            rest = set(part)
            for glob, _why in KNOWN_CIRCLES:
                theirs = {f for f in part if fnmatch.fnmatch(f, glob)}
                if theirs:
                    left[glob].append(part)
                    rest -= theirs
            for circle in (self.strong_parts(rest) if rest != set(part) else [part]):
                lines = ["  %s -> %s: %s" % (a, b, ", ".join(sorted(self.uses[a][b])[:6]))
                         for a in circle for b in sorted(self.uses[a]) if b in circle]
                self.problems.append("a circle of %d files that use each other:\n%s" % (len(circle), "\n".join(lines)))
        for glob, why in KNOWN_CIRCLES:
            if left[glob]:
                for part in left[glob]:
                    self.notes.append("circle through %s, left to its owners (%s): %s" % (glob, why, ", ".join(part)))
            else:
                self.notes.append("no circle runs through %s now: its line in KNOWN_CIRCLES (tests/check-layers.py) "
                                  "can go" % glob)

    @staticmethod
    def folder(f):
        """(tree, folder) of a file: ("src", "write"), ("core", "call"), ("core", ""), ("libtorch", "")..."""
        parts = f.split("/")
        if parts[0] == "src":
            return "src", parts[1] if len(parts) > 2 else ""
        if parts[:2] == ["python", "core"]:
            return "core", parts[2] if len(parts) > 3 else ""
        if parts[0] == "libtorch":
            return "libtorch", ""
        if parts[:2] == ["include", "torchwrapper"]:
            name = parts[2]
            folder = PUBLIC_FOLDER.get(name, "")
            return "public", folder
        return parts[0], ""

    def public_folder(self, header):
        """The src/ folder of a public header: its source's (x.c for x.h), or PUBLIC_FOLDER's."""
        name = os.path.basename(header)
        sources = [f for f in self.c_files if f.startswith("src/") and os.path.basename(f) == name[:-2] + ".c"]
        if len(sources) == 1:
            return self.folder(sources[0])[1]
        if name not in PUBLIC_FOLDER:
            self.problems.append("%s is no source's header: give it a folder in PUBLIC_FOLDER (tests/check-layers.py)"
                                 % header)
            return ""
        return PUBLIC_FOLDER[name]

    def directions(self):
        for a in sorted(self.uses):
            ta, fa = self.folder(a)
            if ta == "public":
                ta, fa = "src", self.public_folder(a)
                if fa is None:
                    continue   # the umbrella header, torchwrapper.h: all of them, for the library's users
            for b in sorted(self.uses[a]):
                tb, fb = self.folder(b)
                what = ", ".join(sorted(self.uses[a][b])[:6])
                if tb == "public":
                    fb = self.public_folder(b)
                    tb = "src"
                    if fb is None:
                        if ta == "src":
                            self.problems.append("%s -> %s (%s): the umbrella header is for the library's users"
                                                 % (a, b, what))
                        continue
                if ta == "src" and tb == "src":
                    if fb != fa and fb not in SRC_USES[fa]:
                        self.problems.append("%s -> %s (%s): src/%s may not use src/%s (it may use: %s)"
                                             % (a, b, what, fa or ".", fb or ".", self.may(SRC_USES[fa], "src")))
                elif ta == "core" and tb == "core":
                    if fb != fa and fb not in CORE_USES[fa]:
                        self.problems.append("%s -> %s (%s): python/core/%s may not use python/core/%s (it may use: %s)"
                                             % (a, b, what, fa or ".", fb or ".", self.may(CORE_USES[fa], "python/core")))
                elif ta == "src" and tb in ("core", "libtorch") or ta == "libtorch" and tb in ("src", "core"):
                    self.problems.append("%s -> %s (%s): the library, the extension and the libtorch layer are built "
                                         "apart; only the extension uses the others" % (a, b, what))
                elif ta == "python" and b.startswith("python/torchwrapper/integrations/"):
                    module = a[len("python/"):-3].replace("/", ".")
                    if not a.startswith("python/torchwrapper/integrations/") and module not in INTEGRATION_ALIASES \
                            and module != "torchwrapper.__init__":
                        self.problems.append("%s -> %s (%s): the integrations use the package; only its face "
                                             "(__init__.py) and their old names import them" % (a, b, what))

    @staticmethod
    def may(folders, tree):
        return ", ".join(sorted("%s/%s" % (tree, f) if f else tree + "/ itself" for f in folders)) or "nothing"

    def readmes(self):
        for top in ("src", "python/core"):
            for d, dirs, _files in os.walk(os.path.join(self.srcdir, top)):
                dirs[:] = [x for x in dirs if not x.startswith(".")]
                if not os.path.exists(os.path.join(d, "README.md")):
                    self.problems.append("%s/ has no README.md (its job, what it offers, what it may use)" % self.rel(d))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--srcdir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--builddir", default=None, help="where the objects are (default: srcdir)")
    args = parser.parse_args()
    srcdir = os.path.abspath(args.srcdir)
    tree = Tree(srcdir, os.path.abspath(args.builddir or srcdir))
    tree.read_c()
    tree.read_calls()
    tree.read_python()
    tree.circles()
    tree.directions()
    tree.readmes()
    for note in tree.notes:
        print("check-layers: note: " + note)
    for problem in tree.problems:
        print("check-layers: " + problem)
    uses = sum(len(v) for v in tree.uses.values())
    if tree.problems:
        print("check-layers: %d problem(s); the layers are in docs/design.md (Layout)" % len(tree.problems))
        return 1
    print("check-layers: %d files, %d uses between them: no circle, every use in the direction of docs/design.md"
          % (len(set(tree.uses) | {b for v in tree.uses.values() for b in v}), uses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
