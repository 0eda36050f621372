# SPDX-License-Identifier: MIT
"""The PEP 517 build backend of torchwrapper: the Autotools build, packed as a wheel or an sdist.

There is one build system, Autotools. A wheel is what `make install` puts into a staging directory,
built out of tree from a clean copy of the sources in a temporary directory:

    autoreconf -fi            only when the sources have no configure (a git clone; an sdist has one)
    configure PYTHON=<the interpreter running this backend> LDFLAGS=-Wl,-rpath,$ORIGIN/../torchwrapper.libs
    make -jN
    make install DESTDIR=<stage> pythondir=/platlib pyexecdir=/platlib

The wheel holds what was installed into the Python directory (the package, the extension with
libtorchwrapper linked in statically, any .pth file), the programs installed into bindir (inside the
package, each with a console-script launcher, so that they find the libraries below wherever pip puts
scripts), the shared libraries they need that are not part of the base system (libcsv, cJSON), copied
into torchwrapper.libs/ (found through the RUNPATH above, no LD_LIBRARY_PATH), and the license.
An sdist is `make dist` with PKG-INFO added: it ships a generated configure, so building from it needs
a C compiler and make, not Autotools.

No dependency beyond the standard library (tomli on Python < 3.11), and no torch at build time.
Failures end with one message that names what is missing and the Debian package that provides it.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

try:
    import tomllib
except ImportError:  # Python < 3.11: declared in pyproject.toml's build-system.requires
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["build_wheel", "build_sdist", "build_editable", "get_requires_for_build_wheel",
           "get_requires_for_build_sdist", "get_requires_for_build_editable"]

NAME = "torchwrapper"
LIBS_DIR = NAME + ".libs"
# $$ is make's escape for $: the Makefile passes $ORIGIN to the shell as \$ORIGIN, libtool and the
# linker then see $ORIGIN, which the dynamic loader expands to the directory of the object.
RPATH_LDFLAGS = "-Wl,-rpath,\\$$ORIGIN/../" + LIBS_DIR
AUTOTOOLS_PACKAGES = "autoconf automake libtool autoconf-archive pkg-config"

# torch's own libraries, which the libtorch layer (_torch.so) links: torch has loaded them when the
# layer is loaded (by soname), so they are neither bundled nor looked for through RUNPATH.
TORCH_LIBS = re.compile(r"^lib(torch|torch_cpu|torch_cuda|torch_python|torch_global_deps|c10|c10_cuda)\.so(\.\d+)*$")

# Libraries every Linux system has (the manylinux policies' list): never bundled.
SYSTEM_LIBS = re.compile(
    r"^(linux-vdso|linux-gate|ld-linux[-\w]*|ld64|libc|libm|libdl|librt|libpthread|libutil|libnsl|"
    r"libresolv|libanl|libmvec|libatomic|libgcc_s|libstdc\+\+|libz)\.so(\.\d+)*$|^libpython3[\w.]*\.so")


class BuildError(Exception):
    """A build step failed; the message says what is missing and how to get it."""


# ---- the PEP 517 / PEP 660 hooks -----------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings=None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings=None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings=None, metadata_directory=None) -> str:
    return _report_errors(_build_wheel, wheel_directory, config_settings or {})


def build_sdist(sdist_directory: str, config_settings=None) -> str:
    return _report_errors(_build_sdist, sdist_directory, config_settings or {})


def build_editable(wheel_directory: str, config_settings=None, metadata_directory=None) -> str:
    return _report_errors(_build_editable, wheel_directory, config_settings or {})


def _report_errors(fn, *args):
    # Frontends run hooks in a child process and show its output when it fails: a message and exit
    # status 1 reads better there than a traceback through this file.
    try:
        return fn(*args)
    except BuildError as e:
        sys.stderr.write("\ntorchwrapper build failed: %s\n" % e)
        sys.stderr.flush()
        raise SystemExit(1) from None


# ---- project metadata ----------------------------------------------------------------------------

def _source_dir() -> str:
    return os.path.abspath(os.getcwd())


def _version(src: str) -> str:
    """The version, from configure.ac's m4_define lines (the one place it is written)."""
    with open(os.path.join(src, "configure.ac"), encoding="utf-8") as f:
        text = f.read()
    parts = []
    for part in ("major", "minor", "patch"):
        m = re.search(r"m4_define\(\[tw_version_%s\],\s*\[(\d+)\]\)" % part, text)
        if not m:
            raise BuildError("configure.ac: no m4_define([tw_version_%s], [N]) line" % part)
        parts.append(m.group(1))
    return ".".join(parts)


