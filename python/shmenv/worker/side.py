"""The side leaves of a host's envs (a worker's, or a trainer shard's) (see :mod:`shmenv.spaces.composite`): values of
observation and action spaces that cannot be rows of shared memory (``Text``,
``Sequence``, ``Graph``, custom spaces), kept here per env and passed over the call side
channel, pickled.

- Observations: the env's flattener (:meth:`shmenv.worker.EnvHost.obs_flattener`) notes the side
  values of every observation it flattens. The trainer fetches them (op ``"side_obs"``)
  after it received the env's row, before the env can step again (it has no action yet),
  so nothing here races. The observation before the latest is kept, and sent, only when
  it was noted since the last fetch too: that is the step's (final) observation under
  same-step autoreset, followed by the reset's within one step, which the trainer puts in
  ``infos["final_obs"]``. Next-step and disabled autoreset note one observation per step,
  so only the latest is kept and pickled (a large ``Text`` or ``Sequence`` once, not twice).
- Actions: the trainer sends each env's side values (op ``"side_actions"``) before the
  step command that carries the rest of the action; the env's action unpacker takes them.
"""

from __future__ import annotations

from typing import Any


class SideValues:
    """The side values of one host's envs: a worker's (:data:`WORKER`), or those of a
    trainer's shard of one pool (:mod:`shmenv.worker.in_trainer`)."""

    def __init__(self) -> None:
        # Per env: its latest observation's side values, the ones noted before them since the
        # trainer's last fetch (None when none were), and whether the trainer fetched the latest.
        self._obs: dict[int, tuple[list, list | None, bool]] = {}
        self._actions: dict[int, list] = {}

    def note_obs(self, local: int, values: list) -> None:
        """Env ``local`` returned an observation whose side leaves are ``values``."""
        current = self._obs.get(local)
        before = current[0] if current is not None and not current[2] else None
        self._obs[local] = (values, before, False)

    def obs(self, local: int) -> tuple[list | None, list | None]:
        """Env ``local``'s side values for the trainer: its latest observation's, and the
        ones before them when both were noted since the last fetch (a final observation
        under same-step autoreset), else None. The one before is forgotten once fetched."""
        current = self._obs.get(local)
        if current is None:
            return None, None
        self._obs[local] = (current[0], None, True)
        return current[0], current[1]

    def give_actions(self, local: int, values: list) -> None:
        """The side values of env ``local``'s next action."""
        self._actions[local] = values

    def take_actions(self, local: int) -> list | None:
        """The side values of env ``local``'s action, forgotten once taken."""
        return self._actions.pop(local, None)

    def unpacker(self, unpack: Any, local: int):
        """The action unpacker of env ``local``: its byte row and its side values."""

        def unpack_action(row):
            return unpack(row, self.take_actions(local))

        return unpack_action

    def flattener(self, flatten: Any, side: list[int], fixed: list[int], local: int, placeholder: list):
        """The observation flattener of env ``local``: of the leaf values ``flatten`` gives,
        notes those at ``side`` and returns those at ``fixed`` (``placeholder`` when there
        are none)."""

        def flatten_obs(obs):
            values = flatten(obs)
            self.note_obs(local, [values[i] for i in side])
            return [values[i] for i in fixed] if fixed else placeholder

        return flatten_obs


WORKER = SideValues()
"""This worker process's side values (the call channel's thread serves them)."""


def obs(local: int) -> tuple[list | None, list | None]:
    """:meth:`SideValues.obs` of this worker's envs."""
    return WORKER.obs(local)


def give_actions(local: int, values: list) -> None:
    """:meth:`SideValues.give_actions` of this worker's envs."""
    WORKER.give_actions(local, values)
