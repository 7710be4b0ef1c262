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
from typing import Any, Callable

from shmenv._shmenv import shard

# The global index of this worker's first env, when the config says (factories).
_SHARD_START: int | None = None


class EnvHost:
    """The Python envs one host runs and what the extension's ``PyEnv`` reads of them: a
    worker process has one (the module's, whose containers are this module's names below);
    a trainer that steps a shard of hosted envs has one per pool
    (:mod:`shmenv.worker.in_trainer`), so that two pools never share state."""

    def __init__(self, side_values: Any = None, info_writer: Any = None) -> None:
        """A host with no envs yet; ``side_values`` (a :class:`shmenv.worker.side.SideValues`)
        and ``info_writer`` (a :class:`shmenv.infos.InfoWriter`) are new ones by default."""
        from shmenv import infos
        from shmenv.worker import side

        # The host's Python envs, in shard order (local index = position).
        self.envs: list[Any] = []
        # Reset options the trainer sent for env `local` (op "reset_options"), taken by its next reset.
        self.reset_options: dict[int, dict] = {}
        # Envs whose next reset gets seed=None whatever the engine's seed (op "unseeded": the
        # first reset of a pool built without a seed, as Gymnasium's vector envs reset), taken by it.
        self.unseeded: set[int] = set()
        # Local indices of envs whose spaces differ from the first env's: they report its spec,
        # so that the pool starts and the trainer raises Gymnasium's error naming both envs.
        self.mismatched: list[int] = []
        # The spec JSON and spaces of the host's first env, which every later one must match.
        self.first_spec: tuple[str, str, str] | None = None
        # The pool's observation_mode: "same", or "different" (the envs' observation spaces
        # may differ in their bounds: the spec reports shapes and dtypes only).
        self.obs_mode = "same"
        # Side leaves of the envs' observations and actions (:mod:`shmenv.worker.side`).
        self.side = side.SideValues() if side_values is None else side_values
        # Infos the envs returned (:mod:`shmenv.infos`).
        self.infos = infos.InfoWriter() if info_writer is None else info_writer

    def make_env(self, config_json: str, index: Callable[[dict], int] | None = None):
        """Builds one env from the pool's config; a factory config with one factory per env
        picks env ``index(config)``'s (the global index of the env being built)."""
        config = json.loads(config_json)
        self.obs_mode = config.get("observation_mode", "same")
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
            at = index(config) if index is not None and "num_envs" in config else None
            env = _from_factory(config, at)
        else:
            raise ValueError(f"unknown Python env kind {kind!r} in the pool config")
        if config.get("wrappers"):
            env = _wrapped(env, config["wrappers"])
        self.envs.append(env)
        return env

    def pyenv_parts(self, env) -> tuple:
        """What the extension's ``PyEnv`` keeps of the env just built: its local index, the
        info writer's ``note_info``, the pending reset options and unseeded envs, its
        observation flattener and action unpacker (None when not needed)."""
        local = len(self.envs) - 1
        flatten, unpack = self.obs_flattener(env, local), self.action_unpacker(env, local)
        return local, self.infos.note_info, self.reset_options, self.unseeded, flatten, unpack

    def spec_json(self, env) -> str:
        """The env's spaces as the engine's spec JSON. Every env of a host reports its first
        env's: one whose spaces differ is noted in :attr:`mismatched` (the trainer compares
        every env's spaces after start-up and raises Gymnasium's error naming both envs)."""
        out = _spec_json(env, self.obs_mode)
        spaces = (repr(env.observation_space), repr(env.action_space))
        if self.first_spec is None or len(self.envs) <= 1:
            self.first_spec = (out, *spaces)
            self.mismatched.clear()
        elif out != self.first_spec[0]:
            self.mismatched.append(len(self.envs) - 1)
            return self.first_spec[0]
        return out

    def obs_flattener(self, env, local: int):
        """For a nested Dict/Tuple observation space (or one with side leaves), the function
        from an observation to its engine arrays in spec order (the host calls it at every
        reset and step; side leaves are kept for the trainer, :mod:`shmenv.worker.side`);
        else None."""
        import functools

        import numpy as np

        from shmenv.spaces import composite

        space = env.observation_space
        if not composite.is_nested(space):
            return None
        flatten = functools.partial(composite.flatten, space)
        side_at = composite.side_leaves(space)
        if not side_at:
            return flatten
        fixed = [i for i in range(len(composite.leaves(space))) if i not in side_at]
        return self.side.flattener(flatten, side_at, fixed, local, [np.zeros((), np.uint8)])

    def action_unpacker(self, env, local: int):
        """For a Dict/Tuple action space (or one with side leaves), the function from the
        packed byte row the trainer wrote to the action the env takes; else None."""
        from shmenv.spaces import composite

        space = env.action_space
        if not (composite.is_composite(space) or composite.side_leaves(space)):
            return None
        packing = composite.ActionPacking(space)
        return self.side.unpacker(packing.unpack, local) if packing.side else packing.unpack

    def close_envs(self) -> None:
        """Calls ``close()`` on every env this host built, as Gymnasium's vector envs do at
        ``close()``. A failing ``close()`` is printed and the other envs are still closed."""
        while self.envs:
            env = self.envs.pop(0)
            try:
                env.close()
            except BaseException:  # noqa: BLE001 - reported on stderr, the others still close
                print(f"shmenv: close() of an env failed:\n{traceback.format_exc()}", file=sys.stderr)


