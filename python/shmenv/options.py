"""The pool's keyword options, declared once.

:class:`PoolOptions` is the one list of what :func:`shmenv.make_vec` (and everything that
forwards to it: ``from_fns``, ``ShmVectorEnv``, the SB3, TorchRL, EnvPool, multi-agent and
Ray fronts) accepts besides the env and ``num_envs``: names, types and defaults. The
functions' signatures are made from it (:func:`with_options`), so ``help(shmenv.make_vec)``
and ``inspect.signature`` list every option, and adding one is one edit here (and one in
the Rust extension's ``PoolArgs`` if the engine needs it).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from typing import Any, Callable, TypeVar

import numpy as np
from gymnasium.vector import AutoresetMode

from shmenv import _shmenv

ENGINE_DEFAULTS: dict[str, Any] = _shmenv.pool_defaults()
"""The engine's pool defaults (its ``PoolBuilder::DEFAULT_*``, the one place they are
written), by option name: the defaults below that the engine decides are read from here."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class PoolOptions:
    """The keyword options of :func:`shmenv.make_vec`; its docstring and docs/python.md
    describe each one. ``None`` leaves a setting to the engine (or to the rule that
    :func:`ring_settings` states); the other defaults the engine has are its own
    (:data:`ENGINE_DEFAULTS`)."""

    num_workers: int | None = None
    envs_per_worker: int | None = None
    batch_size: int | None = None
    seed: int | None = None
    config: dict | None = None
    autoreset_mode: str | AutoresetMode = AutoresetMode(ENGINE_DEFAULTS["autoreset_mode"])
    copy: bool = True
    worker_program: str | os.PathLike | None = None
    max_episode_steps: int | None = None
    wait: str = ENGINE_DEFAULTS["wait"]
    ring_depth: int | None = None
    pin_workers: bool = ENGINE_DEFAULTS["pin_workers"]
    episode_stats_key: str = ""
    step_timeout: float | None = None
    max_restarts: int | None = None
    fair_scheduling: bool = ENGINE_DEFAULTS["fair_scheduling"]
    render_mode: str | None = None
    plugin: str | os.PathLike | None = None
    observation_mode: str | tuple = "same"
    pool_infos: bool = False
    trainer_shard: bool | str = "auto"

    @classmethod
    def of(cls, caller: str, options: dict[str, Any]) -> PoolOptions:
        """The options from keyword arguments; an unknown name raises ``TypeError`` as a
        function's unknown keyword does, with the nearest valid name."""
        unknown = [k for k in options if k not in NAMES]
        if unknown:
            guess = _shmenv.closest_match(unknown[0], list(NAMES))
            hint = f"; did you mean {guess!r}?" if guess else f"; valid options: {', '.join(NAMES)}"
            raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}{hint}")
        for name in FLAGS:
            value = options.get(name)
            if name in options and not isinstance(value, (bool, np.bool_)):
                from shmenv.errors import InvalidArgumentTypeError

                raise InvalidArgumentTypeError(
                    f"{caller}(): {name} must be True or False, got {value!r} ({type(value).__name__}); "
                    f"pass {name}=True or {name}=False"
                )
        _check_trainer_shard(caller, options.get("trainer_shard", "auto"))
        return cls(**options)


def _check_trainer_shard(caller: str, value: Any) -> None:
    """``trainer_shard`` is a bool or one of the mode names."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, str) and value in ("auto", "on", "off")):
        return
    from shmenv.errors import InvalidArgumentError, InvalidArgumentTypeError

    error = InvalidArgumentError if isinstance(value, str) else InvalidArgumentTypeError
    raise error(
        f"{caller}(): trainer_shard must be True, False, 'auto', 'on' or 'off', got {value!r} "
        f"({type(value).__name__}); 'auto' (the default) lets the pool choose"
    )


def env_or_id(env: Any, env_id: Any) -> Any:
    """The env :func:`shmenv.make_vec` runs: ``env``, or ``id`` (``gymnasium.make_vec``'s
    keyword: ``make_vec(id="CartPole-v1", num_envs=4)``); exactly one of them."""
    from shmenv.errors import InvalidArgumentTypeError

    if env is not None and env_id is not None:
        raise InvalidArgumentTypeError(
            f"make_vec got both env={env!r} and id={env_id!r}, which name the same thing (id is "
            "gymnasium.make_vec's keyword for it): pass one of them"
        )
    if env is None and env_id is None:
        raise InvalidArgumentTypeError(
            "make_vec needs the env to run, got neither env nor id: pass it first, or as id=... as "
            "gymnasium.make_vec takes it (shmenv.make_vec(id='CartPole-v1', num_envs=4))"
        )
    return env if env is not None else env_id


def ring_settings(ring_depth: int | None, zero_copy_async: bool) -> tuple[int, int]:
    """``(ring_depth, retain_batches)`` for the engine: its defaults, except for a zero-copy
    async pool (``copy=False`` and ``batch_size < num_envs``), the one place where Python
    chooses otherwise. Its observations are views of the ring's blocks, which the engine's
    borrow rules cannot follow, so one received batch is retained (the previous batch stays
    intact next to the current one), and the ring gets one block more than the engine's
    default, so that workers still fill a block while the trainer holds its two (the
    builder's ``retain_batches`` doc). A ``ring_depth`` given is passed as it is."""
    retain = 1 if zero_copy_async else ENGINE_DEFAULTS["retain_batches"]
    depth = ENGINE_DEFAULTS["ring_depth"] + retain if ring_depth is None else ring_depth
    return depth, retain


#: The option names, in declaration order.
NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PoolOptions))

#: The options that are flags: only ``True`` or ``False`` (a numpy bool too), never a
#: string or a number whose truth would be taken for them.
FLAGS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PoolOptions) if f.type == "bool")

F = TypeVar("F", bound=Callable[..., Any])


def with_options(fn: F) -> F:
    """Gives ``fn`` (which takes the options as ``**options``) the signature that lists
    them, as keyword-only parameters with their defaults and types."""
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for f in dataclasses.fields(PoolOptions)
    ]
    fn.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return fn
