"""The actors of one :class:`shmenv.ray.RayVectorEnv` and their faults: :class:`Actors`
holds the Ray handles, the step connections and what each actor reported of itself, and
gathers results (a shmenv error raised as it is, a dead actor told apart), finds out why
a step connection ended, and recreates a dead actor within its restart budget, so that
its envs come back restarted through the step path; or, with no budget left, closes the
env and raises :class:`~shmenv.errors.ActorDiedError`."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, NoReturn, Sequence

from shmenv.errors import ActorDiedError, BuildError, WorkerDiedError, WorkerError, WorkerTimeoutError
from shmenv.ray.channel import Channel, ChannelLost, Reply
from shmenv.ray.host import ActorRestarted
from shmenv.seeding import SEED_RANGE

__all__ = ["Actors", "OnDeath", "REVIVED", "RESTART_SEED_STRIDE", "import_ray"]

RESTART_SEED_STRIDE = 2**32
"""The ``k``-th restart of an actor reseeds its env ``i`` with ``seed + i + k * 2**32``."""

_FATAL = (WorkerDiedError, WorkerError, WorkerTimeoutError, BuildError)

REVIVED = object()
"""What a call into the envs stands in for a dead actor's result with once Ray recreated
it (the call is then made again)."""

OnDeath = Callable[[int, Exception], Any]
"""What :meth:`Actors.gather` hands a dead actor ``k`` to: its return value stands for
the actor's result."""


