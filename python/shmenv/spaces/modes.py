"""Gymnasium's ``observation_mode`` for a pool, and the check of every env's spaces that
``AsyncVectorEnv`` makes at start-up, with its errors.

- ``"same"`` (the default): every env has env 0's observation and action spaces; the
  spec the workers report carries the bounds.
- ``"different"``: the observation spaces may differ in their bounds (the same shape and
  dtype); the workers report shapes and dtypes only (``shape_only_json``), the batched
  space is Gymnasium's ``batch_differing_spaces`` of every env's space.
- ``(observation_space, single_observation_space)``: given by the caller; each env's
  space must have the single space's shape and dtype.

A mismatch raises the ``RuntimeError`` ``AsyncVectorEnv`` raises (Gymnasium's message),
naming both envs and their spaces.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gymnasium.spaces import Space

from shmenv.errors import InvalidArgumentError

SAME_MESSAGE = (
    "shmenv (observation_mode='same'): the sub-environments observation spaces are not equivalent. {detail} "
    "If this is intentional, use `observation_mode='different'` instead."
)
DIFFERENT_MESSAGE = (
    "shmenv (observation_mode='different' or custom space): the sub-environment's observation spaces do not share "
    "a common shape and dtype. {detail}"
)
ACTION_MESSAGE = (
    "Some environments have an action space different from `{space}`. In order to batch actions, the action "
    "spaces from all environments must be equal. {detail}"
)


def check_mode(mode: Any) -> str | tuple[Space, Space]:
    """``observation_mode`` checked as Gymnasium checks it (its ``ValueError``/``TypeError``
    messages): ``"same"``, ``"different"`` or ``(observation_space, single_observation_space)``."""
    if isinstance(mode, tuple) and len(mode) == 2:
        if not isinstance(mode[0], Space) or not isinstance(mode[1], Space):
            raise TypeError(
                f"Expected both elements of observation_mode to be Spaces, got {type(mode[0])} and {type(mode[1])}"
            )
        return mode
    if isinstance(mode, str) and mode in ("same", "different"):
        return mode
    raise InvalidArgumentError(
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch observation "
        f"space, actual got {mode}"
    )


def worker_mode(mode: str | tuple) -> str:
    """What the workers are told: ``"same"`` (report bounds) or ``"different"`` (shapes
    and dtypes only)."""
    return "same" if mode == "same" else "different"


def raise_mismatch(mode: str | tuple, answers: list[tuple[str | None, str | None]], obs: Space, act: Space) -> None:
    """Raises Gymnasium's ``RuntimeError`` for the first env whose spaces the workers found
    different from the pool's (``answers``: per env, its observation and action space as
    printed when they differ, else None; ``obs``, ``act``: the pool's single spaces)."""
    which = "the given single_observation_space" if isinstance(mode, tuple) else "env 0"
    for i, (bad_obs, _) in enumerate(answers):
        if bad_obs is not None:
            message = SAME_MESSAGE if mode == "same" else DIFFERENT_MESSAGE
            raise RuntimeError(message.format(detail=f"Env {i} has {bad_obs}, {which} has {obs}."))
    for i, (_, bad_act) in enumerate(answers):
        if bad_act is not None:
            raise RuntimeError(ACTION_MESSAGE.format(space=act, detail=f"Env {i} has {bad_act}."))


_SPEC_MISMATCH = re.compile(r"worker 0 reports (\{.*\}), worker (\d+) reports (\{.*\}); an env's spaces")


def spec_mismatch(error: Exception, mode: str | tuple, num_envs: int, num_workers: int) -> RuntimeError | None:
    """The ``RuntimeError`` for the engine's "workers disagree on the env spec" (two
    workers' first envs have different spaces), naming both envs and their spaces; None
    for any other error."""
    from shmenv._shmenv import shard
    from shmenv.spaces.convert import observation_space, space_from_json

    found = _SPEC_MISMATCH.search(str(error))
    if found is None:
        return None
    first, worker, other = json.loads(found.group(1)), int(found.group(2)), json.loads(found.group(3))
    env = shard(worker, num_envs, num_workers)[0]
    if first["observations"] != other["observations"]:
        a, b = (observation_space(s)[0] for s in (first, other))
        message = SAME_MESSAGE if mode == "same" else DIFFERENT_MESSAGE
        return RuntimeError(message.format(detail=f"Env {env} has {b}, env 0 has {a}."))
    a, b = (space_from_json(s["action"]) for s in (first, other))
    return RuntimeError(ACTION_MESSAGE.format(space=a, detail=f"Env {env} has {b}."))


def batched_observation_space(mode: str | tuple, obs: list[Space]) -> tuple[Space, Space] | None:
    """``(observation_space, single_observation_space)`` for ``"different"`` and a given
    tuple; None for ``"same"`` (the pool's own)."""
    if mode == "same":
        return None
    if isinstance(mode, tuple):
        return mode
    from gymnasium.vector.utils import batch_differing_spaces

    return batch_differing_spaces(obs), obs[0]
