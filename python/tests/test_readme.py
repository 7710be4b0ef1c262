"""The README's Python snippet, run verbatim (extracted from README.md, so the two cannot
drift)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_snippet() -> str:
    text = README.read_text()
    section = text[text.index("## Use it from Python") :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "README.md has no ```python block under 'Use it from Python'"
    return found.group(1)


@pytest.mark.timeout(60)
def test_readme_python_snippet_runs_as_written(no_leaks):
    scope: dict = {}
    exec(compile(python_snippet(), str(README), "exec"), scope)
    envs = scope["envs"]
    assert envs.closed
    obs = scope["obs"]
    assert obs.shape == (64, 4) and obs.flags.writeable
