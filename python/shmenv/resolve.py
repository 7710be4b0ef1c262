"""What ``make_vec`` was asked to run, turned into the engine's ``(env id, JSON config)``
before any worker starts, with the mistakes of multiprocessing vector envs caught here
as clear errors:

- a native (Rust) env id -> that id and its config;
- a Gymnasium id, including ids registered only in this process, or a
  ``gymnasium.envs.registration.EnvSpec`` -> the full spec as JSON (workers need no
  registration, they rebuild the env from the spec's entry point);
- an entry point ``"package.module:attr"`` (or the class/function itself) -> imported and
  called in each worker with ``config`` as keyword arguments;
- an env *instance* -> rebuilt from its ``spec`` when it has one, refused otherwise;
- anything defined in ``__main__`` -> refused: workers cannot import the trainer's script;
- kwargs that are not JSON -> refused, naming the key.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, replace
from typing import Any

from shmenv import _shmenv
from shmenv.errors import InvalidArgumentError, UnknownEnvError


@dataclass
class Resolved:
    """What runs in the workers: the engine's env id and JSON config."""

    engine_id: str
    config: dict
    python: bool
    label: str
    gym_spec: Any = None
    """The Gymnasium ``EnvSpec`` the workers build from, for Gymnasium ids and specs."""


def closest(name: str, candidates: list[str]) -> str | None:
    """The candidate closest to `name` (case-insensitive), if close enough."""
    lowered = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.75)
    return lowered[found[0]] if found else None


def _check_json(kwargs: dict, what: str) -> None:
    if not isinstance(kwargs, dict):
        raise InvalidArgumentError(f"{what} must be a dict of JSON values, got {type(kwargs).__name__}")
    for key, value in kwargs.items():
        try:
            json.dumps(value, allow_nan=True)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"{what}[{key!r}] is not JSON-serialisable ({type(value).__module__}.{type(value).__qualname__}): "
                "each worker builds its envs from JSON config, so pass plain values (numbers, strings, lists, "
                f"dicts) and create the {type(value).__name__} inside the env's constructor, e.g. "
                f"make_vec('my_pkg.envs:MyEnv', n, config={{'{key}_settings': {{...}}}})"
            ) from None


def _entry_point_of(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if module is None or qualname is None or "<locals>" in qualname:
        raise InvalidArgumentError(
            f"{obj!r} cannot be imported by the workers (it has no module-level name): define it at the "
            "top level of a module and pass 'package.module:Name'"
        )
    if module == "__main__":
        raise InvalidArgumentError(
            f"{qualname} is defined in __main__ (the script you ran); worker processes cannot import it. "
            f"Move it to a module (e.g. my_envs.py next to your script) and pass 'my_envs:{qualname}'"
        )
    return f"{module}:{qualname}"


def _from_spec(spec, config: dict | None) -> Resolved:
    entry = spec.entry_point
    if callable(entry):
        spec = replace(spec, entry_point=_entry_point_of(entry))
    elif isinstance(entry, str) and entry.startswith("__main__:"):
        raise InvalidArgumentError(
            f"{spec.id} is registered with entry point {entry!r}, in __main__ (the script you ran); worker "
            "processes cannot import it: move the env class to a module and register 'module:Class'"
        )
    _check_json(dict(spec.kwargs), f"the kwargs of {spec.id}")
    if config:
        _check_json(config, "config")
    try:
        spec_json = spec.to_json()
    except ValueError as e:
        raise InvalidArgumentError(f"{spec.id}: its spec cannot travel to the workers as JSON: {e}") from None
    return Resolved("", {"kind": "spec", "spec": spec_json, "kwargs": config or {}}, True, spec.id, spec)


def _from_entry_point(entry: str, config: dict | None) -> Resolved:
    if entry.startswith("__main__:"):
        raise InvalidArgumentError(
            f"{entry!r} is in __main__ (the script you ran); worker processes cannot import it: move it to a "
            f"module (e.g. my_envs.py) and pass 'my_envs:{entry.split(':', 1)[1]}'"
        )
    if config:
        _check_json(config, "config")
    return Resolved("", {"kind": "entry_point", "entry_point": entry, "kwargs": config or {}}, True, entry)


def resolve(env: Any, config: dict | None) -> Resolved:
    """See the module docstring."""
    python_id = _shmenv.python_env_id()
    native = _shmenv.builtin_env_ids()
    if isinstance(env, str) and env in native:
        if config is not None:
            _check_json(config, "config")
        return Resolved(env, config or {}, False, env)
    import gymnasium as gym
    from gymnasium.envs.registration import EnvSpec

    if isinstance(env, gym.Env) or (hasattr(env, "step") and hasattr(env, "reset") and not isinstance(env, type)):
        spec = getattr(env, "spec", None)
        if spec is None:
            raise InvalidArgumentError(
                f"make_vec got an env instance ({type(env).__name__}) without a spec; workers build their own "
                "envs, so pass what builds one: a Gymnasium id, gymnasium.spec(id), or an entry point "
                f"'package.module:Class' with config={{...kwargs}}"
            )
        out = _from_spec(spec, config)
    elif isinstance(env, EnvSpec):
        out = _from_spec(env, config)
    elif isinstance(env, str):
        if env in gym.registry:
            out = _from_spec(gym.spec(env), config)
        elif ":" in env:
            module, _, name = env.partition(":")
            registered = None
            if module != "__main__":
                # Gymnasium's "module:EnvId-v0" form: importing the module registers the id.
                try:
                    import importlib

                    importlib.import_module(module)
                except ImportError as e:
                    raise InvalidArgumentError(f"cannot import {module!r} for {env!r}: {e}") from None
                if name in gym.registry:
                    registered = gym.spec(name)
            out = _from_spec(registered, config) if registered is not None else _from_entry_point(env, config)
        else:
            gym_ids = sorted(gym.registry)
            guess = closest(env, native + gym_ids)
            err = UnknownEnvError(
                f"unknown env id {env!r}. Native (Rust) envs: {', '.join(native)}. Or any of the "
                f"{len(gym_ids)} Gymnasium ids (gymnasium.pprint_registry()), an EnvSpec, or an entry point "
                f"'package.module:Class'." + (f" Did you mean {guess!r}?" if guess else "")
            )
            err.env_id, err.registered, err.closest = env, native + gym_ids, guess
            raise err
    elif callable(env):
        out = _from_entry_point(_entry_point_of(env), config)
    else:
        raise InvalidArgumentError(
            f"make_vec cannot run {env!r}: pass a native or Gymnasium env id, a gymnasium EnvSpec, or an entry "
            "point 'package.module:Class'"
        )
    out.engine_id = python_id
    return out
