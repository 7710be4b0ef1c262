"""``shmenv/_shmenv.pyi``, the hand-written types of the extension module, cannot drift
from the built module: every name the module exports is in the stub and nothing else is,
each class has the stub's methods and properties and no others, and every function,
method and constructor takes the parameters the stub names, with defaults where it has
them. ``py.typed`` is there, so type checkers read the package's annotations."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest

import shmenv
from shmenv import _shmenv

PACKAGE = Path(shmenv.__file__).parent
STUB = PACKAGE / "_shmenv.pyi"


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(), filename=str(STUB))


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def _is_property(f: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)


def _params(f: ast.FunctionDef) -> list[tuple[str, bool]]:
    """``(name, has a default)`` of the stub function's parameters, ``self``/``cls`` left out."""
    args = f.args.posonlyargs + f.args.args
    defaults = [False] * (len(args) - len(f.args.defaults)) + [True] * len(f.args.defaults)
    params = list(zip(args, defaults))
    if params and params[0][0].arg in ("self", "cls"):
        params = params[1:]
    params += [(a, d is not None) for a, d in zip(f.args.kwonlyargs, f.args.kw_defaults)]
    return [(a.arg, has) for a, has in params]


def _runtime_params(obj: Any) -> list[tuple[str, bool]]:
    sig = inspect.signature(obj)
    return [(p.name, p.default is not inspect.Parameter.empty) for p in sig.parameters.values() if p.name != "self"]


def _members(cls: type) -> set[str]:
    """The members the extension class defines (its own dunders such as ``__enter__`` too)."""
    return {n for n in set(vars(cls)) - set(vars(object)) if n not in ("__module__", "__doc__", "__new__")}


def test_the_stub_names_exactly_what_the_module_exports():
    exported = {n for n in dir(_shmenv) if not (n.startswith("__") and n.endswith("__"))}
    stubbed = set(_top_level(_stub()))
    assert exported - stubbed == set(), "exported by _shmenv but missing from _shmenv.pyi"
    assert stubbed - exported == set(), "in _shmenv.pyi but not exported by _shmenv"


def test_stub_functions_take_the_modules_parameters():
    functions = [n for n in _top_level(_stub()).values() if isinstance(n, ast.FunctionDef)]
    assert functions
    for f in functions:
        assert _params(f) == _runtime_params(getattr(_shmenv, f.name)), f.name


@pytest.mark.parametrize("name", [n.name for n in _stub().body if isinstance(n, ast.ClassDef)])
def test_stub_classes_match_the_modules_classes(name: str):
    node = _top_level(_stub())[name]
    assert isinstance(node, ast.ClassDef)
    cls = getattr(_shmenv, name)
    assert isinstance(cls, type), f"_shmenv.{name} is not a class"
    methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    stubbed = set(methods) - {"__new__"}
    assert _members(cls) == stubbed, f"_shmenv.{name}: members differ from the stub's"
    for member, f in methods.items():
        if member == "__new__":
            assert _params(f) == _runtime_params(cls), f"{name}()"
        elif _is_property(f):
            assert not callable(getattr(cls, member)), f"{name}.{member} is a method, the stub says a property"
        else:
            assert _params(f) == _runtime_params(getattr(cls, member)), f"{name}.{member}"
    if "__new__" not in methods:
        with pytest.raises(TypeError):
            cls()


def test_the_package_is_marked_typed():
    assert (PACKAGE / "py.typed").is_file()