def _project(src: str) -> Dict:
    with open(os.path.join(src, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f).get("project", {})
    known = {"name", "version", "dynamic", "description", "readme", "requires-python", "license",
             "authors", "maintainers", "keywords", "classifiers", "urls", "dependencies",
             "optional-dependencies"}
    unknown = sorted(set(project) - known)
    if unknown:
        # Better to stop than to drop a field silently (scripts come from the Autotools build).
        raise BuildError("pyproject.toml [project]: %s not supported by backend/torchwrapper_build.py "
                         "(supported: %s)" % (", ".join(unknown), ", ".join(sorted(known))))
    return project


def _metadata(src: str, version: str) -> str:
    project = _project(src)
    lines = ["Metadata-Version: 2.1", "Name: " + project.get("name", NAME), "Version: " + version]
    if "description" in project:
        lines.append("Summary: " + project["description"])
    for role, field in (("authors", "Author-email"), ("maintainers", "Maintainer-email")):
        people = ["%s <%s>" % (p["name"], p["email"]) if "email" in p and "name" in p
                  else p.get("email", p.get("name", "")) for p in project.get(role, [])]
        if people:
            lines.append("%s: %s" % (field, ", ".join(people)))
    if project.get("keywords"):
        lines.append("Keywords: " + ",".join(project["keywords"]))
    lic = project.get("license")
    if isinstance(lic, str):
        lines.append("License: " + lic)
    elif isinstance(lic, dict) and "text" in lic:
        lines.append("License: " + lic["text"])
    for c in project.get("classifiers", []):
        lines.append("Classifier: " + c)
    for label, url in project.get("urls", {}).items():
        lines.append("Project-URL: %s, %s" % (label, url))
    if "requires-python" in project:
        lines.append("Requires-Python: " + project["requires-python"])
    for dep in project.get("dependencies", []):
        lines.append("Requires-Dist: " + dep)
    for extra, deps in project.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: " + extra)
        for dep in deps:
            lines.append('Requires-Dist: %s ; extra == "%s"' % (dep, extra) if ";" not in dep
                         else "Requires-Dist: %s and extra == \"%s\"" % (dep, extra))
    body = ""
    readme = project.get("readme")
    if readme:
        path = readme if isinstance(readme, str) else readme.get("file")
        with open(os.path.join(src, path), encoding="utf-8") as f:
            body = f.read()
        ctype = "text/markdown" if path.endswith(".md") else "text/plain"
        if isinstance(readme, dict) and "content-type" in readme:
            ctype = readme["content-type"]
        lines.append("Description-Content-Type: " + ctype)
    return "\n".join(lines) + "\n\n" + body


# ---- running the build ---------------------------------------------------------------------------

def _say(msg: str) -> None:
    # Shown by pip with -v, or when the build fails.
    print("torchwrapper: " + msg, flush=True)


def _run(cmd: Sequence[str], cwd: str, log: str) -> bool:
    """Runs cmd with its output in the file log; False when it fails. A missing program raises
    FileNotFoundError, which callers turn into a message naming the package that provides it."""
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        try:
            return subprocess.run(list(cmd), cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL).returncode == 0
        except FileNotFoundError:
            raise
        except OSError as e:
            raise BuildError("cannot run %s: %s" % (cmd[0], e)) from None


def _tail(path: str, n: int = 40) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return "".join(f.readlines()[-n:])


def _source_files(src: str) -> Iterator[str]:
    """The paths, relative to src, of the sources to build from: what git tracks or would track
    (build outputs are ignored), or, outside a git checkout (an sdist), every file but build outputs."""
    if os.path.exists(os.path.join(src, ".git")) and shutil.which("git"):
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=src, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if out.returncode == 0:
            for p in out.stdout.decode().split("\0"):
                if p and os.path.lexists(os.path.join(src, p)):  # a deleted, not yet committed file
                    yield p
            return
    skip_dirs = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".libs", ".deps",
                 "autom4te.cache", ".pytest_cache", "output"}
    skip_files = {"config.status", "config.log", "config.h", "stamp-h1", "libtool", "Makefile",
                  "torchwrapper.pc"}
    skip_ext = (".o", ".lo", ".la", ".so", ".log", ".trs", ".pyc", ".whl", ".tar.gz")
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in skip_dirs and not d.endswith(".egg-info")]
        rel = os.path.relpath(root, src)
        for f in files:
            if (f in skip_files and rel == ".") or f.endswith(skip_ext) or f == ".dirstamp":
                continue
            # Test programs built in place (tests/c/test_x next to test_x.c).
            if rel == os.path.join("tests", "c") and f.startswith("test_") and "." not in f:
                continue
            yield os.path.normpath(os.path.join(rel, f))


