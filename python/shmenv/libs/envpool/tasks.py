"""The tasks ``shmenv.envpool.make`` knows, EnvPool 1.2.5's keyword arguments and defaults
for each, and how a task's arguments become a shmenv pool's."""

from __future__ import annotations

import os
import re
from typing import Any

import gymnasium as gym
import numpy as np

import shmenv
from shmenv.errors import ConfigError, InvalidArgumentError, InvalidArgumentTypeError, UnknownEnvError

#: The keyword arguments every task takes, with EnvPool 1.2.5's defaults.
COMMON_DEFAULTS: dict[str, Any] = {
    "num_envs": 1,
    "batch_size": 0,
    "num_threads": 0,
    "max_num_players": 1,
    "thread_affinity_offset": -1,
    "base_path": "",
    "seed": 42,
    "env_seed": [],
    "gym_reset_return_info": True,
}

#: EnvPool 1.2.5's Atari ``*-v5`` defaults (its config keys, in its order).
ATARI_DEFAULTS: dict[str, Any] = {
    "max_episode_steps": 27000,
    "stack_num": 4,
    "frame_skip": 4,
    "noop_max": 30,
    "zero_discount_on_life_loss": False,
    "episodic_life": False,
    "reward_clip": False,
    "use_fire_reset": True,
    "img_height": 84,
    "img_width": 84,
    "task": "",
    "mode": -1,
    "difficulty": -1,
    "full_action_space": False,
    "repeat_action_probability": 0.0,
    "use_inter_area_resize": True,
    "gray_scale": True,
}

#: Config keys the native ALE plugin (``examples/cpp/ale_atari.cpp``) takes from the above.
_PLUGIN_KEYS = (
    "stack_num",
    "frame_skip",
    "noop_max",
    "use_fire_reset",
    "episodic_life",
    "reward_clip",
    "img_height",
    "img_width",
    "full_action_space",
    "repeat_action_probability",
    "gray_scale",
    "use_inter_area_resize",
)

#: Classic control ids EnvPool 1.2.5 registers: task-specific config keys with its defaults.
CLASSIC_CONTROL: dict[str, dict[str, Any]] = {
    "CartPole-v0": {"max_episode_steps": 200, "reward_threshold": 195.0},
    "CartPole-v1": {"max_episode_steps": 500, "reward_threshold": 475.0},
    "Pendulum-v1": {"max_episode_steps": 200, "version": 1},
    "MountainCar-v0": {"max_episode_steps": 200},
    "MountainCarContinuous-v0": {"max_episode_steps": 999},
    "Acrobot-v1": {"max_episode_steps": 500},
}

#: MuJoCo ids EnvPool registers under Gymnasium's names (hosted from Gymnasium here).
MUJOCO = (
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "HumanoidStandup",
    "InvertedDoublePendulum",
    "InvertedPendulum",
    "Pusher",
    "Reacher",
    "Swimmer",
    "Walker2d",
)

#: Keys shmenv adds to a make call that EnvPool does not have.
SHMENV_KEYS = ("plugin",)

_ATARI_INFO = (("lives", np.int32), ("reward", np.float32), ("terminated", np.int32))


# --- task ids ----------------------------------------------------------------------------


def _atari_games() -> dict[str, str]:
    """``Pong-v5`` -> ``pong`` for every ROM ale-py ships (EnvPool's naming); {} without ale-py."""
    try:
        from shmenv.assets import ale_roms

        roms = ale_roms()
    except ImportError:
        return {}
    games = sorted(f[:-4] for f in os.listdir(roms) if f.endswith(".bin"))
    return {"".join(g.capitalize() for g in game.split("_")) + "-v5": game for game in games}


def _mujoco_ids() -> list[str]:
    try:
        import mujoco  # noqa: F401
    except ImportError:
        return []
    return [f"{name}-{v}" for name in MUJOCO for v in ("v4", "v5") if f"{name}-{v}" in gym.registry]


def list_all_envs() -> list[str]:
    """The EnvPool ids this module runs here: classic control, Atari ``*-v5`` (with ale-py),
    MuJoCo (with mujoco). Any other Gymnasium id is accepted too, hosted as is."""
    return [*CLASSIC_CONTROL, *_atari_games(), *_mujoco_ids()]


def _kind(task_id: str) -> tuple[str, Any]:
    if not isinstance(task_id, str):
        raise InvalidArgumentTypeError(
            f"task_id must be a str, got {task_id!r} ({type(task_id).__name__}): pass an EnvPool id such as "
            "'CartPole-v1' or 'Pong-v5' (shmenv.envpool.list_all_envs() lists them) or any Gymnasium id"
        )
    if task_id in CLASSIC_CONTROL:
        return "classic", None
    if task_id.endswith("-v5") and "/" not in task_id:
        games = _atari_games()
        if task_id in games:
            return "atari", games[task_id]
        if not games and re.fullmatch(r"[A-Z][A-Za-z0-9]*-v5", task_id) and task_id.split("-")[0] not in MUJOCO:
            raise UnknownEnvError(f"{task_id!r} looks like an Atari id: Atari needs ale-py (pip install ale-py)")
    if task_id in gym.registry:
        return "hosted", None
    known = list_all_envs()
    close = shmenv._shmenv.closest_match(task_id, known) if hasattr(shmenv._shmenv, "closest_match") else None
    err = UnknownEnvError(
        f"{task_id} is not supported: `shmenv.envpool.list_all_envs()` lists the EnvPool ids ({len(known)}); "
        "any Gymnasium id also works" + (f". Did you mean {close!r}?" if close else "")
    )
    err.env_id, err.registered, err.closest = task_id, known, close
    raise err


