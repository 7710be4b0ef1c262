"""Restarted workers (``max_restarts``) as :class:`shmenv.ShmVectorEnv` follows them: a
call into the envs that finds a worker dead has the pool restart it; after a batch in
which the pool restarted workers, the call channel takes the replacements' connections;
and the envs a restart cut short are reported in ``infos["restarted_envs"]``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from shmenv.channel.trainer import CallChannel
from shmenv.errors import UsageError
from shmenv.infos import InfoArea

__all__ = ["Restarts"]


class Restarts:
    """What one pool's restarts need: ``pool`` (the extension's), its call channel
    ``calls`` and info area ``infos`` (None for native envs), whether the pool restarts
    workers at all (``enabled``), its mode and size, and its action dtype (an async pool's
    empty ``send`` carries none). :attr:`by_calls` holds the envs restarted by calls since
    the last step (sync mode)."""

    def __init__(
        self,
        pool: Any,
        calls: CallChannel | None,
        infos: InfoArea | None,
        enabled: bool,
        is_async: bool,
        num_envs: int,
        action_dtype: Any,
    ):
        self.pool = pool
        self.calls = calls
        self.infos = infos
        self.enabled = enabled
        self.is_async = is_async
        self.num_envs = num_envs
        self.action_dtype = action_dtype
        self.by_calls: set[int] = set()

    @staticmethod
    def refuse_before_reset(workers: list[int]) -> UsageError:
        """The error of a call that found ``workers`` dead before the pool's first reset."""
        return UsageError(
            f"workers {workers} died before the pool's first reset, so calls cannot reach their envs yet: "
            "reset() starts their replacements (max_restarts); call reset() first, then call again"
        )

    def revive(self, workers: list[int]) -> None:
        """A call found ``workers`` dead (after the first reset): the pool restarts them now,
        through the same engine path as its next step would (and within the same budget:
        with none left this raises the step's :class:`~shmenv.WorkerDiedError` and the pool
        is closed). Async mode: an empty ``send``, after which the envs come back restarted
        in later batches, as after any death. Sync mode: a reset command that resets no env,
        in which only the replacements reset theirs (it counts as a reset for ``copy=False``
        views); the next ``step`` reports those envs, truncated, in
        ``infos["restarted_envs"]``."""
        before = list(self.pool.worker_pids)
        if self.is_async:
            dtype = self.action_dtype
            no_actions = np.zeros(0, np.uint8 if dtype == np.bool_ else dtype)
            self.pool.send(no_actions, np.zeros(0, np.int64))
        else:
            res = self.pool.reset(None, [False] * self.num_envs)
            self.by_calls.update(res.restarted_envs)
        if list(self.pool.worker_pids) == before:
            time.sleep(0.01)  # the pool has not seen the death yet (the process is not reaped)
            return
        if self.calls is not None:
            self.calls.refresh()
        if self.infos is not None:
            self.infos.forget_tables()

    def follow(self, res: Any) -> None:
        """After a worker restart, before this batch's infos are merged: the call channel
        takes the replacement's connection and sends it the info flag area, so its envs'
        infos (this batch's reset infos included) and calls reach the trainer. Never
        raises: a replacement that died meanwhile is left to the pool's next restart (the
        batch is returned all the same), and a connection still missing is taken later."""
        if self.enabled and self.calls is not None:
            restarted = bool(res.restarted_envs)
            if restarted or self.calls.pending:
                self.calls.refresh(wait=restarted)
                assert self.infos is not None, "hosted Python envs (a call channel) have an info area"
                self.infos.forget_tables()

    def note(self, res: Any, result: tuple) -> tuple:
        """Adds ``infos["restarted_envs"]`` to ``result`` (the Gymnasium tuple of the pool's
        results ``res``) when a worker was restarted, during this call or (sync mode) by a
        call into the envs since the last step: those envs' rows are marked truncated
        (their episodes were cut short)."""
        if self.enabled:
            restarted = res.restarted_envs
            if self.by_calls:
                by_calls = sorted(self.by_calls)
                self.by_calls.clear()
                result[3][by_calls] = True
                restarted = sorted(set(restarted).union(by_calls))
            if restarted:
                result[4]["restarted_envs"] = restarted
        return result

    def forget(self, mask: list[bool] | None) -> None:
        """A reset starts the envs it resets over: a restart by a call is news no more."""
        if mask is None:
            self.by_calls.clear()
        else:
            self.by_calls.difference_update(i for i in range(self.num_envs) if mask[i])