def _copy_sources(src: str, dest: str) -> None:
    # A configured source tree cannot host a VPATH build (configure refuses, and make would pick up
    # objects built in place), and autoreconf should not write into the user's checkout: build from
    # a copy of the sources.
    for rel in _source_files(src):
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(src, rel), target, follow_symlinks=False)


def _autoreconf(srcdir: str, logdir: str) -> None:
    if os.path.exists(os.path.join(srcdir, "configure")):
        return
    autoreconf = os.environ.get("AUTORECONF", "autoreconf")
    _say("autoreconf (no configure script in the sources)")
    log = os.path.join(logdir, "autoreconf.log")
    try:
        ok = _run([autoreconf, "-fi"], srcdir, log)
    except FileNotFoundError:
        raise BuildError("%s not found: building from a git checkout needs Autotools "
                         "(Debian: apt-get install %s), or build from an sdist, which ships configure"
                         % (autoreconf, AUTOTOOLS_PACKAGES)) from None
    if ok:
        return
    text = _tail(log, 200)
    hints = [
        (r"aclocal: (command )?not found|Can't exec \"aclocal\"|automake: (command )?not found",
         "automake is missing (Debian: apt-get install automake)"),
        (r"possibly undefined macro: (AX_|AS_AC_EXPAND)",
         "the autoconf-archive macros are missing (Debian: apt-get install autoconf-archive)"),
        (r"possibly undefined macro: PKG_",
         "pkg-config's macros are missing (Debian: apt-get install pkg-config)"),
        (r"possibly undefined macro: (LT_|AC_PROG_LIBTOOL)|Libtool library used but 'LIBTOOL' is "
         r"undefined|libtoolize: (command )?not found|Can't exec \"libtoolize\"",
         "libtool is missing (Debian: apt-get install libtool)"),
    ]
    for pattern, message in hints:
        if re.search(pattern, text):
            raise BuildError("autoreconf failed: " + message)
    raise BuildError("autoreconf failed (Autotools: Debian: apt-get install %s):\n%s"
                     % (AUTOTOOLS_PACKAGES, text))