# The worker process's host, and its state by the names the call channel's thread reads.
def _worker_host() -> EnvHost:
    from shmenv import infos
    from shmenv.worker import side

    return EnvHost(side.WORKER, infos.WORKER)


_HOST = _worker_host()
_ENVS: list[Any] = _HOST.envs
RESET_OPTIONS: dict[int, dict] = _HOST.reset_options
UNSEEDED: set[int] = _HOST.unseeded
MISMATCHED: list[int] = _HOST.mismatched


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
    """Builds one env of this worker from the pool's config (the host calls it for each env
    of the shard)."""
    return _HOST.make_env(config_json, _env_index)


def pyenv_parts(env) -> tuple:
    """:meth:`EnvHost.pyenv_parts` of this worker's host."""
    return _HOST.pyenv_parts(env)


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
    # With a trainer's shard the trainer steps the first shard: worker w hosts the next.
    own = 1 if config.get("trainer_shard") else 0
    start, end = shard(w + own, int(config["num_envs"]), int(config["num_workers"]) + own)
    _SHARD_START = start
    index = start + len(_HOST.envs)
    if not start <= index < end:
        raise RuntimeError(f"worker {w} builds envs {start}..{end - 1} but was asked for env {index}")
    return index


def _from_factory(config: dict, index: int | None):
    """Unpickles the env's factory (cloudpickle payload, base64) and calls it: a fresh copy
    per env, as each env of ``AsyncVectorEnv`` gets its own; ``index`` (the env's global
    index) picks its factory when there is one per env."""
    import base64
    import pickle

    payloads = config["factories"]
    which = config.get("env_factory")
    k = 0 if which is None else which[index]
    fn = pickle.loads(base64.b64decode(payloads[k]))
    from shmenv.worker import registry

    failed = registry.replay(config.get("registrations"))
    env = registry.unknown_ids_explained(fn, failed, "registrations" in config)
    if not (hasattr(env, "reset") and hasattr(env, "step")):
        raise TypeError(f"the env factory {fn!r} returned {env!r}, not an env (it has no reset/step)")
    return env


def spec_json(env) -> str:
    """:meth:`EnvHost.spec_json` of this worker's host."""
    return _HOST.spec_json(env)


def _spec_json(env, obs_mode: str) -> str:
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
    if obs_mode != "same":
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


def close_envs() -> None:
    """Closes every env this worker built (:meth:`EnvHost.close_envs`). Runs after the host
    loop ended (the pool closed, or the worker failed); the trainer waits for it up to its
    shutdown grace (1 s), then kills the worker."""
    _HOST.close_envs()
