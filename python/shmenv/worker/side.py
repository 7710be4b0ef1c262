"""The side leaves of this worker's envs (see :mod:`shmenv.spaces.composite`): values of
observation and action spaces that cannot be rows of shared memory (``Text``,
``Sequence``, ``Graph``, custom spaces), kept here per env and passed over the call side
channel, pickled.

- Observations: the env's flattener (:func:`shmenv.worker.obs_flattener`) notes the side
  values of every observation it flattens, keeping the one before too: under same-step
  autoreset the step's (final) observation is followed by the reset's within one step.
  The trainer fetches them (op ``"side_obs"``) after it received the env's row, before
  the env can step again (it has no action yet), so nothing here races.
- Actions: the trainer sends each env's side values (op ``"side_actions"``) before the
  step command that carries the rest of the action; the env's action unpacker takes them.
"""

from __future__ import annotations

from typing import Any

_OBS: dict[int, tuple[list | None, list | None]] = {}
_ACTIONS: dict[int, list] = {}


def note_obs(local: int, values: list) -> None:
    """Env ``local`` returned an observation whose side leaves are ``values``."""
    current = _OBS.get(local)
    _OBS[local] = (values, None if current is None else current[0])


def obs(local: int) -> tuple[list | None, list | None]:
    """Env ``local``'s side values: its latest observation's and the one before."""
    return _OBS.get(local, (None, None))


def give_actions(local: int, values: list) -> None:
    """The side values of env ``local``'s next action."""
    _ACTIONS[local] = values


def take_actions(local: int) -> list | None:
    """The side values of env ``local``'s action, forgotten once taken."""
    return _ACTIONS.pop(local, None)


def unpacker(unpack: Any, local: int):
    """The action unpacker of env ``local``: its byte row and its side values."""

    def unpack_action(row):
        return unpack(row, take_actions(local))

    return unpack_action


def flattener(flatten: Any, side: list[int], fixed: list[int], local: int, placeholder: list):
    """The observation flattener of env ``local``: of the leaf values ``flatten`` gives,
    notes those at ``side`` and returns those at ``fixed`` (``placeholder`` when there are
    none)."""

    def flatten_obs(obs):
        values = flatten(obs)
        note_obs(local, [values[i] for i in side])
        return [values[i] for i in fixed] if fixed else placeholder

    return flatten_obs