def _configure(srcdir: str, builddir: str, prefix: str, extra_ldflags: str) -> None:
    _say("configure PYTHON=%s" % sys.executable)
    log = os.path.join(builddir, "configure.out")
    ldflags = " ".join(x for x in (extra_ldflags, os.environ.get("LDFLAGS", "")) if x)
    # pip's build isolation hides the environment's own packages from this interpreter; `-I` (isolated
    # mode: no PYTHONPATH, no user site) sees them again, so that the libtorch layer is built against
    # the torch installed where the package goes.
    args = [os.path.join(srcdir, "configure"), "PYTHON=" + sys.executable, "TORCH_PYTHON=" + sys.executable + " -I",
            "--prefix=" + prefix]
    if ldflags:
        args.append("LDFLAGS=" + ldflags)
    try:
        ok = _run(["/bin/sh"] + args, builddir, log)
    except FileNotFoundError:
        raise BuildError("/bin/sh not found") from None
    if ok:
        return
    text = _tail(log, 200)
    # (configure prefixes some errors with a line "configure: error: in `DIR':", which says nothing.)
    errors = [e for e in re.findall(r"^configure: error: (.*)$", text, re.M) if not e.startswith("in `")]
    if any("no acceptable C compiler" in e or "C compiler cannot create executables" in e
           for e in errors):
        raise BuildError("configure: no working C compiler (Debian: apt-get install build-essential): "
                         + "; ".join(errors))
    if errors:
        # configure's own messages already name the Debian package (libcsv-dev, libcjson-dev, ...).
        raise BuildError("configure: " + "; ".join(errors))
    raise BuildError("configure failed:\n" + text)


def _jobs() -> str:
    if re.search(r"(^|\s)-j", os.environ.get("MAKEFLAGS", "")):
        return ""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return "-j%d" % max(1, min(n, 16))


def _make(builddir: str, targets: Sequence[str], what: str, logdir: Optional[str] = None) -> None:
    make = os.environ.get("MAKE", "make")
    log = os.path.join(logdir or builddir, "make.out")
    cmd = [make] + [a for a in [_jobs()] if a] + list(targets)
    _say(" ".join(cmd))
    try:
        ok = _run(cmd, builddir, log)
    except FileNotFoundError:
        raise BuildError("%s not found (Debian: apt-get install make, or build-essential)" % make) from None
    if not ok:
        raise BuildError("%s failed; the end of its output:\n%s" % (what, _tail(log)))


# ---- ELF inspection and library bundling ---------------------------------------------------------

def _is_elf(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _elf_dynamic(path: str) -> Tuple[List[str], List[str]]:
    """(NEEDED sonames, RUNPATH/RPATH entries) of an ELF file, read with readelf."""
    try:
        out = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
    except FileNotFoundError:
        raise BuildError("readelf not found (Debian: apt-get install binutils)") from None
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out.stdout)
    paths = []
    for p in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out.stdout):
        paths.extend(x for x in p.split(":") if x)
    return needed, paths


def _resolve(path: str) -> Dict[str, Optional[str]]:
    """soname -> the path the dynamic loader would load, for every library path needs (ldd)."""
    out = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True)
    found: Dict[str, Optional[str]] = {}
    for line in out.stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(not found|(\S+))", line)
        if m:
            found[m.group(1)] = None if m.group(2) == "not found" else os.path.realpath(m.group(3))
    return found