def import_ray():  # the module's type is inferred: Ray's (or its stubs') names are checked
    """The ``ray`` module, or an ImportError saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError("shmenv.ray needs Ray: pip install 'shmenv[ray]' (or pip install ray)") from e
    return ray


class Actors:
    """The ``len(shards)`` actors of one env: actor ``k`` hosts envs ``shards[k]``, seeded
    from ``seed``; Ray recreates a dead one up to ``max_restarts`` times, each within
    ``restart_timeout`` seconds. ``close`` closes the env (an actor that is gone for good
    closes it before its error is raised). ``handles``, ``channels`` and ``described``
    (each actor's :meth:`~shmenv.ray.host.PoolHost.describe`) fill as the env starts."""

    def __init__(
        self,
        shards: Sequence[tuple[int, int]],
        seed: int,
        max_restarts: int,
        restart_timeout: float,
        close: Callable[[], None],
    ):
        self.ray = import_ray()
        self.shards = list(shards)
        self.seed = seed
        self.max_restarts = max_restarts
        self.restart_timeout = restart_timeout
        self._close_env = close
        self.handles: list[Any] = []
        self.channels: list[Channel] = []
        self.described: list[dict] = []
        self.restarts = [0] * len(self.shards)
        self.placement_group: Any = None

    def __len__(self) -> int:
        return len(self.shards)

    def connect(self, k: int) -> Channel:
        """The step connection to actor ``k``, at the address it announced."""
        host, port, _ = address = self.described[k]["step_address"]
        try:
            return Channel(address)
        except OSError as e:
            raise BuildError(
                f"could not connect to Ray actor {k} (node {self.described[k]['node_id']}) at {host}:{port} for the "
                f"step path: {e}. The driver must reach each node's address on the ports the kernel hands out "
                "(as Ray's own calls do): check the firewall between the driver and that node"
            ) from None

    def gather(self, refs: Sequence[Any], actors: Iterable[int], on_death: OnDeath | None = None) -> list:
        """The results of one request per actor in ``actors`` (Ray ``ObjectRef`` s or step
        path :class:`~shmenv.ray.channel.Reply` s). A shmenv error is raised as it is
        (closing the env when it is fatal). A dead actor is handed to ``on_death(k,
        death)``, whose return value stands for its result; without one (calls into the
        envs) it raises :class:`ActorDiedError`."""
        out = []
        for ref, k in zip(refs, actors):
            try:
                out.append(self.get(ref))
                continue
            except (ActorRestarted, self.ray.exceptions.RayActorError) as e:
                death: Exception = e
            except ChannelLost as e:
                death = self._death(k, e)
            except WorkerDiedError:
                # A killed actor's workers may die (and be reported by it) just before it
                # does: then the actor's death is the cause.
                actor_death = self._actor_death(k)
                if actor_death is None:
                    self._close_env()
                    raise
                death = actor_death
            except _FATAL:
                self._close_env()
                raise
            if on_death is None:
                self.die(k, _reason(death), "")
            out.append(on_death(k, death))
        return out

    def get(self, ref: Any) -> Any:
        """The value of a Ray call or a step-path reply; an exception the actor raised is
        raised here as itself."""
        if isinstance(ref, Reply):
            return ref.get()
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:
            cause = e.cause
        raise cause

    def _death(self, k: int, lost: ChannelLost) -> Exception:
        """Why actor ``k``'s step connection ended: Ray's account of the actor's death, or
        the lost connection when Ray has already recreated the actor."""
        try:
            described = self.ray.get(self.handles[k].describe.remote(), timeout=self.restart_timeout)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as e:
            return e
        except self.ray.exceptions.GetTimeoutError:
            return lost
        if described["pid"] != self.described[k]["pid"]:
            return ChannelLost(f"the actor process {self.described[k]['pid']} ended ({lost}); Ray recreated it")
        self.die(
            k,
            f"its step connection ended ({lost}) while the actor process lives",
            "check the network between the driver and the node",
        )

    def _actor_death(self, k: int, grace: float = 5.0) -> Exception | None:
        """Ray's account of actor ``k``'s death if it died (or was recreated) within
        ``grace`` seconds, else None (it lives: what it reported is its own)."""
        try:
            described = self.ray.get(self.handles[k].describe.remote(), timeout=grace)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.RayTaskError) as e:
            return e
        except self.ray.exceptions.GetTimeoutError:
            return None
        if described["pid"] != self.described[k]["pid"]:
            return ChannelLost(f"the actor process {self.described[k]['pid']} ended; Ray recreated it")
        return None

    def revive(self, k: int, death: Exception) -> None:
        """Waits for Ray to recreate dead actor ``k``, within its restart budget, and
        connects to it again."""
        if self.restarts[k] >= self.max_restarts:
            spent = "its restart budget is spent" if self.max_restarts else "pass max_restarts=n"
            self.die(
                k,
                _reason(death),
                f"{spent} to have Ray recreate it (its envs then come back truncated, "
                "listed in infos['restarted_envs'])",
            )
        self.restarts[k] += 1
        deadline = time.monotonic() + self.restart_timeout
        while True:
            try:
                self.described[k] = self.ray.get(self.handles[k].describe.remote(), timeout=1.0)
                self.channels[k].close()
                self.channels[k] = self.connect(k)
                return
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
                if time.monotonic() > deadline:
                    self.die(k, f"Ray did not recreate it within restart_timeout={self.restart_timeout} s", "")
                time.sleep(0.05)

    def die(self, k: int, reason: str, advice: str) -> NoReturn:
        """Closes the env and raises :class:`ActorDiedError` for actor ``k``."""
        lo, hi = self.shards[k]
        d = self.described[k] if k < len(self.described) else {"node_id": "?", "pid": None}
        actor_id = self.handles[k]._actor_id.hex() if k < len(self.handles) else "?"
        self._close_env()
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

    def restart_seed(self, k: int) -> int:
        """The seed of actor ``k``'s envs after its latest restart."""
        return (self.seed + self.shards[k][0] + self.restarts[k] * RESTART_SEED_STRIDE) % SEED_RANGE

    def release(self) -> None:
        """Closes every actor's pool, then the actors and the placement group."""
        if not self.ray.is_initialized():
            return
        handles, self.handles = self.handles, []
        for channel in self.channels:
            channel.close()
        self.channels = []
        try:
            self.ray.wait([h.close.remote() for h in handles], num_returns=len(handles), timeout=30.0)
        except Exception:
            pass  # an actor that is gone has no pool left to close
        for h in handles:
            try:
                self.ray.kill(h, no_restart=True)
            except Exception:
                pass  # already gone
        if self.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)
            self.placement_group = None


def _reason(death: Exception) -> str:
    """The first line of Ray's account of an actor's death."""
    text = str(death).strip()
    return text.splitlines()[0] if text else type(death).__name__