# --- config ------------------------------------------------------------------------------


def _hosted_kwargs(task_id: str) -> set[str]:
    """The keyword arguments the Gymnasium env's constructor takes (passed through)."""
    import inspect

    spec = gym.spec(task_id)
    try:
        entry = spec.entry_point
        if isinstance(entry, str):
            import importlib

            module, _, name = entry.partition(":")
            entry = getattr(importlib.import_module(module), name)
        if entry is None:  # no entry point: nothing to inspect
            return set()
        params = inspect.signature(entry).parameters
    except Exception:  # an entry point that cannot be inspected takes nothing extra here
        return set()
    return {p for p, v in params.items() if v.kind in (v.KEYWORD_ONLY, v.POSITIONAL_OR_KEYWORD) and p != "render_mode"}


def _config(task_id: str, kind: str, game: str | None, kwargs: dict[str, Any]) -> tuple[dict, dict, dict]:
    """Checks ``kwargs`` against the task's keys: (config, hosted env kwargs, shmenv kwargs)."""
    config = dict(COMMON_DEFAULTS)
    env_kwargs: dict[str, Any] = {}
    if kind == "classic":
        config.update(CLASSIC_CONTROL[task_id])
    elif kind == "atari":
        config.update(ATARI_DEFAULTS, task=game, base_path=_roms())
    else:
        config["max_episode_steps"] = gym.spec(task_id).max_episode_steps
    extra = {k: kwargs.pop(k) for k in SHMENV_KEYS if k in kwargs}
    hosted_keys = _hosted_kwargs(task_id) if kind == "hosted" else set()
    unknown = [k for k in kwargs if k not in config and k not in hosted_keys]
    if unknown:
        valid = sorted(set(config) | hosted_keys | set(SHMENV_KEYS))
        raise ConfigError(
            f"{task_id} got unknown keyword argument(s) {', '.join(map(repr, unknown))}; valid ones: {', '.join(valid)}"
        )
    for k, v in kwargs.items():
        if k in config:
            config[k] = v
        else:
            env_kwargs[k] = v
    config.update(env_kwargs)
    return config, env_kwargs, extra


def _roms() -> str:
    from shmenv.assets import ale_roms

    return ale_roms()


def _int_arg(name: str, value: Any, low: int, high: int, what: str) -> int:
    """An int (not a bool, not a float) in ``low..high``, or a typed error naming the
    argument, the value, the range and what it means."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentTypeError(
            f"{name} must be an int from {low} to {high} ({what}), got {value!r} ({type(value).__name__}); "
            + (f"pass {name}=<int>" if "[" not in name else "pass a list of ints")
        )
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be an int from {low} to {high} ({what}), got {value!r}")
    return int(value)


_INT32 = (-(2**31), 2**31 - 1)


def _check_common(config: dict) -> tuple[int, int | None, Any]:
    """EnvPool's checks, as typed errors: returns (num_envs, batch_size or None, seeds)."""
    n = _int_arg("num_envs", config["num_envs"], 1, _INT32[1], "the number of envs")
    b = _int_arg("batch_size", config["batch_size"], 0, n, f"0: sync; 1 to num_envs={n}: the envs per batch")
    _int_arg("num_threads", config["num_threads"], 0, _INT32[1], "0: the default; else the worker processes")
    if config["max_num_players"] != 1:
        raise InvalidArgumentError("max_num_players: shmenv envs have one player; only 1 is supported")
    if config["thread_affinity_offset"] != -1:
        raise InvalidArgumentError(
            "thread_affinity_offset is not supported (shmenv pins its worker processes itself); leave it at -1"
        )
    if not config["gym_reset_return_info"]:
        raise InvalidArgumentError(
            "gym_reset_return_info=False is refused, as by EnvPool 1.2.5: reset always returns (obs, info)"
        )
    seed, env_seed, seeds_name = config["seed"], config["env_seed"], "env_seed"
    if not isinstance(env_seed, (list, tuple, np.ndarray)):
        raise InvalidArgumentTypeError(
            f"env_seed must be a list of one int32 seed per env (num_envs={n}), got {env_seed!r}; "
            "or pass seed=<int> to seed env i with seed + i"
        )
    if isinstance(seed, (list, tuple, np.ndarray)):
        if len(env_seed):
            raise InvalidArgumentError("pass either `seed` as an int or seed list, or `env_seed`, but not both")
        env_seed, seeds_name, config["seed"] = seed, "seed", 0
    elif isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or not -(2**31) <= seed < 2**31:
        raise InvalidArgumentError(
            f"seed should be an int in the range of int32, got {seed!r}: pass seed=<int> (env i is seeded "
            "seed + i) or a list of one int per env"
        )
    env_seed = [_int_arg(f"{seeds_name}[{i}]", s, *_INT32, "a per-env seed") for i, s in enumerate(env_seed)]
    if env_seed and len(env_seed) != n:
        raise InvalidArgumentError(f"a seed list needs one seed per env: {len(env_seed)} for num_envs={n}")
    config["env_seed"] = env_seed
    if b == 0:
        config["batch_size"] = n  # as EnvPool reports it
    return n, (b if 0 < b < n else None), (env_seed or int(config["seed"]))


# --- spec --------------------------------------------------------------------------------