def _bundle_libraries(wheel_root: str, staged_libdirs: Sequence[str]) -> List[str]:
    """Copies into torchwrapper.libs/ every shared library that an ELF file of the wheel needs and
    that is not part of the base system; returns their names. Each ELF file must reach that directory
    through an $ORIGIN-relative RUNPATH, and none may carry an absolute one (a path of this build)."""
    elves = []
    for root, _, files in os.walk(wheel_root):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p) and _is_elf(p):
                elves.append(p)
    libs_dir = os.path.join(wheel_root, LIBS_DIR)
    bundled: Dict[str, str] = {}
    pending = list(elves)
    while pending:
        elf = pending.pop()
        needed, runpath = _elf_dynamic(elf)
        rel = os.path.relpath(elf, wheel_root)
        absolute = [p for p in runpath if not p.startswith("$ORIGIN")]
        if absolute and not elf.startswith(libs_dir + os.sep):
            raise BuildError("%s has an absolute RUNPATH %s: it would not find its libraries once "
                             "installed (link it against libtwcore.la, not libtorchwrapper.la)"
                             % (rel, ":".join(absolute)))
        resolved = _resolve(elf)
        for soname in needed:
            if SYSTEM_LIBS.match(soname) or TORCH_LIBS.match(soname):
                continue
            if elf.startswith(libs_dir + os.sep):
                raise BuildError("%s needs %s, another library that is not part of the base system: "
                                 "bundling it would need its RUNPATH rewritten" % (rel, soname))
            want = os.path.normpath(os.path.join("$ORIGIN", os.path.relpath(libs_dir, os.path.dirname(elf))))
            if want not in [os.path.normpath(p) for p in runpath]:
                raise BuildError("%s needs %s but its RUNPATH (%s) does not lead to %s/: install it "
                                 "next to the extension module" % (rel, soname, ":".join(runpath) or "none",
                                                                   LIBS_DIR))
            if soname in bundled:
                continue
            source = resolved.get(soname)
            if source is None:
                for d in staged_libdirs:
                    if os.path.exists(os.path.join(d, soname)):
                        source = os.path.realpath(os.path.join(d, soname))
            if source is None:
                raise BuildError("%s needs %s, which was not found" % (rel, soname))
            os.makedirs(libs_dir, exist_ok=True)
            target = os.path.join(libs_dir, soname)
            shutil.copyfile(source, target)
            os.chmod(target, 0o755)
            bundled[soname] = source
            pending.append(target)
    return sorted(bundled)


# ---- the wheel -----------------------------------------------------------------------------------

def _wheel_tag() -> str:
    if sys.implementation.name != "cpython":
        raise BuildError("torchwrapper's extension is for CPython; this is %s" % sys.implementation.name)
    ver = "%d%d" % sys.version_info[:2]
    abi = "cp" + ver + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "") \
        + ("d" if hasattr(sys, "gettotalrefcount") else "")
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "cp%s-%s-%s" % (ver, abi, plat)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _zip_time() -> Tuple[int, int, int, int, int, int]:
    # Reproducible archives: SOURCE_DATE_EPOCH when set, otherwise the zip format's epoch.
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch:
        t = time.gmtime(max(int(epoch), 315532800))
        return t[:6]
    return (1980, 1, 1, 0, 0, 0)


def _write_wheel(wheel_directory: str, version: str, tree: str, dist_info: Dict[str, bytes]) -> str:
    """Packs the files under tree plus the dist-info files into a wheel, with its RECORD."""
    tag = _wheel_tag()
    name = "%s-%s-%s.whl" % (NAME, version, tag)
    info_dir = "%s-%s.dist-info" % (NAME, version)
    dist_info = dict(dist_info)
    dist_info["WHEEL"] = ("Wheel-Version: 1.0\nGenerator: torchwrapper_build %s\nRoot-Is-Purelib: false\n"
                          "Tag: %s\n" % (version, tag)).encode()
    entries: List[Tuple[str, bytes, int]] = []
    for root, dirs, files in os.walk(tree):
        dirs.sort()
        for f in sorted(files):
            path = os.path.join(root, f)
            arc = os.path.relpath(path, tree).replace(os.sep, "/")
            with open(path, "rb") as fh:
                entries.append((arc, fh.read(), os.stat(path).st_mode))
    for f in sorted(dist_info):
        entries.append((info_dir + "/" + f, dist_info[f], 0o644))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for arc, data, _ in entries:
        writer.writerow([arc, _record_hash(data), len(data)])
    writer.writerow([info_dir + "/RECORD", "", ""])
    entries.append((info_dir + "/RECORD", record.getvalue().encode(), 0o644))
    os.makedirs(wheel_directory, exist_ok=True)
    out = os.path.join(wheel_directory, name)
    tmp = out + ".part"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for arc, data, mode in entries:
            info = zipfile.ZipInfo(arc, date_time=_zip_time())
            info.compress_type = zipfile.ZIP_DEFLATED
            # pip keeps the executable bit of the programs inside the package.
            info.external_attr = ((0o755 if mode & 0o111 else 0o644) | stat.S_IFREG) << 16
            z.writestr(info, data)
    os.replace(tmp, out)
    return name


