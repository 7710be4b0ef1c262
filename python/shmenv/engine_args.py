"""What ``make_vec``'s arguments become before any worker starts: the env resolved
(:mod:`shmenv.resolve`), every option checked, and the engine's arguments (the
extension's ``PoolArgs``) as one dict. Every argument mistake is raised here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium.vector.vector_env import AutoresetMode

from shmenv import _shmenv
from shmenv.arguments import (
    GymExtras,
    _autoreset_mode,
    _count,
    _integer,
    _num_workers,
    _optional_int,
    _optional_seconds,
)
from shmenv.errors import InvalidArgumentError
from shmenv.options import NAMES, PoolOptions, ring_settings
from shmenv.resolve import (
    Resolved,
    hosted_for_extras,
    pass_extras,
    pass_render_mode,
    resolve,
    resolve_plugin,
    warn_hosted,
    worker_command,
)
from shmenv.seeding import seed_value
from shmenv.spaces import modes


@dataclass
class PoolPlan:
    """A pool to start: what runs, how many, and the engine's arguments."""

    resolved: Resolved
    mode: AutoresetMode
    obs_mode: Any
    num_envs: int
    num_workers: int
    batch_size: int
    seed: int | None
    #: Whether the trainer steps a shard of the envs, and why.
    trainer_shard: tuple[bool, str]
    pool_args: dict[str, Any]


def plan_pool(
    env: Any, num_envs: Any, o: PoolOptions, caller_guard: _shmenv.CallerGuard, extras: GymExtras | None = None
) -> PoolPlan:
    """Resolves ``env`` and checks every option of ``o`` and ``gymnasium.make_vec``'s
    ``extras`` (wrappers, env keywords); ``caller_guard`` is the vector env's one-caller
    guard, which the pool checks too."""
    mode = _autoreset_mode(o.autoreset_mode)
    obs_mode = modes.check_mode(o.observation_mode)
    extras = extras or GymExtras()
    if o.plugin is not None:
        resolved, plugin = resolve_plugin(env, o.config, o.plugin)
    else:
        resolved = resolve(hosted_for_extras(env, extras, "make_vec"), o.config)
        plugin = resolved.plugin_library
    pass_render_mode(resolved, o.render_mode)
    if extras:
        if not resolved.python:
            raise InvalidArgumentError(
                f"{resolved.label} is a native library's env: it takes no wrappers or env keyword arguments "
                f"({', '.join(extras.env_kwargs) or 'wrappers'}); pass its settings in config={{...}}"
            )
        pass_extras(resolved, extras, "make_vec", NAMES)
        warn_hosted(env, resolved, "make_vec")
    if resolved.python and obs_mode != "same":
        resolved.config["observation_mode"] = modes.worker_mode(obs_mode)
    num_envs = _count("num_envs", num_envs)
    seed = None if o.seed is None else seed_value(_integer("seed", o.seed), "seed")
    on, alone, reason = _trainer_shard(o, resolved, num_envs, plugin is not None, seed)
    shard = (on, reason)
    # A batch cheaper than a handoff to a worker: the trainer steps every env, no worker.
    num_workers = 0 if alone else _num_workers(num_envs, o.num_workers, o.envs_per_worker, on)
    if resolved.config.get("kind") == "factory" and resolved.python:
        which = resolved.config.get("env_factory")
        if which is not None and len(which) != num_envs:
            raise InvalidArgumentError(f"{len(which)} env factories for num_envs={num_envs}")
        # Workers pick env i's factory by their shard (the engine's split of the envs).
        resolved.config.update(num_envs=num_envs, num_workers=num_workers, trainer_shard=shard[0])
    batch = num_envs if o.batch_size is None else _count("batch_size", o.batch_size)
    zero_copy_async = batch < num_envs and not o.copy
    program, worker_args, worker_env = worker_command(resolved, o.worker_program)
    ring_depth, retain_batches = ring_settings(o.ring_depth, zero_copy_async)
    # The engine's arguments (the extension's `PoolArgs`), checked and resolved.
    pool_args = dict(
        num_workers=num_workers,
        batch_size=o.batch_size,
        seed=seed,
        config_json=json.dumps(resolved.config),
        autoreset=mode.value,
        max_episode_steps=_optional_int("max_episode_steps", o.max_episode_steps, 1),
        worker_program=program,
        worker_args=worker_args,
        worker_env=worker_env,
        call_socket=False,
        wait=o.wait,
        ring_depth=ring_depth,
        pin_workers=bool(o.pin_workers),
        step_timeout=_optional_seconds("step_timeout", o.step_timeout),
        max_restarts=_optional_int("max_restarts", o.max_restarts, 0),
        copy=bool(o.copy),
        retain_batches=retain_batches,
        fair_scheduling=bool(o.fair_scheduling),
        plugin=plugin,
        trainer_shard=shard[0],
        caller_guard=caller_guard,
    )
    return PoolPlan(resolved, mode, obs_mode, num_envs, num_workers, batch, seed, shard, pool_args)


def _trainer_shard(
    o: PoolOptions, resolved: Resolved, num_envs: int, plugin: bool, seed: int | None
) -> tuple[bool, bool, str]:
    """Whether the trainer steps a shard (``trainer_shard``: True/"on", False/"off" or
    "auto"), whether that shard is every env (no worker process), and why: the engine's
    rule, with what only Python knows (another worker program cannot be built in the
    trainer; built-in and hosted Python envs can). For built-in envs the engine measures
    what a batch costs, as a pool's build does (its envs seeded from ``seed``)."""
    value = o.trainer_shard  # checked by PoolOptions.of
    mode = ("on" if value else "off") if isinstance(value, (bool, np.bool_)) else str(value)
    # num_workers=0: no worker process, the trainer steps every env.
    alone = isinstance(o.num_workers, (int, np.integer)) and not isinstance(o.num_workers, bool) and o.num_workers == 0
    if alone:
        if mode == "off":
            raise InvalidArgumentError(
                "num_workers=0 has the trainer step every env, which trainer_shard=False forbids: pass "
                "num_workers=1 or more, or drop trainer_shard=False"
            )
        if o.envs_per_worker is not None:
            raise InvalidArgumentError("num_workers=0 starts no worker, so envs_per_worker has no meaning: drop it")
        mode = "on"
    if alone and o.worker_program is not None:
        raise InvalidArgumentError(
            "num_workers=0 has the trainer build every env from shmenv's own registry, which cannot know the "
            f"envs of worker_program={o.worker_program!r}: give num_workers=1 or more"
        )
    if mode == "on" and o.worker_program is not None:
        raise InvalidArgumentError(
            "trainer_shard=True builds the trainer's envs from shmenv's own registry, which cannot know the "
            f"envs of worker_program={o.worker_program!r}: drop one of the two"
        )
    on, every, reason = _shmenv.trainer_shard_choice(
        mode,
        num_envs=num_envs,
        workers_given=o.num_workers is not None or o.envs_per_worker is not None,
        buildable=o.worker_program is None,
        plugin=plugin,
        sync=o.batch_size is None or o.batch_size == num_envs,
        restarts=o.max_restarts is not None,
        step_timeout=o.step_timeout is not None,
        seed=seed,
        native=(resolved.engine_id, json.dumps(resolved.config))
        if resolved.backend == "native" and o.worker_program is None
        else None,
    )
    if alone:
        return True, True, "num_workers 0: the trainer steps every env"
    return on, every, reason
