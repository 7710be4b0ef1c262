"""What ``pip install ./python`` adds to maturin's build: the ``shmenv`` program in the
wheel, and no wheel left behind in the clone.

- maturin's PEP 517 build writes its wheel into the Cargo target folder's ``wheels/``
  (``target/wheels`` of a clone) before pip copies it; :func:`with_out_dir` sends it to a
  temporary folder instead (maturin's ``--out``), so ``target/wheels`` keeps only the
  wheels ``python/build_wheel.sh`` makes.
- :func:`build_program` compiles the command-line program (``cargo build --release -p
  shmenv-cli``, the workspace around ``python/``), and :func:`add_program` puts it into the
  wheel as ``shmenv/_bin/shmenv`` (executable, listed in ``RECORD``), as the binary wheel of
  ``python/build_wheel.sh`` carries it. A source tree without ``cli/`` (an sdist) builds the
  extension only and says so.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Mapping

#: Where a wheel carries the program (``shmenv.__main__.BUNDLED``).
PROGRAM_IN_WHEEL = "shmenv/_bin/shmenv"


def with_out_dir(config_settings: Mapping[str, Any] | None, out: str) -> dict[str, Any]:
    """``config_settings`` whose maturin build arguments end with ``--out OUT`` (the user's
    own, from ``config_settings`` or ``MATURIN_PEP517_ARGS``, are kept)."""
    settings = dict(config_settings or {})
    key = "maturin.build-args" if "maturin.build-args" in settings else "build-args"
    given = settings.get(key)
    if given is None:
        args = shlex.split(os.environ.get("MATURIN_PEP517_ARGS", ""))
    elif isinstance(given, str):
        args = shlex.split(given)
    else:
        args = list(given)
    settings.pop("build-args", None)
    settings["maturin.build-args"] = [*args, "--out", out]
    return settings


def workspace_root() -> Path:
    """The folder around ``python/`` (a clone's root, or an unpacked sdist)."""
    return Path(__file__).resolve().parents[2]


def build_program(root: Path) -> Path | None:
    """Compiles the ``shmenv`` program in release mode; its path, or None (with a message on
    stderr, which pip shows) when ``root`` has no ``cli/`` crate."""
    if not (root / "cli" / "Cargo.toml").is_file():
        print(
            f"shmenv: {root} has no cli/ crate (a source distribution): the wheel carries the Python package "
            "only; `cargo install --path cli` in a clone, or a binary wheel, gives the `shmenv` program",
            file=sys.stderr,
        )
        return None
    print("shmenv: building the shmenv program (cargo build --release -p shmenv-cli)", file=sys.stderr)
    subprocess.run(
        ["cargo", "build", "--release", "--locked", "-p", "shmenv-cli", "--manifest-path", str(root / "Cargo.toml")],
        check=True,
        stdout=sys.stderr,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR") or root / "target")
    if not target.is_absolute():
        target = root / target
    program = target / "release" / "shmenv"
    if not program.is_file():
        raise SystemExit(f"shmenv: cargo built shmenv-cli, but {program} is not there")
    return program


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def add_program(wheel: Path, program: Path) -> None:
    """Rewrites ``wheel`` with ``program`` as ``shmenv/_bin/shmenv`` (mode 755) and its line
    in the wheel's ``RECORD``."""
    data = program.read_bytes()
    tmp = wheel.with_name(wheel.name + ".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        records = [n for n in src.namelist() if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise SystemExit(f"shmenv: {wheel.name} has {len(records)} RECORD files, expected 1")
        for item in src.infolist():
            if item.filename in (PROGRAM_IN_WHEEL, records[0]):
                continue
            dst.writestr(item, src.read(item.filename))
        info = zipfile.ZipInfo(PROGRAM_IN_WHEEL, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = (0o100755 & 0xFFFF) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        dst.writestr(info, data)
        lines = [
            line
            for line in src.read(records[0]).decode("utf-8").splitlines()
            if line and not line.startswith(PROGRAM_IN_WHEEL + ",")
        ]
        lines.insert(len(lines) - 1, f"{PROGRAM_IN_WHEEL},{_record_hash(data)},{len(data)}")
        record = zipfile.ZipInfo(records[0], date_time=(1980, 1, 1, 0, 0, 0))
        record.compress_type = zipfile.ZIP_DEFLATED
        dst.writestr(record, "\n".join(lines) + "\n")
    os.replace(tmp, wheel)
