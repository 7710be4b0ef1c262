"""The Python worker: ``python -m shmenv.worker --shmenv-worker <index> <fd> <pid>``
(:mod:`shmenv.worker.__main__`).

Pools start it (by exec, never ``multiprocessing``); it is not meant to be run by hand.
The hot loop is Rust (the extension's host): it reads actions from the shared region,
steps the envs and writes results in place. This module is what the host reads by
attribute (``py.import("shmenv.worker")``): Python envs are built here, from JSON config
(:func:`make_env`), kept in ``_ENVS``, and their spaces reported as the engine's spec
(:func:`spec_json`); ``RESET_OPTIONS`` holds the options of the next ``reset``, ``UNSEEDED``
the envs whose next ``reset`` gets ``seed=None``;
:func:`obs_flattener` and :func:`action_unpacker` convert nested observations and
composite actions. A daemon thread (:mod:`shmenv.channel.worker`) serves
``call``/``get_attr``/``set_attr`` requests from the trainer on a side channel (a Unix
socket) that never touches the step path.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

from shmenv._shmenv import shard

# This worker's Python envs, in shard order (local index = position).
_ENVS: list[Any] = []
# Reset options the trainer sent for env `local` (op "reset_options"), taken by its next reset.
RESET_OPTIONS: dict[int, dict] = {}
# Envs whose next reset gets seed=None whatever the engine's seed (op "unseeded": the first
# reset of a pool built without a seed, as Gymnasium's vector envs reset), taken by it.
UNSEEDED: set[int] = set()
# The spec JSON and spaces of this worker's first env, which every later one must match.
_FIRST_SPEC: tuple[str, str, str] | None = None
# The global index of this worker's first env, when the config says (factories).
_SHARD_START: int | None = None
# The pool's observation_mode: "same", or "different" (the envs' observation spaces may
# differ in their bounds: the spec reports shapes and dtypes only).
_OBS_MODE = "same"
# Local indices of envs whose spaces differ from the first env's: they report its spec, so
# that the pool starts and the trainer raises Gymnasium's error naming both envs.
MISMATCHED: list[int] = []


def load_entry_point(entry_point: str) -> Any:
    """``"package.module:attr"`` (attr may be dotted) -> the object."""
    module_name, sep, attr = entry_point.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"entry point {entry_point!r} must look like 'package.module:attr'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def make_env(config_json: str):
    """Builds one env from the pool's config (called by the host for each env of the shard)."""
    global _OBS_MODE
    config = json.loads(config_json)
    _OBS_MODE = config.get("observation_mode", "same")
    kind = config.get("kind")
    kwargs = config.get("kwargs") or {}
    if kind == "spec":
        import gymnasium as gym
        from gymnasium.envs.registration import EnvSpec

        spec = EnvSpec.from_json(config["spec"])
        env = gym.make(spec, disable_env_checker=True, **kwargs)
    elif kind == "entry_point":
        env = load_entry_point(config["entry_point"])(**kwargs)
    elif kind == "factory":
        env = _from_factory(config)
    else:
        raise ValueError(f"unknown Python env kind {kind!r} in the pool config")
    if config.get("wrappers"):
        env = _wrapped(env, config["wrappers"])
    _ENVS.append(env)
    return env


def _wrapped(env, payload: str):
    """``env`` with ``make_vec(..., wrappers=[...])``'s wrappers applied, in order (as
    ``gymnasium.make_vec`` applies them to each sub-env)."""
    import base64
    import pickle

    for wrapper in pickle.loads(base64.b64decode(payload)):
        env = wrapper(env)
    return env


def _worker_index() -> int:
    """This worker's index, from its command line (``--shmenv-worker <index> <fd> <pid>``)."""
    try:
        return int(sys.argv[sys.argv.index("--shmenv-worker") + 1])
    except (ValueError, IndexError):
        raise RuntimeError(f"no worker index in the command line {sys.argv!r}") from None


def _env_index(config: dict) -> int:
    """The global index of the env being built: the shard's first env (the engine's
    shard rule) plus the envs built so far."""
    global _SHARD_START
    w = _worker_index()
    start, end = shard(w, int(config["num_envs"]), int(config["num_workers"]))
    _SHARD_START = start
    index = start + len(_ENVS)
    if not start <= index < end:
        raise RuntimeError(f"worker {w} builds envs {start}..{end - 1} but was asked for env {index}")
    return index


