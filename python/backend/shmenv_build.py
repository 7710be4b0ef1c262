"""The build backend of ``pip install ./python``: maturin's, after a check that Rust is here.

Building shmenv from source compiles its Rust engine, which needs Rust 1.85 or newer
(``cargo`` on ``PATH``) and takes minutes. Without this check, maturin's backend would
download a whole Rust toolchain (hundreds of MB, into ``~/.cache``) and build with it,
saying nothing about Rust while pip shows "still running...". This module stops such a
build at its first step with a message saying what is missing and that a binary wheel
needs no Rust, then hands every hook to maturin. ``SHMENV_ALLOW_RUST_DOWNLOAD=1`` lets
maturin download the toolchain as it would by itself. A wheel built here also carries the
``shmenv`` program and leaves no copy in the clone's ``target/wheels`` (``shmenv_bundle``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any, Mapping

#: The oldest Rust that builds shmenv (the workspace's ``rust-version``).
MIN_RUST = (1, 85)

_DOWNLOAD_OPT_IN = "SHMENV_ALLOW_RUST_DOWNLOAD"

if os.environ.get(_DOWNLOAD_OPT_IN) != "1":
    # maturin's own switch: never install a Rust toolchain behind the user's back.
    os.environ["MATURIN_NO_INSTALL_RUST"] = "1"

import maturin  # noqa: E402  (after the switch above, which maturin reads at call time)

WHEEL_HINT = (
    "Without Rust, install a binary wheel instead: `pip install shmenv-*.whl` (one is made on a "
    "machine with Rust by `bash python/build_wheel.sh`; it needs no Rust to install)."
)


def cargo_version(cargo: str) -> tuple[int, int] | None:
    """The (major, minor) version that ``cargo --version`` prints, or None if it does not run."""
    try:
        out = subprocess.run([cargo, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"cargo (\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else None


def check_rust() -> None:
    """Exits (``SystemExit`` with the message, which pip prints) unless ``cargo`` 1.85+ is on
    ``PATH`` or the toolchain download is allowed."""
    if os.environ.get(_DOWNLOAD_OPT_IN) == "1":
        return
    need = f"{MIN_RUST[0]}.{MIN_RUST[1]}"
    cargo = shutil.which("cargo")
    if cargo is None:
        raise SystemExit(
            f"shmenv: building shmenv from source needs Rust {need}+ (`cargo` on PATH, e.g. from "
            f"https://rustup.rs) and takes a few minutes; no `cargo` was found on PATH. {WHEEL_HINT}"
        )
    version = cargo_version(cargo)
    if version is None:
        raise SystemExit(
            f"shmenv: `{cargo} --version` did not run; building from source needs Rust {need}+. {WHEEL_HINT}"
        )
    if version < MIN_RUST:
        raise SystemExit(
            f"shmenv: building shmenv from source needs Rust {need}+, and `{cargo}` is "
            f"{version[0]}.{version[1]}: run `rustup update`. {WHEEL_HINT}"
        )


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    """The first hook pip calls: checks for Rust, then asks maturin."""
    check_rust()
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    """As :func:`get_requires_for_build_wheel`, for ``pip install -e``."""
    check_rust()
    return maturin.get_requires_for_build_editable(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    """maturin's hook, after the Rust check (for front ends that skip the requires hook)."""
    check_rust()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    """maturin's hook, after the Rust check."""
    check_rust()
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(
    wheel_directory: str, config_settings: Mapping[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    """maturin's hook, after the Rust check, building in a temporary folder (not the clone's
    ``target/wheels``); then the ``shmenv`` program is compiled and put into the wheel."""
    import tempfile
    from pathlib import Path

    import shmenv_bundle

    check_rust()
    with tempfile.TemporaryDirectory(prefix="shmenv-wheel-") as out:
        settings = shmenv_bundle.with_out_dir(config_settings, out)
        name = maturin.build_wheel(wheel_directory, settings, metadata_directory)
    program = shmenv_bundle.build_program(shmenv_bundle.workspace_root())
    if program is not None:
        shmenv_bundle.add_program(Path(wheel_directory) / name, program)
    return name


def build_editable(
    wheel_directory: str, config_settings: Mapping[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    """maturin's hook, after the Rust check."""
    check_rust()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def get_requires_for_build_sdist(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    """maturin's hook, after the Rust check (maturin reads the crates with ``cargo metadata``)."""
    check_rust()
    return maturin.get_requires_for_build_sdist(config_settings)


def build_sdist(sdist_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    """maturin's hook, after the Rust check."""
    check_rust()
    return maturin.build_sdist(sdist_directory, config_settings)


if __name__ == "__main__":  # `python shmenv_build.py`: the check alone
    check_rust()
    print("Rust found: shmenv builds from source", file=sys.stderr)
