"""What ``make_vec`` was asked to run, turned into the engine's ``(env id, JSON config)``
before any worker starts, with the mistakes of multiprocessing vector envs caught here
as clear errors:

- a native (Rust) env id -> that id and its config;
- an id that an installed plugin package declares (entry-point group ``shmenv.plugins``,
  :mod:`shmenv.plugins`) -> that id, the package's library and its default config under
  the given one; an id of shmenv's own plugin packages that is not installed is refused,
  naming the package to install;
- a Gymnasium id, including ids registered only in this process, or a
  ``gymnasium.envs.registration.EnvSpec`` -> the full spec as JSON (workers need no
  registration, they rebuild the env from the spec's entry point);
- an entry point ``"package.module:attr"`` (or an importable class/function itself) ->
  imported and called in each worker with ``config`` as keyword arguments;
- any other zero-argument callable (a lambda, a closure, ``functools.partial``, a function
  of ``__main__``) -> an env *factory*, pickled with cloudpickle and sent to the workers in
  the JSON config (base64); each worker unpickles it and calls it once per env. One that
  cannot be pickled is refused here, naming the pickling error;
- ``EnvFns`` (``shmenv.from_fns``): one factory per env;
- an env *instance* -> rebuilt from its ``spec`` when it has one, refused otherwise;
- anything defined in ``__main__`` -> refused: workers cannot import the trainer's script;
- kwargs that are not JSON -> refused, naming the key.

It also says which program the workers run (:func:`worker_command`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from typing import Any, Sequence

from shmenv import _shmenv
from shmenv.errors import InvalidArgumentError, InvalidArgumentTypeError, UnknownEnvError


@dataclass
class Resolved:
    """What runs in the workers: the engine's env id and JSON config."""

    engine_id: str
    config: dict
    python: bool
    label: str
    gym_spec: Any = None
    """The Gymnasium ``EnvSpec`` the workers build from, for Gymnasium ids and specs."""
    plugin_library: str | None = None
    """The plugin library the workers load (``plugin=`` or an installed plugin package)."""
    plugin_package: str | None = None
    """The installed distribution that provides ``plugin_library``, when one does."""

    @property
    def backend(self) -> str:
        """Which path runs the envs: ``"native"`` (a built-in Rust env), ``"plugin"`` (a
        native library loaded by the workers) or ``"python"`` (Python code in Python workers)."""
        if self.python:
            return "python"
        return "native" if self.plugin_library is None else "plugin"


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
            "top level of a module and pass 'package.module:Name', or pass make_vec a factory (a "
            "zero-argument callable that returns the env, sent to the workers with cloudpickle)"
        )
    if module == "__main__":
        raise InvalidArgumentError(
            f"{qualname} is defined in __main__ (the script you ran); worker processes cannot import it. "
            f"Move it to a module (e.g. my_envs.py next to your script) and pass 'my_envs:{qualname}', or pass "
            f"a factory (lambda: {qualname}(...)), pickled with cloudpickle"
        )
    return f"{module}:{qualname}"


