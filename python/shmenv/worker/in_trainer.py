"""Hosted Python envs the trainer steps itself (``make_vec(..., trainer_shard=True)``): the
first shard of a pool, built and stepped in the trainer's interpreter by the same
extension code (``PyEnv``) as a worker's envs, and answered in-process where a worker's
envs answer over the call channel (:mod:`shmenv.channel.trainer` routes their env ids
here). One :class:`TrainerEnvs` per pool (the extension makes it when it builds the pool:
``Pool.trainer_host``), so pools never share envs, reset options, infos or side values.

Calls run on the env objects themselves, as ``SyncVectorEnv``'s do: ``get_attr`` returns
the env's own object, not a pickled copy, and ``set_attr`` sets the value given.
"""

from __future__ import annotations

import traceback
from typing import Any, Sequence

from shmenv.channel import protocol as ops
from shmenv.worker import EnvHost

__all__ = ["TrainerEnvs"]


class TrainerEnvs(EnvHost):
    """The trainer's shard of one pool: envs ``0..len(envs)`` of the pool (local index =
    global index)."""

    def make_env(self, config_json: str, index: Any = None):
        """Builds the shard's next env from the pool's config: env ``len(envs)`` of the
        pool, whose factory it takes when there is one per env."""
        return super().make_env(config_json, lambda _config: len(self.envs))

    def answer(
        self, op: str, local: Sequence[int], name: str, values: Sequence[Any], args: tuple, kwargs: dict
    ) -> list[tuple[bool, Any]]:
        """A request of the call channel's protocol (:mod:`shmenv.channel.protocol`) for
        envs ``local``, answered as a worker's call thread answers it: one ``(ok, value
        or traceback)`` per env."""
        from shmenv.channel.worker import _run_one

        results: list[tuple[bool, Any]] = []
        for k, i in enumerate(local):
            if op == ops.INFOS:
                results.append((True, self.infos.take(i)))
            elif op == ops.RESET_OPTIONS:
                self.reset_options[i] = values[k]
                results.append((True, None))
            elif op == ops.UNSEEDED:
                self.unseeded.add(i)
                results.append((True, None))
            elif op == ops.SIDE_OBS:
                results.append((True, self.side.obs(i)))
            elif op == ops.SIDE_ACTIONS:
                self.side.give_actions(i, values[k])
                results.append((True, None))
            elif op == ops.MISMATCHED:
                results.append((True, i in self.mismatched))
            else:
                try:
                    results.append((True, _run_one(op, self.envs[i], name, values[k], args, kwargs)))
                except BaseException:  # noqa: BLE001 - reported to the caller with the traceback, as a worker's
                    results.append((False, traceback.format_exc()))
        return results
