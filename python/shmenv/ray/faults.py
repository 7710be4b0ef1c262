"""Faults of :class:`shmenv.ray.RayVectorEnv`'s actors: gathering results (a shmenv error
raised as it is, a dead actor told apart), finding out why a step connection ended, and
recreating a dead actor within its restart budget, so that its envs come back restarted
through the step path; or, with no budget left, :class:`~shmenv.errors.ActorDiedError`."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from shmenv.errors import ActorDiedError, BuildError, WorkerDiedError, WorkerError, WorkerTimeoutError
from shmenv.ray.channel import ChannelLost, Reply
from shmenv.ray.host import ActorRestarted
from shmenv.seeding import SEED_RANGE

RESTART_SEED_STRIDE = 2**32
"""The ``k``-th restart of an actor reseeds its env ``i`` with ``seed + i + k * 2**32``."""

_FATAL = (WorkerDiedError, WorkerError, WorkerTimeoutError, BuildError)


class ActorFaults:
    """Results and faults of :class:`shmenv.ray.RayVectorEnv` (a mixin)."""

    def _gather(self, refs: list, actors, on_death=None) -> list:
        """The results of one request per actor in ``actors`` (Ray ``ObjectRef`` s or step
        path :class:`~shmenv.ray.channel.Reply` s). A shmenv error is raised as it is
        (closing the env when it is fatal). A dead actor is handed to ``on_death(k,
        death)``, whose return value stands for its result; without one (calls into the
        envs) it raises :class:`ActorDiedError`."""
        out = []
        for ref, k in zip(refs, actors):
            try:
                out.append(self._get(ref))
                continue
            except (ActorRestarted, self._ray.exceptions.RayActorError) as e:
                death: Exception = e
            except ChannelLost as e:
                death = self._death(k, e)
            except WorkerDiedError:
                # A killed actor's workers may die (and be reported by it) just before it
                # does: then the actor's death is the cause.
                actor_death = self._actor_death(k)
                if actor_death is None:
                    self.close()
                    raise
                death = actor_death
            except _FATAL:
                self.close()
                raise
            if on_death is None:
                self._die(k, _reason(death), "")
            out.append(on_death(k, death))
        return out

    def _get(self, ref: Any) -> Any:
        """The value of a Ray call or a step-path reply; an exception the actor raised is
        raised here as itself."""
        if isinstance(ref, Reply):
            return ref.get()
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as e:
            cause = e.cause
        raise cause

    def _death(self, k: int, lost: ChannelLost) -> Exception:
        """Why actor ``k``'s step connection ended: Ray's account of the actor's death, or
        the lost connection when Ray has already recreated the actor."""
        try:
            described = self._ray.get(self._actors[k].describe.remote(), timeout=self._restart_timeout)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.RayTaskError) as e:
            return e
        except self._ray.exceptions.GetTimeoutError:
            return lost
        if described["pid"] != self._described[k]["pid"]:
            return ChannelLost(f"the actor process {self._described[k]['pid']} ended ({lost}); Ray recreated it")
        self._die(
            k,
            f"its step connection ended ({lost}) while the actor process lives",
            "check the network between the driver and the node",
        )

    def _actor_death(self, k: int, grace: float = 5.0) -> Exception | None:
        """Ray's account of actor ``k``'s death if it died (or was recreated) within
        ``grace`` seconds, else None (it lives: what it reported is its own)."""
        try:
            described = self._ray.get(self._actors[k].describe.remote(), timeout=grace)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.RayTaskError) as e:
            return e
        except self._ray.exceptions.GetTimeoutError:
            return None
        if described["pid"] != self._described[k]["pid"]:
            return ChannelLost(f"the actor process {self._described[k]['pid']} ended; Ray recreated it")
        return None

    def _revive(self, k: int, death: Exception) -> None:
        """Waits for Ray to recreate dead actor ``k``, within its restart budget."""
        if self._restarts[k] >= self._max_restarts:
            spent = "its restart budget is spent" if self._max_restarts else "pass max_restarts=n"
            self._die(
                k,
                _reason(death),
                f"{spent} to have Ray recreate it (its envs then come back truncated, "
                "listed in infos['restarted_envs'])",
            )
        self._restarts[k] += 1
        deadline = time.monotonic() + self._restart_timeout
        while True:
            try:
                self._described[k] = self._ray.get(self._actors[k].describe.remote(), timeout=1.0)
                self._channels[k].close()
                self._channels[k] = self._connect(k)
                return
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                if time.monotonic() > deadline:
                    self._die(k, f"Ray did not recreate it within restart_timeout={self._restart_timeout} s", "")
                time.sleep(0.05)

    def _die(self, k: int, reason: str, advice: str) -> None:
        """Closes the env and raises :class:`ActorDiedError` for actor ``k``."""
        lo, hi = self._shards[k]
        d = self._described[k] if k < len(getattr(self, "_described", [])) else {"node_id": "?", "pid": None}
        actor_id = self._actors[k]._actor_id.hex() if k < len(self._actors) else "?"
        self.close()
        raise ActorDiedError(
            f"Ray actor {k} (node {d['node_id']}, pid {d['pid']}) hosting envs {lo}..{hi - 1} died: {reason}"
            + (f"; {advice}" if advice else "")
            + ". The env is closed: build a new one",
            actor=k,
            actor_id=actor_id,
            node_id=d["node_id"],
            pid=d["pid"],
            env_ids=list(range(lo, hi)),
            exit=reason,
        )

    def _revive_sync(self, k: int, death: Exception) -> tuple:
        if self._revived_by_call[k] and isinstance(death, ActorRestarted):
            self._revived_by_call[k] = False  # recreated already, when a call found it dead
        else:
            self._revive(k, death)
        return self._restarted_part(k)

    def _revive_for_call(self, k: int, death: Exception) -> object:
        """A call into the envs found actor ``k`` dead: within its restart budget it is
        recreated now, and its envs come back restarted through the step path (async: the
        rows after their seeded reset, as after a death in a step; sync: at the next
        ``step``, whose batch reports them). The call is then made again (``REVIVED``)."""
        if self.is_async and self._has_reset:
            self._revive_async(k, death)
        else:
            self._revive(k, death)
            self._revived_by_call[k] = self._has_reset
        return REVIVED

    def _restart_seed(self, k: int) -> int:
        return (self.seed + self._shards[k][0] + self._restarts[k] * RESTART_SEED_STRIDE) % SEED_RANGE

    def _restarted_part(self, k: int) -> tuple:
        """Sync mode: actor ``k``'s envs after its restart: a seeded reset, truncated."""
        lo, hi = self._shards[k]
        reset = self._gather(
            [self._channels[k].request("reset", {"seed": self._restart_seed(k)})], [k], self._revive_sync
        )[0]
        if len(reset) == 5:  # it died again while resetting, and was revived again
            return reset
        obs, infos = reset
        n = hi - lo
        infos["restarted_envs"] = list(range(lo, hi))
        return obs, np.zeros(n, np.float32), np.zeros(n, np.bool_), np.ones(n, np.bool_), infos


REVIVED = object()
"""What :meth:`RayVectorEnv._revive_for_call` stands in for a dead actor's result with."""


def _reason(death: Exception) -> str:
    """The first line of Ray's account of an actor's death."""
    text = str(death).strip()
    return text.splitlines()[0] if text else type(death).__name__