def _importable(obj: Any) -> str | None:
    """``"module:qualname"`` when the workers can import `obj` under that name, else None."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or module == "__main__":
        return None
    if "<locals>" in qualname or "<lambda>" in qualname:
        return None
    import sys

    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return f"{module}:{qualname}" if found is obj else None


class EnvFns:
    """One env factory per env (``shmenv.from_fns``): env ``i`` is built by ``fns[i]``."""

    def __init__(self, fns: list):
        self.fns = list(fns)


def env_fns_target(env_fns: Sequence[Any], kwargs: dict) -> tuple[Any, int]:
    """What :func:`make_vec` builds for :func:`from_fns`'s arguments (checked): the one
    factory when all are the same object (unless it is a class the workers cannot import),
    else ``EnvFns``; and the number of envs."""
    if isinstance(env_fns, (str, bytes)) or not isinstance(env_fns, Sequence):
        raise InvalidArgumentTypeError(
            f"from_fns takes a list of callables (one per env), got {type(env_fns).__name__}"
        )
    fns = list(env_fns)
    if not fns:
        raise InvalidArgumentError("from_fns needs at least one env factory")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise InvalidArgumentTypeError(
                f"env_fns[{i}] is a {type(fn).__name__}, not a callable: pass what builds the env, e.g. "
                "lambda: gym.make('CartPole-v1')"
            )
    if "num_envs" in kwargs:
        raise InvalidArgumentTypeError("from_fns takes no num_envs: it runs one env per callable")
    one = all(fn is fns[0] for fn in fns)
    # A class the workers cannot import by name (a local one, one of __main__) is sent by
    # value, as AsyncVectorEnv pickles each of env_fns.
    by_value = isinstance(fns[0], type) and _importable(fns[0]) is None
    return (fns[0] if one and not by_value else EnvFns(fns)), len(fns)


# The params area of the region holds 64 KiB of JSON; leave room for the other params.
_MAX_FACTORY_JSON = 60 * 1024


def _factory_name(fn: Any) -> str:
    import functools

    if isinstance(fn, functools.partial):
        return f"partial({_factory_name(fn.func)}, ...)"
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _from_factories(fns: list, config: dict | None) -> Resolved:
    import base64

    import cloudpickle

    if config:
        raise InvalidArgumentError(
            "config is for entry points and Gymnasium ids; an env factory is called with no arguments: bind "
            "them in the factory (a closure, or functools.partial(make_env, **kwargs))"
        )
    payloads: list[str] = []
    which: list[int] = []
    by_id: dict[int, int] = {}
    for i, fn in enumerate(fns):
        if id(fn) not in by_id:
            try:
                data = cloudpickle.dumps(fn)
            except Exception as e:  # noqa: BLE001 - anything pickling raises is the user's to see
                where = "" if len(fns) == 1 else f" (env {i})"
                raise InvalidArgumentError(
                    f"the env factory {_factory_name(fn)}{where} cannot be pickled to reach the workers: "
                    f"{type(e).__name__}: {e}. Each worker builds its envs in its own process, so the factory "
                    "and everything it captures must pickle with cloudpickle: create that object inside the "
                    "factory instead of capturing it, or pass an entry point 'package.module:Class' with "
                    "config={...} (plain JSON values) and create it in the env's constructor"
                ) from e
            text = base64.b64encode(data).decode("ascii")
            if text not in payloads:
                payloads.append(text)
            by_id[id(fn)] = payloads.index(text)
        which.append(by_id[id(fn)])
    config = {"kind": "factory", "factories": payloads}
    if len(payloads) > 1:
        config["env_factory"] = which
    # The ids the script registered, for factories that gym.make them (replayed in the workers).
    known = registrations()
    if len(json.dumps(config)) + len(known) <= _MAX_FACTORY_JSON:
        config["registrations"] = known
    size = len(json.dumps(config))
    if size > _MAX_FACTORY_JSON:
        raise InvalidArgumentError(
            f"the pickled env factories are {size} bytes, more than the {_MAX_FACTORY_JSON} the pool's config "
            "holds: the factories capture too much (large arrays, datasets?). Load that data inside the factory "
            "(from a file) or pass an entry point 'package.module:Class' with a small JSON config"
        )
    names = dict.fromkeys(_factory_name(fn) for fn in fns)
    label = "factory " + ", ".join(names) if len(names) <= 3 else f"{len(names)} factories"
    return Resolved("", config, True, label)


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


def resolve_plugin(env: Any, config: dict | None, plugin: Any) -> tuple[Resolved, str]:
    """An env id of a plugin library (``make_vec(id, n, plugin=path)``): the library, a
    shared object implementing ``shmenv_env.h``, is loaded by every worker; its path is
    returned as a string."""
    import os

    if not isinstance(plugin, (str, os.PathLike)):
        raise InvalidArgumentError(f"plugin must be the path of a shared library (str or os.PathLike), got {plugin!r}")
    if not isinstance(env, str):
        raise InvalidArgumentError(f"with plugin=..., env must be one of the library's env ids (a str), got {env!r}")
    if config is not None:
        _check_json(config, "config")
    path = os.fspath(plugin)
    return Resolved(env, config or {}, False, env, plugin_library=path), path


def _from_installed(env: str, config: dict | None) -> Resolved | None:
    """An id of an installed plugin package (:mod:`shmenv.plugins`): its library, with the
    package's default config under ``config``; None when no package declares ``env``."""
    from shmenv import plugins

    found = plugins.find(env)
    if found is None:
        return None
    if config is not None:
        _check_json(config, "config")
    merged = {**found.config, **(config or {})}
    return Resolved(env, merged, False, env, plugin_library=found.library, plugin_package=found.distribution)


