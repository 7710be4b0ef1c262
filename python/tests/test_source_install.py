"""``pip install ./python`` bundles the ``shmenv`` program and leaves no wheel in the clone's
``target/wheels`` (``python/backend/shmenv_bundle.py``): maturin's build arguments get
``--out`` a temporary folder whatever the user gave, and the program goes into the wheel as
``shmenv/_bin/shmenv``, executable and listed in ``RECORD``, so that pip installs it where
``python -m shmenv`` and the ``shmenv`` command find it.

The whole source install (a release build of the extension and the program, minutes) is
``bash tests/source_install.sh``."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


def load_bundle():
    spec = importlib.util.spec_from_file_location("shmenv_bundle", ROOT / "python" / "backend" / "shmenv_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_maturin_writes_its_wheel_outside_the_clone(monkeypatch):
    bundle = load_bundle()
    monkeypatch.delenv("MATURIN_PEP517_ARGS", raising=False)
    assert bundle.with_out_dir(None, "/tmp/x") == {"maturin.build-args": ["--out", "/tmp/x"]}
    monkeypatch.setenv("MATURIN_PEP517_ARGS", "--features foo --profile release")
    got = bundle.with_out_dir({}, "/tmp/x")["maturin.build-args"]
    assert got == ["--features", "foo", "--profile", "release", "--out", "/tmp/x"]
    # pip's --config-settings win over the variable, as in maturin; the old key is folded in.
    got = bundle.with_out_dir({"build-args": "--zig", "other": 1}, "/tmp/x")
    assert got == {"maturin.build-args": ["--zig", "--out", "/tmp/x"], "other": 1}
    got = bundle.with_out_dir({"maturin.build-args": ["-v"]}, "/tmp/x")
    assert got == {"maturin.build-args": ["-v", "--out", "/tmp/x"]}


def make_wheel(path: Path) -> None:
    files = {"demo_pkg/__init__.py": b"", "demo_pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo-pkg\nVersion: 1.0\n",
             "demo_pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-any\n"}
    record = [f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
              for n, d in files.items()]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("demo_pkg-1.0.dist-info/RECORD", "\n".join(record + ["demo_pkg-1.0.dist-info/RECORD,,"]) + "\n")


def test_the_program_goes_into_the_wheel_and_pip_installs_it_executable(tmp_path):
    bundle = load_bundle()
    bundle.PROGRAM_IN_WHEEL = "demo_pkg/_bin/demo"
    wheel = tmp_path / "demo_pkg-1.0-py3-none-any.whl"
    make_wheel(wheel)
    program = tmp_path / "demo"
    program.write_text("#!/bin/sh\necho demo program \"$@\"\n")
    bundle.add_program(wheel, program)
    with zipfile.ZipFile(wheel) as z:
        record = z.read("demo_pkg-1.0.dist-info/RECORD").decode()
        assert (z.getinfo("demo_pkg/_bin/demo").external_attr >> 16) & 0o777 == 0o755
    digest = base64.urlsafe_b64encode(hashlib.sha256(program.read_bytes()).digest()).rstrip(b"=").decode()
    assert f"demo_pkg/_bin/demo,sha256={digest},{program.stat().st_size}" in record.splitlines()
    # Adding it again replaces it (one entry, one RECORD line).
    bundle.add_program(wheel, program)
    with zipfile.ZipFile(wheel) as z:
        assert z.namelist().count("demo_pkg/_bin/demo") == 1
        assert z.read("demo_pkg-1.0.dist-info/RECORD").decode().count("demo_pkg/_bin/demo,") == 1
    # pip checks RECORD's hashes on install; the file comes out executable.
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check",
                           "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    installed = target / "demo_pkg" / "_bin" / "demo"
    assert installed.stat().st_mode & stat.S_IXUSR, oct(installed.stat().st_mode)
    ran = subprocess.run([str(installed), "hi"], capture_output=True, text=True, timeout=30)
    assert ran.stdout == "demo program hi\n"


def test_a_tree_without_the_cli_crate_builds_no_program(tmp_path, capsys):
    bundle = load_bundle()
    assert bundle.build_program(tmp_path) is None
    assert "has no cli/ crate" in capsys.readouterr().err

