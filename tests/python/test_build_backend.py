# SPDX-License-Identifier: MIT
"""The pip build backend's own logic, fast and without Autotools: what pip and users rely on in a
wheel (RECORD, executable bits, tag, metadata without torch), which files a build starts from, and
that a failed configure or autoreconf ends in one message naming the Debian package.
(make check-install runs the real pip paths end to end.)"""
import base64
import csv
import hashlib
import io
import re
import os
import stat
import sys
import sysconfig
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "backend"))
import torchwrapper_build as backend  # noqa: E402

import torchwrapper  # noqa: E402


def test_version_is_configure_ac_version_and_the_module_version():
    assert backend._version(ROOT) == torchwrapper.__version__


def test_metadata_names_no_torch_and_carries_the_readme():
    meta = backend._metadata(ROOT, "0.1.0")
    headers, _, body = meta.partition("\n\n")
    assert "Name: torchwrapper" in headers.splitlines()
    assert "Version: 0.1.0" in headers.splitlines()
    requires = [line for line in headers.splitlines() if line.startswith("Requires-Dist:")]
    # torch is the user's own choice (a CPU or a CUDA build): never a requirement, not even of an extra;
    # an extra naming a framework built on it (pytorch-lightning) is asked for by name
    names = [re.split(r"[\s;<>=!~\[(]", r.partition(":")[2].strip())[0].lower() for r in requires]
    assert "torch" not in names and names, requires
    assert not [r for r in requires if "extra" not in r.partition(";")[2]], "every requirement is an extra's"
    assert 'Requires-Dist: pandas ; extra == "pandas"' in requires
    assert body.startswith("# TorchWrapper")


def test_unknown_project_keys_stop_the_build(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "torchwrapper"\nscripts = {a = "b:c"}\n')
    with pytest.raises(backend.BuildError, match="scripts not supported"):
        backend._project(str(tmp_path))


def test_wheel_tag_is_this_interpreter():
    ver = "%d%d" % sys.version_info[:2]
    tag = backend._wheel_tag()
    assert tag.startswith("cp%s-cp%s" % (ver, ver))
    assert tag.endswith(sysconfig.get_platform().replace("-", "_").replace(".", "_"))


def test_wheel_record_lists_every_file_with_its_hash_and_keeps_executable_bits(tmp_path):
    tree = tmp_path / "tree"
    (tree / "torchwrapper").mkdir(parents=True)
    (tree / "torchwrapper" / "__init__.py").write_text("x = 1\n")
    program = tree / "torchwrapper" / "tw-report"
    program.write_bytes(b"\x7fELF fake")
    program.chmod(0o755)
    name = backend._write_wheel(str(tmp_path / "out"), "0.1.0", str(tree),
                                {"METADATA": b"Metadata-Version: 2.1\n"})
    assert name == "torchwrapper-0.1.0-%s.whl" % backend._wheel_tag()
    with zipfile.ZipFile(str(tmp_path / "out" / name)) as z:
        names = z.namelist()
        rows = list(csv.reader(io.StringIO(z.read("torchwrapper-0.1.0.dist-info/RECORD").decode())))
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = z.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want and int(size) == len(data)
        assert "Root-Is-Purelib: false" in z.read("torchwrapper-0.1.0.dist-info/WHEEL").decode()
        mode = z.getinfo("torchwrapper/tw-report").external_attr >> 16
        assert mode & stat.S_IXUSR
        assert not (z.getinfo("torchwrapper/__init__.py").external_attr >> 16) & stat.S_IXUSR


def test_sources_outside_git_leave_out_what_a_build_in_place_made(tmp_path):
    # An unpacked sdist that someone configured and built in place: configure stays (an sdist ships
    # it), build outputs and configure's results go.
    keep = ["configure", "configure.ac", "Makefile.am", "Makefile.in", "src/api.c",
            "tests/c/test_api.c", "build-aux/ltmain.sh"]
    drop = ["config.status", "config.log", "Makefile", "libtool", "src/api.lo", "src/.libs/api.o",
            "tests/c/test_api", "tests/c/test_api.log", ".libs/libtorchwrapper.so", "build/python/x.py",
            ".venv/bin/python", "python/torchwrapper/__pycache__/x.pyc"]
    for rel in keep + drop:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    assert sorted(backend._source_files(str(tmp_path))) == sorted(keep)


def _fake_program(path, text, status=1):
    path.write_text("#!/bin/sh\ncat <<'EOF'\n%sEOF\nexit %d\n" % (text, status))
    path.chmod(0o755)


def test_a_failed_configure_ends_in_its_message_naming_the_package(tmp_path):
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    build.mkdir()
    _fake_program(src / "configure", "checking for cJSON... no\nconfigure: error: in `/tmp/x/build':\n"
                  "configure: error: cJSON not found (Debian: apt-get install libcjson-dev)\n")
    with pytest.raises(backend.BuildError) as e:
        backend._configure(str(src), str(build), str(tmp_path / "prefix"), "")
    assert str(e.value) == "configure: cJSON not found (Debian: apt-get install libcjson-dev)"


def test_no_compiler_names_build_essential(tmp_path):
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    build.mkdir()
    _fake_program(src / "configure", "configure: error: no acceptable C compiler found in $PATH\n")
    with pytest.raises(backend.BuildError, match=r"apt-get install build-essential"):
        backend._configure(str(src), str(build), str(tmp_path / "prefix"), "")


@pytest.mark.parametrize("output, package", [
    ("configure.ac:30: error: possibly undefined macro: AX_PTHREAD\n", "autoconf-archive"),
    ("configure.ac:44: error: possibly undefined macro: PKG_CHECK_MODULES\n", "pkg-config"),
    ("configure.ac:22: error: possibly undefined macro: LT_INIT\n", "libtool"),
    ("Can't exec \"aclocal\": No such file or directory\n", "automake"),
])
def test_a_failed_autoreconf_names_the_missing_package(tmp_path, monkeypatch, output, package):
    fake = tmp_path / "autoreconf"
    _fake_program(fake, output)
    monkeypatch.setenv("AUTORECONF", str(fake))
    with pytest.raises(backend.BuildError, match=r"apt-get install %s\)$" % package):
        backend._autoreconf(str(tmp_path), str(tmp_path))


def test_missing_autoreconf_names_the_autotools_packages(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTORECONF", str(tmp_path / "nonexistent"))
    with pytest.raises(backend.BuildError, match="apt-get install autoconf automake libtool autoconf-archive"):
        backend._autoreconf(str(tmp_path), str(tmp_path))


def test_hooks_report_a_build_error_as_a_message_and_exit_status_1(capsys):
    def fails():
        raise backend.BuildError("libcsv headers not found (Debian: apt-get install libcsv-dev)")
    with pytest.raises(SystemExit) as e:
        backend._report_errors(fails)
    assert e.value.code == 1
    assert capsys.readouterr().err.strip() == \
        "torchwrapper build failed: libcsv headers not found (Debian: apt-get install libcsv-dev)"
