"""Async mode of :class:`shmenv.ray.RayVectorEnv`: which env is where, which actor batches
are awaited, and how a batch of ``batch_size`` rows is made of the actor batches that are
ready first.

Each env is in one of three places: with its actor (an action sent, its result not back
yet: ``at_actor``), in the driver's buffer (its row arrived, not yet returned by
``recv``: ``buffered``), or with the trainer (returned, no action sent). An actor pool of
``n`` envs is async with batches of ``b = batch_size / num_actors`` rows; the driver asks
an actor for a batch (``recv``) only when it has ``b`` envs with results not yet asked
for, so an actor never waits for an action that the driver has not sent."""

from __future__ import annotations

import numpy as np

from shmenv.errors import UsageError
from shmenv.ray.channel import Reply, wait
from shmenv.ray.faults import Actors
from shmenv.ray.host import concat_batches, take_rows

__all__ = ["AsyncBatches"]


class AsyncBatches:
    """The async bookkeeping of one :class:`shmenv.ray.RayVectorEnv` of ``num_envs`` envs
    over ``actors``: batches of ``batch_size`` rows joined from actor batches of
    ``actor_batch`` rows, copied into new arrays unless ``copy`` is False and a batch is
    one actor batch. A dead actor found on the way is recreated through ``actors``
    (:meth:`revive`)."""

    def __init__(self, actors: Actors, num_envs: int, batch_size: int, actor_batch: int, copy: bool):
        self.actors = actors
        self.num_envs = num_envs
        self.batch_size = batch_size
        self.actor_batch = actor_batch
        self.copy = copy
        self.owner = np.repeat(np.arange(len(actors)), [b - a for a, b in actors.shards])
        self.clear()

    def clear(self) -> None:
        """Forgets every env's place: as before the first reset."""
        n = self.num_envs
        self.at_actor = np.zeros(n, dtype=bool)
        self.buffered = np.zeros(n, dtype=bool)
        self.stash_next = np.zeros(n, dtype=bool)  # its next row is for the stash: the trainer holds it
        self.restart_mark = np.zeros(n, dtype=bool)  # its next row from its actor follows a restart
        self.at_count = [0] * len(self.actors)
        self.pending: dict[Reply, int] = {}  # replies due (actor batches of recv or reset) -> actor
        self.pending_count = [0] * len(self.actors)
        self.buffer: list[tuple] = []  # batches (or parts of batches) in arrival order
        self.stash: dict[int, tuple] = {}  # env -> its reset row after a restart, until it is sent

    def start_reset(self, seeds: list | None) -> None:
        """Resets every actor's pool: each returns its first batch, the rest follow."""
        channels = self.actors.channels
        for channel in channels:
            channel.drain()  # the batches asked for before the reset are dropped
        self.clear()
        for k, (lo, hi) in enumerate(self.actors.shards):
            part_seed = None if seeds is None else seeds[lo:hi]
            self._expect(k, channels[k].request("reset", {"seed": part_seed}))
            self.pending_count[k] = 1
            self.at_count[k] = hi - lo
        self.at_actor[:] = True
        self._issue_recvs()

    def send(self, batch: np.ndarray, ids: np.ndarray) -> None:
        """Hands ``batch[i]`` to env ``ids[i]``'s actor (each env named once, none with an
        action in flight)."""
        self._await_restart_rows(ids)
        busy = self.at_actor[ids] | self.buffered[ids]
        if busy.any() or len(np.unique(ids)) != len(ids):
            env = int(ids[np.flatnonzero(busy)[0]]) if busy.any() else int(ids[0])
            raise UsageError(
                f"env {env} already has an action in flight (or is named twice): recv() its result before sending it another"
            )
        stashed = np.array([int(i) in self.stash for i in ids], dtype=bool)
        for i in ids[stashed].tolist():  # restarted while the trainer held it: its reset row is ready
            self.buffer.append(self.stash.pop(i))
            self.buffered[i] = True
        owners = self.owner[ids]
        for k in np.unique(owners[~stashed]).tolist():
            sel = (owners == k) & ~stashed
            self.actors.channels[k].request("send", (batch[sel], ids[sel]))
            self.at_actor[ids[sel]] = True
            self.at_count[k] += int(sel.sum())
        self._issue_recvs()

    def recv(self) -> tuple:
        """The next ``batch_size`` rows, from the actor batches ready first."""
        while self._buffered_rows() < self.batch_size:
            if not self.pending:
                self._cannot_fill()
            self._file_ready(-(-(self.batch_size - self._buffered_rows()) // self.actor_batch))
        return self._take(self.batch_size)

    def revive(self, k: int, death: Exception) -> None:
        """Ray recreated actor ``k``. Its envs come back from a seeded reset, each marked
        restarted: those the trainer was waiting for through ``recv``, the others (held by
        the trainer, or buffered) when it next sends them an action."""
        self.actors.revive(k, death)
        lo, hi = self.actors.shards[k]
        for ref in [r for r, owner in self.pending.items() if owner == k]:
            del self.pending[ref]
        self.stash_next[lo:hi] = ~self.at_actor[lo:hi]
        self.at_actor[lo:hi] = True
        self.restart_mark[lo:hi] = True
        self.at_count[k] = hi - lo
        self._expect(k, self.actors.channels[k].request("reset", {"seed": self.actors.restart_seed(k)}))
        self.pending_count[k] = 1
        self._issue_recvs()

    def _expect(self, k: int, reply: Reply | None) -> None:
        assert reply is not None, "reset and recv requests are answered: each has a Reply"
        self.pending[reply] = k

    def _issue_recvs(self) -> None:
        """Asks each actor for as many batches as its envs at work can fill."""
        b = self.actor_batch
        for k, channel in enumerate(self.actors.channels):
            while self.at_count[k] - self.pending_count[k] * b >= b:
                self._expect(k, channel.request("recv"))
                self.pending_count[k] += 1

    def _file_ready(self, wanted: int) -> None:
        """Waits for at least ``wanted`` of the awaited actor batches and files every one
        that is ready."""
        for ref in wait(list(self.pending), num_returns=wanted):
            k = self.pending.pop(ref, None)
            if k is None:
                continue  # a reply of an actor that died and was revived meanwhile
            self.pending_count[k] -= 1
            batch = self.actors.gather([ref], [k], self.revive)[0]
            if batch is not None:
                self._arrive(k, batch)

    def _await_restart_rows(self, ids: np.ndarray) -> None:
        """Envs of ``ids`` the trainer held when their actor was recreated: their reset rows
        (which stand for the result of the action being sent) are filed before the send."""
        while (self.stash_next[ids] & ~self.buffered[ids]).any() and self.pending:
            self._file_ready(1)

    def _arrive(self, k: int, batch: tuple) -> None:
        """Files an actor batch: rows of envs the trainer holds (after a restart) go to the
        stash, the others to the buffer; rows that follow a restart are marked."""
        if len(batch) == 2:  # an async pool's reset: its first batch, (obs, infos)
            n = len(batch[1]["env_id"])
            batch = (batch[0], np.zeros(n, np.float32), np.zeros(n, np.bool_), np.zeros(n, np.bool_), batch[1])
        ids = np.asarray(batch[4]["env_id"], dtype=np.int64)
        self.at_actor[ids] = False
        self.at_count[k] -= len(ids)
        marked = self.restart_mark[ids]
        if marked.any():
            batch = _mark_restarted(batch, marked, ids)
            self.restart_mark[ids] = False
        stash = self.stash_next[ids]
        if stash.any():
            for r in np.flatnonzero(stash).tolist():
                self.stash[int(ids[r])] = take_rows(batch, np.array([r]))
            self.stash_next[ids] = False
            batch = take_rows(batch, np.flatnonzero(~stash))
        if len(batch[1]):
            self.buffer.append(batch)
            self.buffered[batch[4]["env_id"]] = True

    def _buffered_rows(self) -> int:
        return sum(len(b[1]) for b in self.buffer)

    def _take(self, rows: int) -> tuple:
        """The first ``rows`` buffered rows as one batch."""
        parts, have = [], 0
        while have < rows:
            batch = self.buffer.pop(0)
            n = len(batch[1])
            if have + n > rows:
                keep = rows - have
                self.buffer.insert(0, take_rows(batch, np.arange(keep, n)))
                batch = take_rows(batch, np.arange(keep))
                n = keep
            parts.append(batch)
            have += n
        out = parts[0] if len(parts) == 1 and not self.copy else concat_batches(parts)
        self.buffered[out[4]["env_id"]] = False
        return out

    def _cannot_fill(self) -> None:
        in_flight = int(self.at_actor.sum()) + self._buffered_rows()
        if in_flight < self.batch_size:
            raise UsageError(
                f"recv() needs at least batch_size = {self.batch_size} envs in flight, but {in_flight} are: "
                "send() more actions first"
            )
        counts = {k: c for k, c in enumerate(self.at_count) if c}
        raise UsageError(
            f"recv() cannot fill a batch of {self.batch_size}: each actor returns batches of {self.actor_batch} rows "
            f"and the actors have {counts} envs at work. Send actions for every env "
            "recv() returned (the EnvPool loop), so that every actor can fill its batches"
        )


def _mark_restarted(batch: tuple, marked: np.ndarray, ids: np.ndarray) -> tuple:
    """The batch with its ``marked`` rows truncated and listed in ``restarted_envs``."""
    obs, rewards, terms, truncs, infos = batch
    truncs = truncs | marked
    terms = terms & ~marked
    infos = dict(infos, restarted_envs=list(infos.get("restarted_envs", [])) + ids[marked].tolist())
    return obs, rewards, terms, truncs, infos
