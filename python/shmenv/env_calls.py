"""The start-up and reset steps of :class:`shmenv.ShmVectorEnv` that run on the envs'
Python objects in their workers, over the call side channel (:mod:`shmenv.channel`), written as
plain functions of the env's ``env_call`` (a function ``(op, name, env_ids, values=None)``
that answers in env order): env 0's metadata and spaces, every env's spaces checked as
``AsyncVectorEnv`` checks them, and the options of a reset. The call API itself (``call``,
``get_attr``, ``set_attr``, ``call_async``/``call_wait``) is the vector env's. Native (Rust,
C) envs have no Python object: they answer :data:`NATIVE_ATTRS` only."""

from __future__ import annotations

from typing import Any, Callable

from shmenv.channel import protocol as ops
from shmenv.errors import InvalidArgumentError, WorkerError
from shmenv.spaces import modes

__all__ = ["NATIVE_ATTRS", "EnvCall", "env0_attrs", "checked_spaces", "reset_option_targets"]

NATIVE_ATTRS = ("render_mode", "spec", "metadata", "observation_space", "action_space")
"""Attributes a native (Rust) env answers through ``get_attr``/``call``: it has no Python object."""

EnvCall = Callable[..., list]
"""``env_call(op, name, env_ids, values=None)``: runs ``op`` on envs ``env_ids``, answers in order."""


def env0_attrs(env_call: EnvCall) -> dict:
    """Env 0's ``metadata``, ``render_mode`` and ``spaces`` (its observation and action
    spaces, which say whether they nest; None when they cannot be pickled)."""
    metadata = env_call(ops.GET, "metadata", [0])[0]
    try:
        render_mode = env_call(ops.GET, "render_mode", [0])[0]
    except WorkerError:
        render_mode = None  # an env without the attribute (not a gym.Env) does not render
    try:
        env_spaces = tuple(env_call(ops.GET, name, [0])[0] for name in ("observation_space", "action_space"))
    except WorkerError:
        env_spaces = None  # unpicklable spaces: the spec's (composite spaces need them picklable)
    metadata = metadata if isinstance(metadata, dict) else {}
    return {"metadata": metadata, "render_mode": render_mode, "spaces": env_spaces}


def checked_spaces(env_call: EnvCall, num_envs: int, mode: str | tuple, env_spaces: tuple | None) -> tuple | None:
    """As ``AsyncVectorEnv`` at start-up: every env's spaces checked in its worker against
    the pool's (env 0's ``env_spaces``, or the single space of a given ``observation_mode``
    tuple); a mismatch raises Gymnasium's ``RuntimeError`` naming both envs. With
    ``"different"`` or a tuple, returns ``(batched observation space, single observation
    space)`` as Gymnasium makes them; else None."""
    envs = range(num_envs)
    if env_spaces is None:  # unpicklable spaces: the workers' own comparison of their spec
        if any(env_call(ops.MISMATCHED, "", envs)):
            raise RuntimeError(modes.SAME_MESSAGE.format(detail="(the spaces cannot be pickled to say more)"))
        return None
    single = mode[1] if isinstance(mode, tuple) else env_spaces[0]
    kind = "same" if mode == "same" else "different"
    answers = env_call(ops.CHECK_SPACES, "", envs, [(kind, single, env_spaces[1])] * num_envs)
    modes.raise_mismatch(mode, answers, single, env_spaces[1])
    return modes.batched_observation_space(mode, list(env_call(ops.GET, "observation_space", envs)))


def reset_option_targets(env_id: str, hosted: bool, options: dict, mask: list[bool] | None, num_envs: int) -> list[int]:
    """The envs a reset with ``options`` for the envs' own ``reset`` resets (each takes
    them at that reset, as ``SyncVectorEnv`` passes them to ``env.reset``); native envs
    (not ``hosted``) take none."""
    if not hosted:
        raise InvalidArgumentError(
            f"{env_id} is a native shmenv env: its reset takes no options (got {sorted(options)}); "
            "pass settings through config=..."
        )
    return [i for i in range(num_envs) if mask is None or mask[i]]


def native_attr(name: str, spec: Any, observation_space: Any, action_space: Any) -> Any:
    """A native env's answer for attribute ``name`` (one of :data:`NATIVE_ATTRS`)."""
    return {
        "render_mode": None,
        "spec": spec,
        "metadata": {"render_modes": []},
        "observation_space": observation_space,
        "action_space": action_space,
    }[name]
