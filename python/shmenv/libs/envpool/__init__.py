"""EnvPool's ``make`` over shmenv's pools, for scripts written against EnvPool 1.2.5.

>>> import shmenv.libs.envpool as envpool
>>> envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=8, seed=0)
>>> obs, info = envs.reset()          # obs (8, 4) float32; info: env_id, players, elapsed_step
>>> envs.close()

The object follows EnvPool's ``GymnasiumEnvPool``: a ``gymnasium.Env`` (and a
``gymnasium.vector.VectorEnv``) whose ``observation_space``/``action_space`` are one env's
spaces; ``reset(env_id=None)``, ``step(action, env_id=None)``, ``async_reset()``,
``send(action, env_id=None)``, ``recv()``, ``config``, ``spec``, ``all_env_ids``,
``is_async``. With ``env_type="dm"`` (needs ``dm-env``) it follows EnvPool's ``DMEnvPool``:
the same calls return ``dm_env.TimeStep`` batches. ``docs/envpool.md`` lists the ids, the
keyword arguments and what differs.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import gymnasium as gym

import shmenv
from shmenv.errors import BuildError, ConfigError, InvalidArgumentError
from shmenv.libs.envpool.env import EnvPoolEnv, EnvSpec
from shmenv.libs.envpool.tasks import _PLUGIN_KEYS, _check_common, _config, _kind, _roms, list_all_envs

__all__ = [
    "make",
    "make_gymnasium",
    "make_gym",
    "make_dm",
    "make_spec",
    "list_all_envs",
    "EnvPoolEnv",
    "EnvSpec",
    "DmEnvNotInstalledError",
]


class DmEnvNotInstalledError(BuildError, ImportError):
    """``env_type="dm"`` needs the ``dm_env`` package (``pip install dm-env``)."""


def _import_dm():
    """``shmenv.libs.envpool.dm`` (which imports ``dm_env``), or a typed error saying what to install."""
    try:
        import dm_env  # noqa: F401
    except ImportError as error:
        raise DmEnvNotInstalledError(
            f"env_type='dm' returns dm_env.TimeStep batches and needs the dm_env package, which cannot be "
            f"imported ({error}); install it with `pip install dm-env`, or use env_type='gymnasium'"
        ) from error
    from shmenv.libs.envpool import dm

    return dm


def _atari_plugin(explicit: Any, task_id: str) -> str | None:
    """The native ALE plugin: plugin=, else SHMENV_ALE_PLUGIN, else the installed shmenv-ale
    package's (shmenv.plugins); None (with a warning, once per id) runs Gymnasium's ALE."""
    path = explicit if explicit is not None else os.environ.get("SHMENV_ALE_PLUGIN") or None
    if path is None:
        from shmenv import plugins

        found = plugins.find("AtariC-v5")
        if found is None:
            plugins.warn_fallback(task_id, "AtariC-v5", "Gymnasium's ALE")
        return None if found is None else found.library
    if not os.path.exists(path):
        raise InvalidArgumentError(f"the ALE plugin {path!r} does not exist (plugin= or SHMENV_ALE_PLUGIN)")
    return None if path is None else os.fspath(path)


def make(task_id: str, env_type: str = "gymnasium", **kwargs: Any):
    """EnvPool's ``make`` over shmenv's worker processes: env_type ``"gymnasium"`` or
    ``"gym"`` (which EnvPool 1.2.5 treats alike) gives an :class:`EnvPoolEnv`, ``"dm"`` a
    ``DMEnvPoolEnv`` (``dm_env.TimeStep`` results; needs ``dm-env``). Keyword arguments:
    EnvPool's for the task (``num_envs``, ``batch_size``, ``num_threads`` -> worker
    processes, ``seed``, ``max_episode_steps``, Atari's ``episodic_life``, ``reward_clip``,
    ``stack_num``, ...), plus ``plugin`` (the native ALE plugin for Atari; or env var
    ``SHMENV_ALE_PLUGIN``). Unknown ones raise :class:`shmenv.errors.ConfigError` listing
    the valid ones."""
    if env_type == "dm":
        return make_dm(task_id, **kwargs)
    if env_type not in ("gym", "gymnasium"):
        raise InvalidArgumentError(f"env_type should be one of 'dm', 'gym', or 'gymnasium', got {env_type!r}")
    return _make_env(task_id, kwargs)


def _make_env(task_id: str, kwargs: dict[str, Any]) -> EnvPoolEnv:
    """The pool for ``task_id`` and EnvPool's keyword arguments, as an :class:`EnvPoolEnv`."""
    kind, game = _kind(task_id)
    config, env_kwargs, extra = _config(task_id, kind, game, dict(kwargs))
    num_envs, batch_size, seeds = _check_common(config)
    base_seed = seeds if isinstance(seeds, int) else seeds[0]
    common = dict(
        num_workers=(config["num_threads"] or None) and min(config["num_threads"], num_envs),
        batch_size=batch_size,
        seed=base_seed % 2**64,
        episode_stats_key="",
        pool_infos=True,
    )
    if isinstance(seeds, list) and batch_size is not None and seeds != list(range(seeds[0], seeds[0] + num_envs)):
        raise InvalidArgumentError("an async pool seeds env i with seed + i: a seed list must be consecutive")
    if kind == "atari":
        # zero_discount_on_life_loss only changes the dm API's discount (DMEnvPoolEnv does it).
        if config["task"] != game:
            raise ConfigError(f"task={config['task']!r} does not match {task_id} (task {game!r})")
        plugin = _atari_plugin(extra.get("plugin"), task_id)
        if plugin is not None:
            for key in ("mode", "difficulty"):
                if config[key] != -1:
                    raise ConfigError(f"{key}={config[key]!r} is not supported by the native ALE plugin (only -1)")
            pconf = {"rom_dir": _roms(), "game": game, **{k: config[k] for k in _PLUGIN_KEYS}}
            pool = shmenv.make_vec(
                "AtariC-v5",
                num_envs,
                plugin=plugin,
                config=pconf,
                max_episode_steps=int(config["max_episode_steps"]),
                **common,
            )
        else:
            for key, ok in (("gray_scale", True), ("use_inter_area_resize", True)):
                if config[key] != ok:
                    raise ConfigError(
                        f"{key}={config[key]!r} cannot be honoured by the Gymnasium-hosted Atari path (only {ok}); "
                        "the native ALE plugin (plugin= or SHMENV_ALE_PLUGIN) refuses it too"
                    )
            hconf = {
                k: config[k]
                for k in (
                    "stack_num",
                    "frame_skip",
                    "noop_max",
                    "img_height",
                    "img_width",
                    "episodic_life",
                    "reward_clip",
                    "use_fire_reset",
                    "full_action_space",
                    "repeat_action_probability",
                    "mode",
                    "difficulty",
                    "max_episode_steps",
                )
            }
            pool = shmenv.make_vec(
                "shmenv.libs.envpool.atari:_hosted_atari", num_envs, config={"game": game, **hconf}, **common
            )
    elif kind == "classic" and task_id in shmenv.builtin_env_ids():
        pool = shmenv.make_vec(task_id, num_envs, max_episode_steps=int(config["max_episode_steps"]), **common)
    else:
        spec = gym.spec(task_id)
        limit = config["max_episode_steps"]
        spec = dataclasses.replace(spec, max_episode_steps=limit, kwargs={**spec.kwargs, **env_kwargs})
        pool = shmenv.make_vec(spec, num_envs, **common)
    try:
        return EnvPoolEnv(task_id, pool, config, kind, seeds)
    except BaseException:
        pool.close()
        raise


