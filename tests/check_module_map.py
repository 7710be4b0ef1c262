#!/usr/bin/env python3
"""Check that docs/modules.md's module tables name every module, and nothing else.

Run from the repository root: ``python3 tests/check_module_map.py`` (standard library
only). Exit status 0 when every table matches the code; 1, with one line per problem on
stderr, when a module is missing from its table, a row names a module that no longer
exists, or a table is missing or malformed.

The convention the doc follows (and this script reads):

- The tables sit in the section ``## Crates and modules`` of docs/modules.md (up to
  the next ``## `` heading).
- Each crate or package has a ``### `` heading of its own that names, in backticks, the
  file or folder its modules are declared in: ``engine/src/lib.rs``, ``worker/src/lib.rs``,
  ``cli/src/main.rs``, ``python/src/lib.rs``, ``src/lib.rs`` (the crate roots), and
  ``python/shmenv/`` (the Python package). The first table after the heading (a block of
  lines starting with ``|``; its first two lines are the header and the separator) is
  that crate's table.
- One row per module: the first cell holds exactly one name in backticks. For a crate,
  the module's name as its root file declares it (``spec``); for the Python package, the
  dotted import name (``shmenv.vector``, ``shmenv.spaces``). Submodules are described in
  their parent's row; they are not checked.

What counts as a module:

- Rust: every ``mod NAME;`` in the crate's root file, whatever its visibility (``pub``,
  ``pub(crate)``, ``pub(super)``, none) or its other attributes (``#[cfg(not(loom))]``),
  except modules under ``#[cfg(test)]`` (tests, not part of the crate's map) and modules
  declared with an inline body (``mod x { ... }``: part of the root file itself).
- Python: the package itself (``python/shmenv/__init__.py``, row ``shmenv``), every
  ``python/shmenv/NAME.py`` (row ``shmenv.NAME``) and every subpackage
  ``python/shmenv/NAME/__init__.py`` (row ``shmenv.NAME``). No name is skipped, private
  (``_x.py``) or ``__main__.py`` included: each is a file someone reading the code has to
  place, and a rule with exceptions lets a new module slip past. The compiled extension
  (``_shmenv*.so``) and its stub (``_shmenv.pyi``) are not Python source: the extension's
  modules are the ``python/src/lib.rs`` table.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

DOC = Path("docs/modules.md")
SECTION = "## Crates and modules"
CRATE_ROOTS = ("engine/src/lib.rs", "worker/src/lib.rs", "cli/src/main.rs", "python/src/lib.rs", "src/lib.rs")
PY_PACKAGE = "python/shmenv/"

MOD_DECL = re.compile(r"^\s*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")
ATTRIBUTE = re.compile(r"^\s*#\[(.*)\]\s*(.*)$")
TICKED = re.compile(r"`([^`]+)`")


def rust_modules(root: Path) -> set[str]:
    """The modules a crate root declares (``mod NAME;``), less those under ``#[cfg(test)]``."""
    found: set[str] = set()
    test_only = False
    for line in root.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        attribute = ATTRIBUTE.match(line)
        if attribute:
            test_only = test_only or re.search(r"\bcfg\s*\(\s*test\s*\)", attribute.group(1)) is not None
            line = attribute.group(2)
            if not line.strip():
                continue  # attributes on lines of their own apply to the next item
        declared = MOD_DECL.match(line)
        if declared and not test_only:
            found.add(declared.group(1))
        test_only = False
    return found


def python_modules(package: Path) -> set[str]:
    """The package, its top-level modules and its subpackages, as dotted import names."""
    found = {"shmenv"} if (package / "__init__.py").is_file() else set()
    for path in package.iterdir():
        if path.is_file() and path.suffix == ".py" and path.stem != "__init__":
            found.add(f"shmenv.{path.stem}")
        elif path.is_dir() and (path / "__init__.py").is_file():
            found.add(f"shmenv.{path.name}")
    return found


def section_lines(doc: str) -> list[str]:
    """The lines of the module-map section, or an empty list when it is missing."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(SECTION)), None)
    if start is None:
        return []
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1 : end]


def tables_by_source(lines: list[str]) -> dict[str, list[tuple[int, str]]]:
    """For each ``### `` heading, the rows of the first table after it: (row number, cell)."""
    tables: dict[str, list[tuple[int, str]]] = {}
    rows: list[tuple[int, str]] | None = None
    for line in lines:
        if line.startswith("### "):
            rows = []
            for source in TICKED.findall(line):
                tables[source] = rows
        elif rows is not None and line.startswith("|"):
            cells = line.strip().strip("|").split("|")
            rows.append((len(rows) + 1, cells[0]))
        elif rows:
            rows = None  # the first table under a heading has ended: later ones are not read
    return tables


def row_names(source: str, rows: list[tuple[int, str]], problems: list[str]) -> set[str]:
    """The module each row names (header and separator rows skipped)."""
    names: set[str] = set()
    for number, cell in rows[2:]:
        ticked = TICKED.findall(cell)
        if len(ticked) != 1:
            problems.append(
                f"{DOC}: row {number - 2} of the table under the heading naming `{source}` has "
                f"{len(ticked)} names in backticks in its first cell ({cell.strip()!r}); "
                "write exactly one module name there, one row per module"
            )
            continue
        if ticked[0] in names:
            problems.append(f"{DOC}: the table under `{source}` names `{ticked[0]}` twice: keep one row")
        names.add(ticked[0])
    return names


def compare(source: str, actual: set[str], tables: dict[str, list[tuple[int, str]]], problems: list[str]) -> None:
    """Records every module of `source` missing from its table and every stale row."""
    rows = tables.get(source)
    if rows is None:
        if actual:
            problems.append(
                f"{DOC}: no '### ' heading naming `{source}` in section '{SECTION}'; add one with a "
                f"table of its modules: {', '.join(sorted(actual))}"
            )
        return
    listed = row_names(source, rows, problems)
    for name in sorted(actual - listed):
        problems.append(f"{DOC}: module `{name}` of {source} is missing: add a row to the table under `{source}`")
    for name in sorted(listed - actual):
        problems.append(
            f"{DOC}: the table under `{source}` names `{name}`, which {source} no longer has: "
            "remove or rename its row"
        )


def main() -> int:
    """Checks every table; prints the problems and returns 1 when there are any."""
    if not DOC.is_file():
        print(f"check_module_map: {DOC} not found; run from the repository root", file=sys.stderr)
        return 1
    problems: list[str] = []
    lines = section_lines(DOC.read_text(encoding="utf-8"))
    if not lines:
        print(f"check_module_map: {DOC} has no section '{SECTION}'", file=sys.stderr)
        return 1
    tables = tables_by_source(lines)
    for root in CRATE_ROOTS:
        if not Path(root).is_file():
            problems.append(f"{root} not found: update CRATE_ROOTS in tests/check_module_map.py")
            continue
        compare(root, rust_modules(Path(root)), tables, problems)
    package = Path(PY_PACKAGE)
    if package.is_dir():
        compare(PY_PACKAGE, python_modules(package), tables, problems)
    else:
        problems.append(f"{PY_PACKAGE} not found: update PY_PACKAGE in tests/check_module_map.py")
    for problem in problems:
        print(f"check_module_map: {problem}", file=sys.stderr)
    if problems:
        print(f"check_module_map: {len(problems)} problem(s); the convention is in the script's docstring",
              file=sys.stderr)
        return 1
    print(f"check_module_map: every module of {len(CRATE_ROOTS)} crates and {PY_PACKAGE} is in {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