def _collect_install(stage: str, prefix: str, wheel_root: str) -> List[str]:
    """Moves what make install staged into the wheel's tree; returns the programs found in bindir."""
    platlib = os.path.join(stage, "platlib")
    if not os.path.isdir(os.path.join(platlib, NAME)):
        raise BuildError("make install put no %s package into pythondir" % NAME)
    for root, dirs, files in os.walk(platlib):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if f.endswith((".la", ".pyc")):
                continue
            src = os.path.join(root, f)
            dest = os.path.join(wheel_root, os.path.relpath(src, platlib))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(src, dest)
    programs = []
    bindir = stage + os.path.join(prefix, "bin")
    if os.path.isdir(bindir):
        for f in sorted(os.listdir(bindir)):
            src = os.path.join(bindir, f)
            if not os.path.isfile(src):
                continue
            if _is_elf(src):
                # Inside the package, next to the extension: the same $ORIGIN-relative RUNPATH finds
                # torchwrapper.libs/, and a console-script launcher puts it on PATH.
                shutil.copy2(src, os.path.join(wheel_root, NAME, f))
                programs.append(f)
            else:
                scripts = os.path.join(wheel_root, "%s.data" % NAME, "scripts")
                os.makedirs(scripts, exist_ok=True)
                shutil.copy2(src, os.path.join(scripts, f))
    return programs


class _BuildDir:
    """A temporary directory, kept when TORCHWRAPPER_KEEP_BUILD=1 (to read its logs)."""

    def __init__(self, config_settings: Dict) -> None:
        self.keep = os.environ.get("TORCHWRAPPER_KEEP_BUILD") == "1" or "keep-build" in config_settings
        self.path = tempfile.mkdtemp(prefix="torchwrapper-build-")

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc) -> None:
        if self.keep:
            _say("build directory kept: " + self.path)
        else:
            shutil.rmtree(self.path, ignore_errors=True)


def _build_wheel(wheel_directory: str, config_settings: Dict) -> str:
    src = _source_dir()
    version = _version(src)
    metadata = _metadata(src, version)
    _wheel_tag()  # fail early on an interpreter the extension cannot be built for
    with _BuildDir(config_settings) as tmp:
        srcdir, builddir, stage = (os.path.join(tmp, d) for d in ("src", "build", "stage"))
        prefix = os.path.join(tmp, "prefix")
        for d in (srcdir, builddir, stage):
            os.makedirs(d)
        _copy_sources(src, srcdir)
        _autoreconf(srcdir, tmp)
        _configure(srcdir, builddir, prefix, RPATH_LDFLAGS)
        _make(builddir, [], "make")
        _make(builddir, ["install", "DESTDIR=" + stage, "pythondir=/platlib", "pyexecdir=/platlib"],
              "make install")
        wheel_root = os.path.join(tmp, "wheel")
        os.makedirs(wheel_root)
        programs = _collect_install(stage, prefix, wheel_root)
        bundled = _bundle_libraries(wheel_root, [stage + os.path.join(prefix, "lib")])
        _say("bundled into %s/: %s" % (LIBS_DIR, ", ".join(bundled) or "nothing"))
        dist_info = {"METADATA": metadata.encode()}
        with open(os.path.join(src, "LICENSE"), "rb") as f:
            dist_info["LICENSE"] = f.read()
        if programs:
            dist_info["entry_points.txt"] = ("[console_scripts]\n" + "".join(
                "%s = %s._launch:main\n" % (p, NAME) for p in programs)).encode()
        name = _write_wheel(wheel_directory, version, wheel_root, dist_info)
        _say("built " + name)
        return name


# ---- the sdist -----------------------------------------------------------------------------------

