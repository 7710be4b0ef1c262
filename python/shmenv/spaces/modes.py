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
    printed when they differ, else None; ``obs``, ``act``: the pool's single spaces).

    Env 0's own space is compared with its copy from the trainer, so when env 0 differs the
    space does not equal a copy of itself: the message then names env 0 and the next env
    that differs, and says when a space class lacks ``__eq__`` (its instances compare by
    identity, so no two envs' spaces can be equal) and what to do."""
    given = isinstance(mode, tuple)
    which = "the given single_observation_space" if given else "env 0"
    bad = [i for i, (o, _) in enumerate(answers) if o is not None]
    if bad:
        i, printed = _pair(bad, answers, 0, given)
        message = SAME_MESSAGE if mode == "same" else DIFFERENT_MESSAGE
        if i == 0 and not given:
            detail = f"Env 0 has {answers[0][0]}, which does not equal a copy of itself."
        else:
            detail = f"Env {i} has {answers[i][0]}, {which} has {printed or obs}."
        theirs = answers[i][0]
        assert theirs is not None, "_pair names an env of bad, whose observation space differs"
        hint, cause = _unequal_hint(obs, theirs, bad[0] == 0 and not given, "observation")
        if cause:  # not two spaces meant to differ: observation_mode='different' is no answer
            message = message.split(" If this is intentional")[0]
        raise RuntimeError(message.format(detail=detail + hint))
    bad = [i for i, (_, a) in enumerate(answers) if a is not None]
    if bad:
        i, _ = _pair(bad, answers, 1, False)
        theirs = answers[i][1]
        assert theirs is not None, "_pair names an env of bad, whose action space differs"
        hint, _ = _unequal_hint(act, theirs, bad[0] == 0, "action")
        raise RuntimeError(ACTION_MESSAGE.format(space=act, detail=f"Env {i} has {answers[i][1]}." + hint))


def _pair(bad: list[int], answers: list, k: int, given: bool) -> tuple[int, str | None]:
    """The env to name: the first that differs, but when that is env 0 (whose space then
    does not equal its own copy), the next that differs, if any, so that the message names
    two envs; and what env 0 has as printed, when the other is named."""
    if bad[0] != 0 or given or len(bad) < 2:
        return bad[0], None
    return bad[1], answers[0][k]


def _unequal_hint(space: Space, printed: str, self_unequal: bool, what: str) -> tuple[str, bool]:
    """Why ``space`` (the pool's) and an env's (``printed``) may be unequal when that is not
    plain, and whether that is the cause (no real difference): a space class without
    ``__eq__``, or env 0's space unequal to its own copy (``self_unequal``)."""
    missing = sorted({type(s).__qualname__ for s in _parts(space) if type(s).__eq__ is object.__eq__})
    if missing:
        names = ", ".join(missing)
        alike = printed == repr(space)
        text = (
            f" {'The spaces differ only because' if alike else 'They cannot be equal:'} {names} "
            f"{'does' if len(missing) == 1 else 'do'} not define __eq__, so its instances compare by identity and "
            f"no two envs' {what} spaces (nor a space and its copy) are ever equal (AsyncVectorEnv refuses them "
            f"too). Define __eq__ on {names} to compare what defines the space (as Gymnasium's own "
            "spaces do)."
        )
        return text, alike
    cls = type(space).__qualname__
    if self_unequal:
        text = (
            f" Env 0's {what} space does not equal its own copy (pickled to the trainer and back): {cls}.__eq__ "
            "must return True for an equal copy (compare what defines the space, not its identity or random "
            "generator)."
        )
        return text, True
    if printed == repr(space):
        return f" The two print alike: {cls}.__eq__ tells them apart by something not printed.", False
    return "", False


def _parts(space: Space):
    """``space`` and every space inside it (Dict, Tuple, OneOf, Sequence, Graph)."""
    from gymnasium import spaces

    yield space
    if isinstance(space, spaces.Dict):
        inner = list(space.spaces.values())
    elif isinstance(space, (spaces.Tuple, spaces.OneOf)):
        inner = list(space.spaces)
    elif isinstance(space, spaces.Sequence):
        inner = [space.feature_space]
    elif isinstance(space, spaces.Graph):
        inner = [s for s in (space.node_space, space.edge_space) if s is not None]
    else:
        inner = []
    for part in inner:
        yield from _parts(part)


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
