"""Installing without Rust, and the ``shmenv`` command of an install built from source.

- ``pip install ./python`` with no ``cargo`` on ``PATH`` stops at once, saying that a
  source build needs Rust 1.85+ and that a binary wheel needs none (the build backend in
  ``python/backend``), instead of letting maturin download a toolchain; an old cargo is
  named with its version.
- ``python -m shmenv`` runs the ``shmenv`` program (``cli/``) found on ``PATH`` when the
  install carries none (a source or editable install), with the program's own output and
  exit status, and without one says how to get it.

The wheel itself (built for manylinux_2_28, installed without cargo, its ``shmenv``
command) is checked by ``bash python/build_wheel.sh --check``, which CI runs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shmenv_program

import shmenv.__main__ as cli_entry

ROOT = Path(__file__).resolve().parents[2]
BACKEND = ROOT / "python" / "backend" / "shmenv_build.py"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def no_cargo_path() -> str:
    """This interpreter's folder and the system folders, without any that holds cargo."""
    folders = [os.path.dirname(sys.executable), *SYSTEM_PATH.split(":")]
    kept = [d for d in folders if not os.path.exists(os.path.join(d, "cargo"))]
    return os.pathsep.join(kept)


def load_backend():
    spec = importlib.util.spec_from_file_location("shmenv_build_under_test", BACKEND)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pip_install_from_source_without_cargo_stops_and_names_rust_and_the_wheel(tmp_path):
    pytest.importorskip("maturin")  # the backend wraps maturin's (here without build isolation)
    env = {**os.environ, "PATH": no_cargo_path(), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("SHMENV_ALLOW_RUST_DOWNLOAD", None)
    # --dry-run: nothing is installed whatever happens; --no-build-isolation: the backend
    # runs with this environment's maturin, no download.
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-build-isolation", "--no-deps",
           str(ROOT / "python")]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "building shmenv from source needs Rust 1.85+" in text, text
    assert "no `cargo` was found on PATH" in text and "install a binary wheel" in text, text
    assert "build_wheel.sh" in text, text
    assert "puccinialin" not in text and "Installing rust" not in text, text


def test_backend_names_a_cargo_that_is_too_old(tmp_path, monkeypatch):
    pytest.importorskip("maturin")
    old = tmp_path / "cargo"
    old.write_text("#!/bin/sh\necho 'cargo 1.80.1 (376290515 2024-07-16)'\n")
    old.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("SHMENV_ALLOW_RUST_DOWNLOAD", raising=False)
    monkeypatch.setenv("MATURIN_NO_INSTALL_RUST", "")  # restored after the test: loading sets it
    backend = load_backend()
    assert os.environ["MATURIN_NO_INSTALL_RUST"] == "1"  # maturin never downloads a toolchain
    with pytest.raises(SystemExit) as refused:
        backend.get_requires_for_build_wheel()
    message = str(refused.value)
    assert "needs Rust 1.85+" in message and "is 1.80: run `rustup update`" in message, message
    assert str(old) in message and "binary wheel" in message, message


def test_backend_lets_a_current_cargo_build(monkeypatch):
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("no cargo on PATH here: the refusal is tested above")
    pytest.importorskip("maturin")
    monkeypatch.setenv("MATURIN_NO_INSTALL_RUST", "")  # restored after the test: loading sets it
    backend = load_backend()
    assert backend.cargo_version(cargo) >= backend.MIN_RUST
    backend.check_rust()  # returns: a source build may go ahead


@pytest.fixture
def source_install():
    if cli_entry.BUNDLED.is_file():
        pytest.skip(f"this install carries the program ({cli_entry.BUNDLED}): the wheel's case")


def python_m_shmenv(*args: str, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path}
    return subprocess.run([sys.executable, "-m", "shmenv", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_python_m_shmenv_without_a_program_says_how_to_get_one(source_install):
    out = python_m_shmenv("list", path=no_cargo_path())
    assert out.returncode == 1, out
    assert "has no `shmenv` program" in out.stderr, out.stderr
    assert "bash python/build_wheel.sh" in out.stderr and "cargo install --path cli" in out.stderr, out.stderr
    assert out.stdout == ""


def test_python_m_shmenv_runs_the_program_on_path_with_its_exit_status(source_install):
    program = shmenv_program()
    if program is None:
        pytest.skip("no shmenv program built in target/ (cargo test or cargo build builds one)")
    path = os.pathsep.join([str(program.parent), no_cargo_path()])
    version = python_m_shmenv("--version", path=path)
    assert version.returncode == 0 and version.stdout.startswith("shmenv "), version
    listed = python_m_shmenv("list", path=path)
    assert listed.returncode == 0 and "CartPole-v1" in listed.stdout, listed
    direct = subprocess.run([str(program), "bench", "--num-envs", "0"], capture_output=True, text=True, timeout=60)
    through = python_m_shmenv("bench", "--num-envs", "0", path=path)
    assert direct.returncode != 0 and through.returncode == direct.returncode, (direct, through)
    assert through.stderr == direct.stderr