def _import_ale_py_for(env_id: str) -> None:
    """Imports ``ale_py`` for the ids it registers (``ALE/...``, ``ale_py:...`` and the
    ``...NoFrameskip-v4`` ones) when they are not registered yet, as TorchRL's ``GymEnv``
    does: Gymnasium 1.x no longer loads it by itself. Without ale-py installed the id stays
    unknown and the usual error names it."""
    if env_id.startswith(("ALE/", "ale_py:")) or "NoFrameskip" in env_id:
        import gymnasium as gym

        if env_id not in gym.registry:
            try:
                import ale_py  # noqa: F401  (registers the ALE ids with Gymnasium)
            except ImportError:
                pass


def resolve(env: Any, config: dict | None) -> Resolved:
    """See the module docstring."""
    python_id = _shmenv.python_env_id()
    native = _shmenv.builtin_env_ids()
    if isinstance(env, str) and env in native:
        if config is not None:
            _check_json(config, "config")
        return Resolved(env, config or {}, False, env)
    if isinstance(env, str) and ":" not in env:
        installed = _from_installed(env, config)
        if installed is not None:
            return installed
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
        _import_ale_py_for(env)
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
            from shmenv import plugins

            not_installed = plugins.missing(env)
            if not_installed is not None:
                raise not_installed
            gym_ids = sorted(gym.registry)
            from_packages = sorted(plugins.installed())
            guess = _shmenv.closest_match(env, native + from_packages + gym_ids)
            packaged = f" Installed plugin packages' envs: {', '.join(from_packages)}." if from_packages else ""
            err = UnknownEnvError(
                f"unknown env id {env!r}. Native (Rust) envs: {', '.join(native)}.{packaged} Or any of the "
                f"{len(gym_ids)} Gymnasium ids (gymnasium.pprint_registry()), an EnvSpec, or an entry point "
                f"'package.module:Class'." + (f" Did you mean {guess!r}?" if guess else "")
            )
            err.env_id, err.registered, err.closest = env, native + from_packages + gym_ids, guess
            raise err
    elif isinstance(env, EnvFns):
        out = _from_factories(env.fns, config)
    elif isinstance(env, type):
        # A class: imported by name in the workers (a class of __main__ or a local one is
        # refused, naming the fix; `lambda: MyEnv()` would send it by value).
        out = _from_entry_point(_entry_point_of(env), config)
    elif callable(env):
        entry = _importable(env)
        out = _from_entry_point(entry, config) if entry is not None else _from_factories([env], config)
    else:
        raise InvalidArgumentError(
            f"make_vec cannot run {env!r}: pass a native or Gymnasium env id, a gymnasium EnvSpec, an entry "
            "point 'package.module:Class', or a zero-argument callable that returns an env"
        )
    out.engine_id = python_id
    return out


def pass_render_mode(resolved, render_mode: str | None) -> None:
    """Puts ``render_mode`` into the kwargs the workers build each env with, or refuses it
    (native envs, factories, a config that says otherwise), before any worker starts."""
    if render_mode is None:
        return
    if not isinstance(render_mode, str):
        raise InvalidArgumentError(f"render_mode must be a str (e.g. 'rgb_array') or None, got {render_mode!r}")
    if not resolved.python:
        raise InvalidArgumentError(
            f"{resolved.label} is a native (Rust) shmenv env: native envs do not render, so render_mode must be "
            f"None (got {render_mode!r}). To render Gymnasium's own {resolved.label} in Python workers, pass "
            f"its spec: shmenv.make_vec(gymnasium.spec({resolved.label!r}), n, render_mode={render_mode!r})"
        )
    kind = resolved.config.get("kind")
    if kind not in ("spec", "entry_point"):
        raise InvalidArgumentError(
            f"render_mode={render_mode!r} cannot reach an env factory ({resolved.label}): it is called with no "
            f"arguments, so bind the mode inside it (lambda: gym.make(id, render_mode={render_mode!r})); the "
            "pool's render_mode is then the env's"
        )
    kwargs = resolved.config.setdefault("kwargs", {})
    if kwargs.get("render_mode", render_mode) != render_mode:
        raise InvalidArgumentError(
            f"render_mode={render_mode!r} and config['render_mode']={kwargs['render_mode']!r} disagree: pass one"
        )
    kwargs["render_mode"] = render_mode


