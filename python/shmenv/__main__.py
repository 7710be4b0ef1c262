"""``python -m shmenv`` and the ``shmenv`` command: the command-line tool (``shmenv list``,
``bench``, ``top``, ``tune``, ``soak``), a Rust program that is its own worker program.

A wheel made by ``python/build_wheel.sh`` carries the program as ``shmenv/_bin/shmenv``;
both entry points replace this Python process with it (``exec``), so its exit code,
signals and terminal are the program's own; so does a wheel built from source by ``pip
install ./python``. An editable install (``pip install -e ./python``, ``maturin develop``)
builds the Python extension only: then the first
``shmenv`` program on ``PATH`` that is not a script (``cargo install --path cli`` puts one
in ``~/.cargo/bin``) runs instead, and without one a message says how to get it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: Where a wheel carries the program.
BUNDLED = Path(__file__).resolve().parent / "_bin" / "shmenv"


def _is_program(path: Path) -> bool:
    """Whether `path` is an executable ELF file (not this package's own console script)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF" and os.access(path, os.X_OK)
    except OSError:
        return False


def find_program() -> Path | None:
    """The ``shmenv`` program to run: the wheel's, else the first one on ``PATH``, else None."""
    if BUNDLED.is_file():
        if not os.access(BUNDLED, os.X_OK):
            # A tool that unpacked the wheel without file modes: the file is ours to fix.
            BUNDLED.chmod(BUNDLED.stat().st_mode | 0o111)
        return BUNDLED
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "shmenv"
        if _is_program(candidate):
            return candidate
    return None


def missing_message() -> str:
    """What to do when no program was found (an install built from source)."""
    checkout = Path(__file__).resolve().parents[2]
    built = checkout / "target" / "release" / "shmenv"
    lines = [
        "shmenv: this install of the shmenv package has no `shmenv` program: it is an editable install "
        "(pip install -e ./python, maturin develop), which builds the Python extension only.",
        "Get the program in one of these ways:",
        "  - install a binary wheel, which carries it: `bash python/build_wheel.sh` in a clone makes one "
        "(target/wheels/shmenv-*.whl), then `pip install target/wheels/shmenv-*.whl`;",
        "  - with Rust 1.85+, from a clone: `cargo install --path cli` puts it in ~/.cargo/bin, where "
        "`shmenv` and `python -m shmenv` find it on PATH.",
    ]
    if (checkout / "cli" / "Cargo.toml").is_file():
        hint = f"{built} (built)" if built.is_file() else "target/release/shmenv"
        lines.append(f"  - in this checkout, `cargo run --release -- <command>` builds and runs {hint}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs the ``shmenv`` program with `argv` (default: this process's arguments); returns
    only when there is no program to run (exit status 1, after the message)."""
    args = sys.argv[1:] if argv is None else argv
    program = find_program()
    if program is None:
        print(missing_message(), file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    # `shmenv list` asks this interpreter for its installed plugin packages (shmenv.plugins).
    os.environ.setdefault("SHMENV_PYTHON", sys.executable)
    os.execv(program, ["shmenv", *args])
    return 0  # not reached: execv replaces the process or raises OSError


if __name__ == "__main__":
    sys.exit(main())