def make_gymnasium(task_id: str, **kwargs: Any) -> EnvPoolEnv:
    """``make(task_id, "gymnasium", **kwargs)``."""
    return make(task_id, "gymnasium", **kwargs)


def make_gym(task_id: str, **kwargs: Any) -> EnvPoolEnv:
    """``make(task_id, "gym", **kwargs)``: in EnvPool 1.2.5 the same Gymnasium API."""
    return make(task_id, "gym", **kwargs)


def make_dm(task_id: str, **kwargs: Any):
    """``make(task_id, "dm", **kwargs)``: EnvPool's dm_env API. ``reset``, ``step`` and
    ``recv`` return ``dm_env.TimeStep(step_type, reward, discount, observation)`` batches,
    the observation a namedtuple ``State(env_id, players, obs, ...)`` as EnvPool's. Raises
    :class:`DmEnvNotInstalledError` (an ``ImportError``) without ``dm-env``."""
    dm = _import_dm()
    env = _make_env(task_id, kwargs)
    try:
        return dm.DMEnvPoolEnv(env)
    except BaseException:
        env.close()
        raise


def make_spec(task_id: str, **kwargs: Any) -> EnvSpec:
    """EnvPool's ``make_spec``: the config at once (checked as ``make`` checks it); the spaces
    on first use (from a 1-env pool)."""
    kind, game = _kind(task_id)
    config, _, _ = _config(task_id, kind, game, dict(kwargs))
    _check_common(config)
    return EnvSpec(task_id, config, None, kwargs)
