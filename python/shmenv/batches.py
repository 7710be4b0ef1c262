"""The general path of :class:`shmenv.ShmVectorEnv`'s batches, between the engine and
Gymnasium: a caller's actions made into the engine's action array (side leaves sent to
their workers first), and the pool's results made into Gymnasium's ``(obs, rewards,
terminations, truncations, infos)``, with final observations, native info arrays and the
infos hosted envs returned (through the shared info area of :mod:`shmenv.infos` and the
call channel).

Pools whose batches need nothing from Python take the extension's one-call path instead
and never reach this module.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Sequence

import numpy as np

from shmenv.channel import protocol as ops
from shmenv.channel.trainer import CallChannel
from shmenv.errors import WorkerDiedError
from shmenv.infos import InfoArea
from shmenv.spaces.assembly import Assembly

__all__ = ["Batches", "start_infos", "weak_close"]


def weak_close(env: Any) -> Callable[[], None]:
    """``env.close``, for :class:`Batches` to call, without keeping ``env`` alive (a pool
    dropped by its caller closes at once, not at the next garbage collection)."""
    ref = weakref.ref(env)

    def close() -> None:
        target = ref()
        if target is not None:
            target.close()

    return close


def start_infos(pool: Any, shards: Sequence[tuple[int, int]], calls: CallChannel | None) -> InfoArea | None:
    """Hosted Python envs (``calls`` not None): the shared area through which their workers
    pass infos, made and sent to every worker; None for native envs."""
    if calls is None:
        return None
    area = InfoArea(pool, shards)
    fd = area.fd
    assert fd is not None, "a new info area holds its file descriptor until it is closed"
    try:
        calls.share_fd(ops.MAP_INFOS, fd, area.data())
    except BaseException:
        area.close()
        raise
    area.close_fd()
    return area


class Batches:
    """One pool's conversions between Gymnasium's batches and the engine's: ``pool`` (the
    extension's), its ``assembly`` of spaces, its call channel ``calls`` and info area
    ``infos`` (None for native envs), each worker's envs ``shards``, whether autoreset is
    same-step, and ``close_pool``, which closes the vector env when a worker died with this
    batch's infos (it is called with no arguments, and holds no reference to the env)."""

    def __init__(
        self,
        pool: Any,
        assembly: Assembly,
        calls: CallChannel | None,
        infos: InfoArea | None,
        shards: Sequence[tuple[int, int]],
        same_step: bool,
        close_pool: Callable[[], None],
    ):
        self.pool = pool
        self.assembly = assembly
        self.calls = calls
        self.infos = infos
        self.shards = shards
        self.same_step = same_step
        self.close_pool = close_pool

    def unpack(self, res: Any, pool_infos: bool, stats_key: str) -> tuple:
        """Gymnasium's tuple of the pool's results ``res``: observations assembled, infos with
        ``env_id``/``elapsed_step`` when ``pool_infos``, episode statistics under
        ``stats_key``, final observations and infos, and what the hosted envs returned."""
        assembly = self.assembly
        side = self._side_obs(res) if assembly.side_obs else None
        obs = assembly.observations(res.obs, None if side is None else [c for c, _ in side])
        infos = res.infos(pool_infos, stats_key)
        if res.any_done and res.final_obs is not None:
            done = np.logical_or(res.terminated, res.truncated)
            final = np.full(len(done), None, dtype=object)
            for i in np.flatnonzero(done).tolist():
                final[i] = assembly.final_observation(res.final_obs, i, None if side is None else side[i][1])
            infos["final_obs"] = final
            infos["_final_obs"] = done
            infos["final_info"] = self._info_columns(res.final_obs, done)
            infos["_final_info"] = done.copy()
        if assembly.info_names:  # most envs have none: nothing to do per batch
            infos.update(self._info_columns(res.obs, None))
        if self.infos is not None:
            self.merge_infos(res, infos)
        return obs, res.rewards, res.terminated, res.truncated, infos

    def _side_obs(self, res: Any) -> list[tuple[list, list]]:
        """Each row's side-leaf values (its observation's, and the one before: a final
        observation's under same-step autoreset), fetched from the workers."""
        return self._side_channel().request(self.shards, res.env_id.tolist(), ops.SIDE_OBS, "")

    def actions(self, actions: Any, env_ids: Any, num_envs: int) -> np.ndarray:
        """The engine's action array for ``env_ids`` (all ``num_envs`` envs if None); the
        side leaves' values go to their workers first, over the call channel."""
        count = num_envs if env_ids is None else len(env_ids)
        packed = self.assembly.actions(actions, count)
        packing = self.assembly.packing
        if packing is not None and packing.side:
            ids = list(range(num_envs)) if env_ids is None else [int(i) for i in env_ids]
            values = packing.side_values(actions, count)
            self._side_channel().request(self.shards, ids, ops.SIDE_ACTIONS, "", values=values)
        return packed

    def _side_channel(self) -> CallChannel:
        """The call channel, for side leaves: only hosted Python envs have them, and theirs."""
        assert self.calls is not None, "side leaves are hosted Python envs', which have a call channel"
        return self.calls

    def _info_columns(self, arrays: tuple, rows: np.ndarray | None) -> dict[str, Any]:
        """The arrays a native env reports as infos (spec ``info``: Atari's lives), with
        their ``_name`` masks: every row, or ``rows`` (a final step's values)."""
        out: dict[str, Any] = {}
        # Every array is the caller's: its own mask each, and a copy of a view of the
        # region (``copy=False`` pools' observation arrays, the info ones among them).
        for name, values in self.assembly.info_arrays(arrays).items():
            if rows is None:
                kept = values if values.flags.writeable else values.copy()
                mask = np.ones(len(values), np.bool_)
            else:
                kept, mask = np.where(rows.reshape(-1, *[1] * (values.ndim - 1)), values, 0), rows.copy()
            out[name], out["_" + name] = kept, mask
        return out

    def merge_infos(self, res: Any, infos: dict[str, Any]) -> None:
        """Adds the infos hosted envs returned for this batch's rows: one call of the
        extension, which adds the numbers (``shmenv.infos``), and for the rows whose envs
        kept other values, a fetch over the call channel."""
        area = self.infos
        assert area is not None, "infos are merged for hosted Python envs only, which have an info area"
        taken = self.pool.take_infos(infos)
        if taken is not None:
            try:
                area.add_kept(infos, taken, res, self.calls, self.shards, self.same_step)
            except WorkerDiedError as e:
                # The worker died while it sent this batch's infos: the batch raises, and
                # without a restart policy the pool is closed, as after a death in a step.
                if e.worker is not None:
                    e.env_ids = list(range(*self.shards[e.worker]))
                self.close_pool()
                raise