def _build_sdist(sdist_directory: str, config_settings: Dict) -> str:
    src = _source_dir()
    version = _version(src)
    metadata = _metadata(src, version)
    base = "%s-%s" % (NAME, version)
    with _BuildDir(config_settings) as tmp:
        srcdir, builddir = os.path.join(tmp, "src"), os.path.join(tmp, "build")
        os.makedirs(srcdir)
        os.makedirs(builddir)
        _copy_sources(src, srcdir)
        _autoreconf(srcdir, tmp)
        _configure(srcdir, builddir, os.path.join(tmp, "prefix"), "")
        _make(builddir, ["dist-gzip"], "make dist")
        made = os.path.join(builddir, base + ".tar.gz")
        os.makedirs(sdist_directory, exist_ok=True)
        out = os.path.join(sdist_directory, base + ".tar.gz")
        # make dist's tarball plus PKG-INFO, which Python's sdist format requires.
        with tarfile.open(made, "r:gz") as tin, tarfile.open(out + ".part", "w:gz",
                                                             format=tarfile.PAX_FORMAT) as tout:
            for member in tin.getmembers():
                tout.addfile(member, tin.extractfile(member) if member.isfile() else None)
            data = metadata.encode()
            info = tarfile.TarInfo(base + "/PKG-INFO")
            info.size, info.mode = len(data), 0o644
            info.mtime = int(os.environ.get("SOURCE_DATE_EPOCH", tin.getmembers()[0].mtime))
            tout.addfile(info, io.BytesIO(data))
        os.replace(out + ".part", out)
        _say("built " + base + ".tar.gz")
        return base + ".tar.gz"


# ---- editable installs (PEP 660) -----------------------------------------------------------------

def _build_editable(wheel_directory: str, config_settings: Dict) -> str:
    """An editable install: the package is imported from a build tree in the checkout, whose
    build/python/torchwrapper holds links to the sources and the built extension. Python edits show
    at once; after a C edit, run make in that build tree (or pip install -e . again)."""
    src = _source_dir()
    version = _version(src)
    metadata = _metadata(src, version)
    status = os.path.join(src, "config.status")
    if os.path.exists(status):
        builddir = src  # configured in place (./quickstart, or the README's manual build): reuse it
        with open(status, encoding="utf-8", errors="replace") as f:
            m = re.search(r"'PYTHON=([^' ]*)'", f.read())
        # The same interpreter (any of its virtualenvs: their pythons link to it) can load the module.
        if not m or os.path.realpath(m.group(1)) != os.path.realpath(sys.executable):
            raise BuildError("this checkout is configured in place for another Python (%s), not %s: run "
                             "pip install -e . with that one, or `make distclean` first"
                             % (m.group(1) if m else "unknown", sys.executable))
    else:
        builddir = os.path.join(src, "build", "editable")
        os.makedirs(builddir, exist_ok=True)
        _autoreconf(src, builddir)
        if not os.path.exists(os.path.join(builddir, "config.status")):
            _configure(src, builddir, os.path.join(builddir, "prefix"), "")
    logdir = os.path.join(builddir, "build")  # ignored by git, removed by make clean
    os.makedirs(logdir, exist_ok=True)
    _make(builddir, [], "make", logdir)
    stage = os.path.join(builddir, "build", "python")
    if not os.path.isdir(os.path.join(stage, NAME)):
        raise BuildError("make left no importable package in " + stage)
    with _BuildDir({}) as tmp:
        tree = os.path.join(tmp, "wheel")
        os.makedirs(tree)
        with open(os.path.join(tree, "__editable__.%s.pth" % NAME), "w") as f:
            f.write(stage + "\n")
        dist_info = {"METADATA": metadata.encode()}
        with open(os.path.join(src, "LICENSE"), "rb") as f:
            dist_info["LICENSE"] = f.read()
        name = _write_wheel(wheel_directory, version, tree, dist_info)
        _say("built %s (imports from %s)" % (name, stage))
        return name
