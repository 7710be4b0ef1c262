"""docs/python.md writes out the signatures of ``shmenv.make_vec`` and ``shmenv.from_fns``;
these tests hold them to the code (``inspect.signature``): the same parameters in the same
order, of the same kind, with the same defaults, and every parameter of ``make_vec``
described in the doc."""

from __future__ import annotations

import enum
import inspect
import os
import re
from typing import Any

import pytest

import shmenv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "python.md")


def doc_text() -> str:
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def documented_signature(name: str) -> inspect.Signature:
    """The signature written in docs/python.md as the code span `` `name(...)` ``, compiled
    into a function of that shape (its defaults are the doc's literals)."""
    found = re.search(r"`" + re.escape(name) + r"\((.*?)\)`", doc_text(), re.S)
    assert found, f"docs/python.md has no `{name}(...)` signature"
    params = " ".join(found.group(1).split())
    namespace: dict[str, Any] = {}
    exec(f"def {name}({params}): pass", namespace)  # noqa: S102 - the doc's own parameter list
    return inspect.signature(namespace[name])


def same_default(doc: Any, code: Any) -> bool:
    """Whether the doc's default stands for the code's: equal, or the string form of an
    enum default that the function takes (``"next_step"`` for ``AutoresetMode.NEXT_STEP``)."""
    if isinstance(code, enum.Enum) and isinstance(doc, str):
        return doc == code.name.lower()
    return doc == code or (doc is inspect.Parameter.empty and code is inspect.Parameter.empty)


def parameters(sig: inspect.Signature) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in sig.parameters.values()]


@pytest.mark.parametrize("name", ["make_vec", "from_fns"])
def test_documented_signature_matches_the_code(name: str) -> None:
    doc = documented_signature(name)
    code = inspect.signature(getattr(shmenv, name))
    assert parameters(doc) == parameters(code), (
        f"docs/python.md's {name} signature differs from the code:\n  doc:  {doc}\n  code: {code}"
    )
    wrong = [
        f"{p}: doc {doc.parameters[p].default!r}, code {code.parameters[p].default!r}"
        for p in code.parameters
        if not same_default(doc.parameters[p].default, code.parameters[p].default)
    ]
    assert not wrong, f"docs/python.md's {name} defaults differ from the code: {wrong}"


def test_every_make_vec_parameter_is_described() -> None:
    text = doc_text()
    start = text.index("`make_vec(env=None, num_envs")
    section = text[start : text.index("\n## ", start)]
    missing = [p for p in inspect.signature(shmenv.make_vec).parameters if f"`{p}`" not in section]
    assert not missing, f"make_vec parameters without a word in docs/python.md's table: {missing}"