def python_worker_command() -> tuple[str, list[str], list[tuple[str, str]]]:
    """How a Python worker starts: this interpreter, ``-m shmenv.worker``, with this
    process's ``sys.path`` so that the same packages import the same way."""
    paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    env = [("PYTHONPATH", os.pathsep.join(dict.fromkeys(paths)))]
    return sys.executable, ["-m", "shmenv.worker"], env


def worker_command(resolved, worker_program) -> tuple[str, list[str], list[tuple[str, str]]]:
    """The workers' program, arguments and environment: ``python -m shmenv.worker`` for
    every env but a native one with its own ``worker_program``."""
    if worker_program is None:
        return python_worker_command()
    if resolved.python:
        raise InvalidArgumentError(
            f"{resolved.label} is a Python env: it runs in Python workers (python -m shmenv.worker); "
            "worker_program is for native worker binaries"
        )
    return os.fspath(worker_program), [], []


# --- gymnasium.make_vec's wrappers and env keywords ---------------------------------------

_HOSTED_WARNED: set[str] = set()


def hosted_for_extras(env: Any, extras: Any, caller: str) -> Any:
    """``env`` to resolve given ``gymnasium.make_vec``'s ``wrappers`` or env keywords: a
    native (or plugin) id that Gymnasium also has becomes Gymnasium's spec, hosted in
    Python workers (said once per id, with a warning); a native id Gymnasium lacks is
    refused."""
    if not extras or not isinstance(env, str) or ":" in env:
        return env
    if env not in _shmenv.builtin_env_ids():
        from shmenv import plugins

        if plugins.find(env) is None:
            return env
    import gymnasium as gym

    if env not in gym.registry:
        what = "wrappers" if extras.wrappers else f"env keyword arguments ({', '.join(extras.env_kwargs)})"
        raise InvalidArgumentError(
            f"{caller}: {env} is a native shmenv env, which takes no {what}: pass its settings in config={{...}} "
            "(or a Gymnasium id to host Gymnasium's env with them)"
        )
    return gym.spec(env)


def warn_hosted(env: Any, resolved: Resolved, caller: str) -> None:
    """Says once per id that a native id was hosted from Gymnasium for its wrappers or env
    keywords (:func:`hosted_for_extras`), once they were accepted."""
    if not isinstance(env, str) or env != resolved.label or env in _HOSTED_WARNED or resolved.gym_spec is None:
        return
    if env not in _shmenv.builtin_env_ids():
        from shmenv import plugins

        if plugins.find(env) is None:
            return
    import warnings

    _HOSTED_WARNED.add(env)
    warnings.warn(
        f"{env} is a native shmenv env; with wrappers or env keyword arguments {caller} runs Gymnasium's {env} "
        "in Python workers instead (pass neither for the native env)",
        stacklevel=_user_stacklevel(),
    )


