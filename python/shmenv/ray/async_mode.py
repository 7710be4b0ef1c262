"""Async mode of :class:`shmenv.ray.RayVectorEnv`: which env is where, which actor batches
are awaited, and how a batch of ``batch_size`` rows is made of the actor batches that are
ready first.

Each env is in one of three places: with its actor (an action sent, its result not back
yet: ``_at_actor``), in the driver's buffer (its row arrived, not yet returned by
``recv``: ``_buffered``), or with the trainer (returned, no action sent). An actor pool of
``n`` envs is async with batches of ``b = batch_size / num_actors`` rows; the driver asks
an actor for a batch (``recv``) only when it has ``b`` envs with results not yet asked
for, so an actor never waits for an action that the driver has not sent."""

from __future__ import annotations

from typing import Any

import numpy as np

from shmenv.errors import UsageError
from shmenv.ray.channel import wait
from shmenv.ray.host import concat_batches, take_rows


class AsyncBatches:
    """The async bookkeeping of :class:`shmenv.ray.RayVectorEnv` (a mixin)."""

    def _clear_async_state(self) -> None:
        n = self.num_envs
        self._at_actor = np.zeros(n, dtype=bool)
        self._buffered = np.zeros(n, dtype=bool)
        self._stash_next = np.zeros(n, dtype=bool)  # its next row is for the stash: the trainer holds it
        self._restart_mark = np.zeros(n, dtype=bool)  # its next row from its actor follows a restart
        self._at_count = [0] * len(self._actors)
        self._pending: dict[Any, int] = {}  # replies due (actor batches of recv or reset) -> actor
        self._pending_count = [0] * len(self._actors)
        self._buffer: list[tuple] = []  # batches (or parts of batches) in arrival order
        self._stash: dict[int, tuple] = {}  # env -> its reset row after a restart, until it is sent

    def _start_reset(self, seeds: list | None) -> None:
        """Resets every actor's pool: each returns its first batch, the rest follow."""
        for channel in self._channels:
            channel.drain()  # the batches asked for before the reset are dropped
        self._clear_async_state()
        for k, (lo, hi) in enumerate(self._shards):
            part_seed = None if seeds is None else seeds[lo:hi]
            self._pending[self._channels[k].request("reset", {"seed": part_seed})] = k
            self._pending_count[k] = 1
            self._at_count[k] = hi - lo
        self._at_actor[:] = True
        self._has_reset = True
        self._issue_recvs()

    def _issue_recvs(self) -> None:
        """Asks each actor for as many batches as its envs at work can fill."""
        b = self._actor_batch
        for k, channel in enumerate(self._channels):
            while self._at_count[k] - self._pending_count[k] * b >= b:
                self._pending[channel.request("recv")] = k
                self._pending_count[k] += 1

    def _file_ready(self, wanted: int) -> None:
        """Waits for at least ``wanted`` of the awaited actor batches and files every one
        that is ready."""
        for ref in wait(list(self._pending), num_returns=wanted):
            k = self._pending.pop(ref, None)
            if k is None:
                continue  # a reply of an actor that died and was revived meanwhile
            self._pending_count[k] -= 1
            batch = self._gather([ref], [k], self._revive_async)[0]
            if batch is not None:
                self._arrive(k, batch)

    def _await_restart_rows(self, ids: np.ndarray) -> None:
        """Envs of ``ids`` the trainer held when their actor was recreated: their reset rows
        (which stand for the result of the action being sent) are filed before the send."""
        while (self._stash_next[ids] & ~self._buffered[ids]).any() and self._pending:
            self._file_ready(1)

    def _arrive(self, k: int, batch: tuple) -> None:
        """Files an actor batch: rows of envs the trainer holds (after a restart) go to the
        stash, the others to the buffer; rows that follow a restart are marked."""
        if len(batch) == 2:  # an async pool's reset: its first batch, (obs, infos)
            n = len(batch[1]["env_id"])
            batch = (batch[0], np.zeros(n, np.float32), np.zeros(n, np.bool_), np.zeros(n, np.bool_), batch[1])
        ids = np.asarray(batch[4]["env_id"], dtype=np.int64)
        self._at_actor[ids] = False
        self._at_count[k] -= len(ids)
        marked = self._restart_mark[ids]
        if marked.any():
            batch = _mark_restarted(batch, marked, ids)
            self._restart_mark[ids] = False
        stash = self._stash_next[ids]
        if stash.any():
            for r in np.flatnonzero(stash).tolist():
                self._stash[int(ids[r])] = take_rows(batch, np.array([r]))
            self._stash_next[ids] = False
            batch = take_rows(batch, np.flatnonzero(~stash))
        if len(batch[1]):
            self._buffer.append(batch)
            self._buffered[batch[4]["env_id"]] = True

    def _buffered_rows(self) -> int:
        return sum(len(b[1]) for b in self._buffer)

    def _take(self, rows: int) -> tuple:
        """The first ``rows`` buffered rows as one batch."""
        parts, have = [], 0
        while have < rows:
            batch = self._buffer.pop(0)
            n = len(batch[1])
            if have + n > rows:
                keep = rows - have
                self._buffer.insert(0, take_rows(batch, np.arange(keep, n)))
                batch = take_rows(batch, np.arange(keep))
                n = keep
            parts.append(batch)
            have += n
        out = parts[0] if len(parts) == 1 and not self.copy else concat_batches(parts)
        self._buffered[out[4]["env_id"]] = False
        return out

    def _cannot_fill(self) -> None:
        in_flight = int(self._at_actor.sum()) + self._buffered_rows()
        if in_flight < self.batch_size:
            raise UsageError(
                f"recv() needs at least batch_size = {self.batch_size} envs in flight, but {in_flight} are: "
                "send() more actions first"
            )
        counts = {k: c for k, c in enumerate(self._at_count) if c}
        raise UsageError(
            f"recv() cannot fill a batch of {self.batch_size}: each actor returns batches of {self._actor_batch} rows "
            f"and the actors have {counts} envs at work. Send actions for every env "
            "recv() returned (the EnvPool loop), so that every actor can fill its batches"
        )

    def _revive_async(self, k: int, death: Exception) -> None:
        """Async mode: Ray recreated actor ``k``. Its envs come back from a seeded reset,
        each marked restarted: those the trainer was waiting for through ``recv``, the
        others (held by the trainer, or buffered) when it next sends them an action."""
        self._revive(k, death)
        lo, hi = self._shards[k]
        for ref in [r for r, owner in self._pending.items() if owner == k]:
            del self._pending[ref]
        self._stash_next[lo:hi] = ~self._at_actor[lo:hi]
        self._at_actor[lo:hi] = True
        self._restart_mark[lo:hi] = True
        self._at_count[k] = hi - lo
        self._pending[self._channels[k].request("reset", {"seed": self._restart_seed(k)})] = k
        self._pending_count[k] = 1
        self._issue_recvs()
        return None


def _mark_restarted(batch: tuple, marked: np.ndarray, ids: np.ndarray) -> tuple:
    """The batch with its ``marked`` rows truncated and listed in ``restarted_envs``."""
    obs, rewards, terms, truncs, infos = batch
    truncs = truncs | marked
    terms = terms & ~marked
    infos = dict(infos, restarted_envs=list(infos.get("restarted_envs", [])) + ids[marked].tolist())
    return obs, rewards, terms, truncs, infos