def _from_factory(config: dict):
    """Unpickles the env's factory (cloudpickle payload, base64) and calls it: a fresh copy
    per env, as each env of ``AsyncVectorEnv`` gets its own."""
    import base64
    import pickle

    payloads = config["factories"]
    which = config.get("env_factory")
    index = _env_index(config) if "num_envs" in config else None
    k = 0 if which is None else which[index]
    fn = pickle.loads(base64.b64decode(payloads[k]))
    from shmenv.worker import registry

    failed = registry.replay(config.get("registrations"))
    env = registry.unknown_ids_explained(fn, failed, "registrations" in config)
    if not (hasattr(env, "reset") and hasattr(env, "step")):
        raise TypeError(f"the env factory {fn!r} returned {env!r}, not an env (it has no reset/step)")
    return env


def spec_json(env) -> str:
    """The env's spaces as the engine's spec JSON. Every env of a worker reports its first
    env's: one whose spaces differ is noted in :data:`MISMATCHED` (the trainer compares
    every env's spaces after start-up and raises Gymnasium's error naming both envs)."""
    global _FIRST_SPEC
    out = _spec_json(env)
    spaces = (repr(env.observation_space), repr(env.action_space))
    if _FIRST_SPEC is None or len(_ENVS) <= 1:
        _FIRST_SPEC = (out, *spaces)
        MISMATCHED.clear()
    elif out != _FIRST_SPEC[0]:
        MISMATCHED.append(len(_ENVS) - 1)
        return _FIRST_SPEC[0]
    return out


def _spec_json(env) -> str:
    from gymnasium import spaces

    from shmenv.spaces import composite
    from shmenv.spaces.convert import shape_only_json, space_to_json

    obs = env.observation_space
    if composite.is_nested(obs):
        jsons = composite.leaf_json(obs, "observation")
        observations = [{"name": n, "space": j} for n, j in zip(composite.leaf_names(obs), jsons)]
    elif isinstance(obs, spaces.Dict):
        observations = [{"name": k, "space": space_to_json(v, f"observation {k!r}")} for k, v in obs.spaces.items()]
    else:
        observations = [{"name": "obs", "space": space_to_json(obs, "observation space")}]
    if _OBS_MODE != "same":
        for o in observations:
            o["space"] = shape_only_json(o["space"])
    act = env.action_space
    if composite.is_composite(act) or composite.side_leaves(act):
        action = composite.ActionPacking(act).engine_json()
    else:
        action = space_to_json(act, "action space")
    single_key_dict = isinstance(obs, spaces.Dict) and len(obs.spaces) == 1 and not composite.is_nested(obs)
    return json.dumps(
        {"observations": observations, "action": action, "max_episode_steps": None, "single_key_dict": single_key_dict}
    )


def obs_flattener(env):
    """For a nested Dict/Tuple observation space (or one with side leaves), the function
    from an observation to its engine arrays in spec order (the host calls it at every
    reset and step; side leaves are kept for the trainer, :mod:`shmenv.worker.side`); else
    None."""
    import functools

    import numpy as np

    from shmenv.spaces import composite
    from shmenv.worker import side

    space = env.observation_space
    if not composite.is_nested(space):
        return None
    flatten = functools.partial(composite.flatten, space)
    side_at = composite.side_leaves(space)
    if not side_at:
        return flatten
    fixed = [i for i in range(len(composite.leaves(space))) if i not in side_at]
    return side.flattener(flatten, side_at, fixed, len(_ENVS) - 1, [np.zeros((), np.uint8)])


def action_unpacker(env):
    """For a Dict/Tuple action space (or one with side leaves), the function from the
    packed byte row the trainer wrote to the action the env takes; else None."""
    from shmenv.spaces import composite
    from shmenv.worker import side

    space = env.action_space
    if not (composite.is_composite(space) or composite.side_leaves(space)):
        return None
    packing = composite.ActionPacking(space)
    return side.unpacker(packing.unpack, len(_ENVS) - 1) if packing.side else packing.unpack


def close_envs() -> None:
    """Calls ``close()`` on every env this worker built, as Gymnasium's vector envs do at
    ``close()``: envs flush files, stop simulators, free native resources. Runs after the
    host loop ended (the pool closed, or the worker failed); the trainer waits for it up to
    its shutdown grace (1 s), then kills the worker. A failing ``close()`` is printed and
    the other envs are still closed."""
    while _ENVS:
        env = _ENVS.pop(0)
        try:
            env.close()
        except BaseException:  # noqa: BLE001 - reported on stderr (the trainer's), the others still close
            print(f"shmenv worker: close() of an env failed:\n{traceback.format_exc()}", file=sys.stderr)
