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


@dataclasses.dataclass(frozen=True, kw_only=True)
class PoolOptions:
    """The keyword options of :func:`shmenv.make_vec`; its docstring and docs/python.md
    describe each one."""

    num_workers: int | None = None
    envs_per_worker: int | None = None
    batch_size: int | None = None
    seed: int | None = None
    config: dict | None = None
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP
    copy: bool = True
    worker_program: str | os.PathLike | None = None
    max_episode_steps: int | None = None
    wait: str = "auto"
    ring_depth: int | None = None
    pin_workers: bool = True
    episode_stats_key: str = "episode_stats"
    step_timeout: float | None = None
    max_restarts: int | None = None
    fair_scheduling: bool = True
    render_mode: str | None = None
    plugin: str | os.PathLike | None = None
    observation_mode: str | tuple = "same"
    pool_infos: bool = False
    trainer_shard: bool = False

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
        return cls(**options)


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