def _user_stacklevel() -> int:
    """The ``stacklevel`` at which a warning raised by this module's caller names the
    user's line: the first frame outside the shmenv package (whichever of ``make_vec``,
    ``ShmVectorEnv``, ``from_fns`` or the library fronts the user called)."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1  # level 1: the function calling warnings.warn
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _constructor_params(resolved: Resolved) -> tuple[str, list[str]] | None:
    """The env constructor's name and keyword parameters (None when it takes any keyword,
    or cannot be inspected here)."""
    import inspect

    kind = resolved.config.get("kind")
    try:
        if kind == "spec":
            entry = resolved.gym_spec.entry_point
            if isinstance(entry, str):
                from gymnasium.envs.registration import load_env_creator

                entry = load_env_creator(entry)
        elif kind == "entry_point":
            from shmenv.worker import load_entry_point

            entry = load_entry_point(resolved.config["entry_point"])
        else:
            return None
        params = inspect.signature(entry).parameters.values()
    except Exception:  # noqa: BLE001 - no check possible here: the worker reports what fails
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return getattr(entry, "__qualname__", resolved.label), [p.name for p in params if p.name != "self"]


def pass_extras(resolved: Resolved, extras: Any, caller: str, option_names: Sequence[str]) -> None:
    """Puts the env keywords into the kwargs the workers build each env with and the
    wrappers (pickled) into the config, or refuses them before any worker starts; a keyword
    neither the env's constructor nor shmenv takes is a ``TypeError`` naming both."""
    kwargs = dict(extras.env_kwargs)
    kwargs.pop("disable_env_checker", None)  # the workers never run Gymnasium's env checker
    kind = resolved.config.get("kind")
    if kwargs and kind not in ("spec", "entry_point"):
        key = next(iter(kwargs))
        guess = _shmenv.closest_match(key, list(option_names))
        hint = f"; did you mean {guess!r}?" if guess else f"; valid options: {', '.join(option_names)}"
        raise InvalidArgumentTypeError(f"{caller}() got an unexpected keyword argument {key!r}{hint}")
    if kwargs:
        found = _constructor_params(resolved)  # None: the constructor takes any keyword (or is not known here)
        unknown = [] if found is None else [k for k in kwargs if k not in found[1]]
        if unknown and found is not None:
            constructor, params = found
            guess = _shmenv.closest_match(unknown[0], list(option_names) + params)
            raise InvalidArgumentTypeError(
                f"{caller}() got an unexpected keyword argument {unknown[0]!r}: it is neither one of shmenv's "
                f"options nor an argument of {constructor} ({', '.join(params) or 'none'})"
                + (f"; did you mean {guess!r}?" if guess else "")
            )
        _check_json(kwargs, "the env keyword arguments")
        own = resolved.config.setdefault("kwargs", {})
        clash = [k for k in kwargs if k in own and own[k] != kwargs[k]]
        if clash:
            raise InvalidArgumentError(f"{caller}: {clash[0]}={kwargs[clash[0]]!r} and config disagree: pass one")
        own.update(kwargs)
    if extras.wrappers:
        resolved.config["wrappers"] = _pickled(extras.wrappers, "wrappers", caller)


def _pickled(obj: Any, what: str, caller: str) -> str:
    """``obj`` pickled with cloudpickle, base64, for the workers' config."""
    import base64

    import cloudpickle

    try:
        return base64.b64encode(cloudpickle.dumps(obj)).decode("ascii")
    except Exception as e:  # noqa: BLE001 - anything pickling raises is the user's to see
        raise InvalidArgumentError(
            f"{caller}: the {what} cannot be pickled to reach the workers: {type(e).__name__}: {e}; pass classes "
            "or functions that pickle with cloudpickle (create unpicklable objects inside them)"
        ) from e


# --- the trainer's Gymnasium registrations, replayed in the workers -----------------------


def registrations() -> str:
    """The ids this process has registered with Gymnasium (``gym.register``, ``import
    ale_py`` ...), for workers that run factories: zlib-compressed JSON, base64.
    Specs whose entry point is a string or an importable callable travel as JSON; others
    (a class of ``__main__``, a local one) pickled with cloudpickle; those that cannot be
    pickled are listed with the reason, which the worker's error names."""
    import base64
    import zlib

    import gymnasium as gym

    as_json, pickled, failed = [], [], {}
    for env_id, spec in list(gym.registry.items()):
        entry = spec.entry_point
        # Gymnasium's own ids travel too (a few KiB): the script may have re-registered one.
        module = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "") or ""
        try:
            if isinstance(entry, str) and not module.startswith("__main__"):
                as_json.append(spec.to_json())
                continue
            name = _importable(entry) if callable(entry) else None
            if name is not None and spec.vector_entry_point is None and not spec.additional_wrappers:
                as_json.append(replace(spec, entry_point=name).to_json())
                continue
        except ValueError:
            pass  # kwargs that are not JSON: pickled below
        try:
            if isinstance(entry, str):
                from gymnasium.envs.registration import load_env_creator

                spec = replace(spec, entry_point=load_env_creator(entry))
            pickled.append(_pickled(spec, f"registration of {env_id}", "make_vec"))
        except Exception as e:  # noqa: BLE001 - reported by the worker if the factory needs the id
            failed[env_id] = str(e).split(": ", 1)[-1][:300]
    data = json.dumps({"json": as_json, "pickled": pickled, "failed": failed})
    return base64.b64encode(zlib.compress(data.encode(), 6)).decode("ascii")
