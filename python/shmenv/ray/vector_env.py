"""The env of :mod:`shmenv.ray`: :class:`RayVectorEnv` (sync and async stepping, spaces,
calls, closing) and the two ways to make one, :func:`make_vec` and :func:`from_fns`."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.vector.vector_env import AutoresetMode

from shmenv import _shmenv
from shmenv.arguments import _autoreset_mode, _count, _env_ids, _integer, _optional_int
from shmenv.errors import (
    BuildError,
    InvalidArgumentError,
    UsageError,
)
from shmenv.options import PoolOptions, with_options
from shmenv.prechecks import check_async, check_open, check_reset, reset_request
from shmenv.ray.async_mode import AsyncBatches
from shmenv.ray.faults import REVIVED, Actors
from shmenv.ray.host import ActorRestarted, PoolHost, concat_batches, split_evenly
from shmenv.resolve import EnvFns, env_fns_target
from shmenv.seeding import SEED_RANGE, per_env_seeds, seed_value
from shmenv.spaces.assembly import as_action_array

__all__ = ["make_vec", "from_fns", "RayVectorEnv"]

_CLOSED_WHY = "close() was called, or an actor failed"
"""Why a Ray pool is closed, as its :class:`shmenv.ClosedError` says."""

PLACEMENTS = {"spread": "SPREAD", "strict_spread": "STRICT_SPREAD", "pack": "PACK", "strict_pack": "STRICT_PACK"}
"""``placement`` names and the Ray placement group strategies they stand for."""


class RayVectorEnv(VectorEnv):
    """A Gymnasium ``VectorEnv`` whose envs live in ``num_actors`` Ray actors, each owning
    one shmenv pool on its node. Made by :func:`make_vec`, whose docstring describes every
    argument. Env ``i`` is env ``i`` of one local pool of the same size: same seed, same
    trajectories, same infos. Sync ``step`` scatters the actions and joins the actors'
    results in env order; async mode (``batch_size < num_envs``) is EnvPool's
    ``send``/``recv``, a batch joining the actor batches that are ready first. The step
    path runs over one connection per actor (:mod:`shmenv.ray.channel`); Ray carries the
    rest.

    Its collaborators: ``_actors`` (:class:`~shmenv.ray.faults.Actors`: the actors, their
    step connections and their faults) and, in async mode, ``_async``
    (:class:`~shmenv.ray.async_mode.AsyncBatches`: where each env is, and how batches are
    joined)."""

    host_class = PoolHost
    """The actor class (a subclass may time or extend :class:`PoolHost`)."""

    def __init__(
        self,
        env: Any,
        num_envs: int,
        *,
        num_actors: int,
        placement: Any = "spread",
        num_cpus_per_actor: float | None = None,
        actor_options: dict | None = None,
        placement_timeout: float = 60.0,
        restart_timeout: float = 60.0,
        **options: Any,
    ):
        self.closed = True  # until the actors exist, so __del__ has nothing to close
        PoolOptions.of("shmenv.ray.make_vec", options)  # an unknown name is refused here, before any actor
        self.num_envs = _count("num_envs", num_envs)
        num_actors = _count("num_actors", num_actors)
        if num_actors > self.num_envs:
            raise InvalidArgumentError(
                f"num_actors={num_actors} is more than num_envs={num_envs}: each actor needs an env"
            )
        self._shards = split_evenly(self.num_envs, num_actors)
        seed = options.pop("seed", None)
        self.seed = (
            int.from_bytes(os.urandom(8), "little") if seed is None else seed_value(_integer("seed", seed), "seed")
        )
        batch = options.pop("batch_size", None)
        self.batch_size = self.num_envs if batch is None else _count("batch_size", batch)
        self.is_async = self.batch_size < self.num_envs
        self._actor_batch = self._actor_batch_size(num_actors) if self.is_async else None
        max_restarts = _optional_int("max_restarts", options.get("max_restarts"), 0) or 0
        self.autoreset_mode = _autoreset_mode(options.pop("autoreset_mode", AutoresetMode.NEXT_STEP))
        self.copy = bool(options.pop("copy", True))
        workers = self._workers_per_actor(options.pop("num_workers", None), num_actors)
        options.setdefault("pin_workers", False)
        options.setdefault(
            "wait", "block"
        )  # a batch's hop is a network round trip: spinning through it only steals cores
        options.update(autoreset_mode=self.autoreset_mode, copy=False, batch_size=self._actor_batch)
        self._actors = Actors(self._shards, self.seed, max_restarts, float(restart_timeout), self.close)
        if not self._actors.ray.is_initialized():
            self._actors.ray.init()
        try:
            self._start_actors(env, options, workers, placement, num_cpus_per_actor, actor_options, placement_timeout)
        except BaseException:
            self._release()
            raise
        self.closed = False
        self._take_spaces(self._actors.described)
        self._revived_by_call = [False] * num_actors  # its envs' restart is still to be reported (sync)
        self._has_reset = False
        self._last: list[tuple | None] = [None] * num_actors
        self._async = (
            AsyncBatches(self._actors, self.num_envs, self.batch_size, self._actor_batch, self.copy)
            if self._actor_batch is not None
            else None
        )

    # --- construction ------------------------------------------------------------------

    def _start_actors(
        self,
        env: Any,
        options: dict[str, Any],
        workers: list[int | None],
        placement: Any,
        num_cpus_per_actor: float | None,
        actor_options: dict | None,
        placement_timeout: float,
    ) -> None:
        """Starts one actor per shard, each with a pool of its envs, and connects to each
        one's step path; an actor that does not start within ``placement_timeout`` seconds
        raises :class:`BuildError`."""
        actors, ray = self._actors, self._actors.ray
        cpus = [num_cpus_per_actor or w or 1 for w in workers]
        strategies = self._placement(placement, cpus, placement_timeout)
        host = ray.remote(self.host_class)
        for k, (lo, hi) in enumerate(self._shards):
            settings = dict(num_cpus=cpus[k], max_restarts=actors.max_restarts, max_task_retries=0)
            if strategies[k] is not None:
                settings["scheduling_strategy"] = strategies[k]
            settings.update(actor_options or {})
            pool_options = dict(options, seed=(self.seed + lo) % SEED_RANGE, num_workers=workers[k])
            shard = EnvFns(env.fns[lo:hi]) if isinstance(env, EnvFns) else env  # from_fns: its envs' factories
            actors.handles.append(host.options(**settings).remote(shard, hi - lo, lo, pool_options))
        refs = [h.describe.remote() for h in actors.handles]
        _, waiting = ray.wait(refs, num_returns=len(refs), timeout=placement_timeout)
        if waiting:
            raise BuildError(
                f"{len(waiting)} of {len(actors)} actors did not start within placement_timeout={placement_timeout} s "
                f"(each asks for {cpus[0]} CPUs; the cluster has {ray.cluster_resources().get('CPU', 0)} CPUs, "
                f"{ray.available_resources().get('CPU', 0)} free): lower num_actors or num_cpus_per_actor, or add nodes"
            )
        actors.described = actors.gather(refs, range(len(actors)))
        actors.channels = [actors.connect(k) for k in range(len(actors))]

    def _actor_batch_size(self, num_actors: int) -> int:
        """The rows of each actor's batches: the largest divisor of ``batch_size`` up to
        ``batch_size / num_actors`` (rounded up) and below the smallest actor's envs, so
        that a batch joins whole actor batches (``batch_size / num_actors`` itself when it
        is whole)."""
        smallest = min(b - a for a, b in self._shards)
        limit = min(-(-self.batch_size // num_actors), smallest - 1)
        fitting = [b for b in range(1, limit + 1) if self.batch_size % b == 0]
        if not fitting:
            raise InvalidArgumentError(
                f"async mode needs at least 2 envs per actor (an actor's pool is async when its batch is smaller "
                f"than its envs), but the smallest of the {num_actors} actors has {smallest}: lower num_actors "
                f"(at most {self.num_envs // 2} for {self.num_envs} envs)"
            )
        return fitting[-1]

    def _workers_per_actor(self, num_workers: Any, num_actors: int) -> list[int | None]:
        """Each actor's worker count: ``num_workers`` (the total) split like the envs, or
        None (each actor's pool decides: one per core of its node, or ``envs_per_worker``)."""
        if num_workers is None:
            return [None] * num_actors
        num_workers = _count("num_workers", num_workers)
        if num_workers < num_actors:
            raise InvalidArgumentError(
                f"num_workers={num_workers} (the total over all actors) is fewer than num_actors={num_actors}: "
                "each actor's pool needs at least one worker"
            )
        return [b - a for a, b in split_evenly(num_workers, num_actors)]

    def _placement(self, placement: Any, cpus: list[float], timeout: float) -> list[Any]:
        """One Ray scheduling strategy per actor: a placement group bundle per actor
        (``"spread"``, ``"strict_spread"``, ``"pack"``, ``"strict_pack"``), a node per actor
        (a list of node ids: node affinity), or None (Ray's default scheduling)."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        if placement is None:
            return [None] * len(cpus)
        if isinstance(placement, str):
            if placement not in PLACEMENTS:
                raise InvalidArgumentError(
                    f"unknown placement {placement!r}: use one of {list(PLACEMENTS)}, a list of one Ray node id per "
                    "actor, or None"
                )
            ray = self._actors.ray
            group = placement_group([{"CPU": c} for c in cpus], strategy=PLACEMENTS[placement])
            self._actors.placement_group = group
            try:
                ray.get(group.ready(), timeout=timeout)
            except ray.exceptions.GetTimeoutError:
                raise BuildError(
                    f"Ray could not place {len(cpus)} actors of {cpus} CPUs with strategy {PLACEMENTS[placement]} in "
                    f"{timeout} s (the cluster has {ray.cluster_resources().get('CPU', 0)} CPUs): lower "
                    "num_actors or num_cpus_per_actor, add nodes, or use placement='pack' or None"
                ) from None
            return [PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=k) for k in range(len(cpus))]
        nodes = list(placement)
        if len(nodes) != len(cpus):
            raise InvalidArgumentError(
                f"placement lists {len(nodes)} node ids for {len(cpus)} actors: give one per actor"
            )
        return [NodeAffinitySchedulingStrategy(node_id=n, soft=False) for n in nodes]

    def _take_spaces(self, described: list[dict]) -> None:
        first = described[0]
        for k, d in enumerate(described[1:], 1):
            if (d["single_observation_space"], d["single_action_space"]) != (
                first["single_observation_space"],
                first["single_action_space"],
            ):
                self.close()
                raise BuildError(
                    f"actor {k} reports spaces {d['single_observation_space']} / {d['single_action_space']} but actor 0 "
                    f"{first['single_observation_space']} / {first['single_action_space']}: every node must build the same env"
                )
        self.env_id = first["env_id"]
        self.single_observation_space = first["single_observation_space"]
        self.single_action_space = first["single_action_space"]
        self.observation_space = batch_space(self.single_observation_space, self.batch_size)
        self.action_space = batch_space(self.single_action_space, self.batch_size)
        self.metadata = dict(first["metadata"], autoreset_mode=self.autoreset_mode)
        self.render_mode, self.spec = first["render_mode"], first["spec"]
        self.max_episode_steps = first["max_episode_steps"]
        self._action_json = json.dumps(first["action_json"])
        self._action_dtype = np.dtype(self.single_action_space.dtype)
        self._action_shape = tuple(self.single_action_space.shape or ())

    # --- Gymnasium API ------------------------------------------------------------------

    def reset(self, *, seed: Any = None, options: dict | None = None):
        """As :meth:`shmenv.ShmVectorEnv.reset`: ``seed`` None, an int (env ``i`` gets
        ``seed + i``) or a list of one int or None per env; ``options={"reset_mask": mask}``
        in sync mode. In async mode returns the first ``batch_size`` envs to finish."""
        check_open(self.closed, "env", _CLOSED_WHY)
        seeds = per_env_seeds(seed, self.num_envs) if seed is not None else None
        mask, _ = reset_request(options, self.num_envs, self.is_async)
        if self._async is not None:
            self._async.start_reset(seeds)
            self._has_reset = True
            obs, _, _, _, infos = self.recv()
            return obs, infos
        channels = self._actors.channels
        refs: dict[int, Any] = {}
        for k, (lo, hi) in enumerate(self._shards):
            part_seed = None if seeds is None else seeds[lo:hi]
            if mask is None or any(mask[lo:hi]):
                part_options = None if mask is None else {"reset_mask": np.array(mask[lo:hi])}
                refs[k] = channels[k].request("reset", {"seed": part_seed, "options": part_options})
            elif not self._has_reset:  # a pool's first reset resets every env
                refs[k] = channels[k].request("reset", {"seed": part_seed})
        for k in refs:
            self._revived_by_call[k] = False  # its envs start over here anyway
        done = dict(zip(refs, self._actors.gather(list(refs.values()), list(refs), self._revive_sync)))
        parts = [(done[k][0], done[k][-1]) if k in done else self._unchanged(k) for k in range(len(self._actors))]
        self._last = [(obs, {"env_id": i["env_id"], "elapsed_step": i["elapsed_step"]}) for obs, i in parts]
        self._has_reset = True
        return self._join(parts)

    def step(self, actions, env_ids=None):
        """Sync: steps every env (row ``i`` is env ``i``). Async: ``send`` then ``recv``."""
        if self.is_async:
            self.send(actions, env_ids)
            return self.recv()
        check_reset(self.closed, self._has_reset, what="env", why=_CLOSED_WHY)
        batch = self._actions(actions, self.num_envs)
        refs = [c.request("step", batch[lo:hi]) for c, (lo, hi) in zip(self._actors.channels, self._shards)]
        parts = self._actors.gather(refs, range(len(refs)), self._revive_sync)
        self._last = [(p[0], {"env_id": p[4]["env_id"], "elapsed_step": p[4]["elapsed_step"]}) for p in parts]
        return self._join(parts)

    def __enter__(self) -> "RayVectorEnv":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def close_extras(self, **kwargs: Any) -> None:
        self._release()

    # --- async API (EnvPool convention) ---------------------------------------------------

    def async_reset(self) -> None:
        """Starts a reset of every env (async mode); ``recv()`` returns the results."""
        check_open(self.closed, "env", _CLOSED_WHY)
        self._async_batches("async_reset").start_reset(None)
        self._has_reset = True

    def send(self, actions, env_ids=None) -> None:
        """Hands one action per env in ``env_ids`` (all envs if None) to those envs' actors."""
        check_reset(self.closed, self._has_reset, what="env", why=_CLOSED_WHY)
        batches = self._async_batches("send")
        ids = np.arange(self.num_envs, dtype=np.int64) if env_ids is None else _env_ids(env_ids, self.num_envs)
        batches.send(self._actions(actions, len(ids)), ids)

    def recv(self):
        """The next ``batch_size`` results, from the actor batches ready first, EnvPool
        style, with ``infos["env_id"]`` saying which env each row is."""
        check_open(self.closed, "env", _CLOSED_WHY)
        return self._async_batches("recv").recv()

    def _async_batches(self, call: str) -> AsyncBatches:
        """The async bookkeeping, for ``call`` (which is for async mode only)."""
        check_async(self.is_async, call)
        assert self._async is not None, "an async env (batch_size < num_envs) has its AsyncBatches"
        return self._async

    # --- calls into the envs --------------------------------------------------------------

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """``call`` on every env (in its actor's pool), results in env order."""
        return self._everywhere("call", name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple:
        return self._everywhere("get_attr", name)

    def set_attr(self, name: str, values: Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise InvalidArgumentError(f"set_attr needs {self.num_envs} values (one per env), got {len(values)}")
        self._invoke_all("set_attr", lambda lo, hi: (name, list(values[lo:hi])))

    def render(self) -> tuple:
        return self._everywhere("render")

    @property
    def np_random_seed(self) -> tuple:
        return self._everywhere("np_random_seed")

    def stats(self) -> list[dict]:
        """Each actor's pool :meth:`shmenv.ShmVectorEnv.stats`, with its node."""
        stats = self._invoke_all("stats", lambda lo, hi: ())
        return [dict(s, actor=k, node_id=self._actors.described[k]["node_id"]) for k, s in enumerate(stats)]

    @property
    def actors(self) -> list[dict]:
        """Per actor: its node, process id, envs ``[first, end)`` and worker pids."""
        return [
            {
                "actor": k,
                "node_id": d["node_id"],
                "pid": d["pid"],
                "envs": self._shards[k],
                "worker_pids": d["worker_pids"],
            }
            for k, d in enumerate(self._actors.described)
        ]

    @property
    def restarts(self) -> list[int]:
        """Restarts so far, per actor (with ``max_restarts``)."""
        return list(self._actors.restarts)

    def __repr__(self) -> str:
        mode = f"async batch_size={self.batch_size}" if self.is_async else "sync"
        return f"RayVectorEnv({getattr(self, 'env_id', '?')!r}, num_envs={self.num_envs}, actors={len(self._shards)}, {mode})"

    def _unchanged(self, k: int) -> tuple:
        last = self._last[k]
        if last is None:
            raise UsageError("reset(options={'reset_mask': ...}) needs a first full reset(): call reset() first")
        obs, infos = last
        return obs, dict(infos)

    def _join(self, parts: list) -> tuple:
        if not self.copy and len(parts) == 1:
            return parts[0]
        return concat_batches(parts)

    def _release(self) -> None:
        """Closes every actor's pool, then the actors and the placement group."""
        self._actors.release()

    def _actions(self, actions, count: int) -> np.ndarray:
        """The actions as one contiguous array of the space's dtype, converted and checked
        as a local pool does, before any actor sees them."""
        space, dtype, shape = self.single_action_space, self._action_dtype, self._action_shape
        a = as_action_array(actions, count, space, dtype, shape, "actions")
        _shmenv.check_actions(self._action_json, a, count, "actions")
        return a

    def _everywhere(self, method: str, *args: Any, **kwargs: Any) -> tuple:
        parts = self._invoke_all(method, lambda lo, hi: args, **kwargs)
        return tuple(x for part in parts for x in part)

    def _invoke_all(self, method: str, args_of, **kwargs: Any) -> list:
        """``PoolHost.invoke(method, *args_of(lo, hi), **kwargs)`` on every actor (``lo, hi``:
        its envs), results in actor order; an actor found dead is recreated within its
        budget and asked again."""
        check_open(self.closed, "env", _CLOSED_WHY)
        actors = self._actors
        ask = lambda k: actors.handles[k].invoke.remote(method, *args_of(*self._shards[k]), **kwargs)  # noqa: E731
        parts = actors.gather([ask(k) for k in range(len(actors))], range(len(actors)), self._revive_for_call)
        for k, part in enumerate(parts):
            if part is REVIVED:
                parts[k] = actors.gather([ask(k)], [k])[0]
        return parts

    # --- dead actors that Ray recreated ---------------------------------------------------

    def _revive_sync(self, k: int, death: Exception) -> tuple:
        """Sync mode: actor ``k`` died in a reset or step; its part of the batch is its envs
        after their restart."""
        if self._revived_by_call[k] and isinstance(death, ActorRestarted):
            self._revived_by_call[k] = False  # recreated already, when a call found it dead
        else:
            self._actors.revive(k, death)
        return self._restarted_part(k)

    def _revive_for_call(self, k: int, death: Exception) -> object:
        """A call into the envs found actor ``k`` dead: within its restart budget it is
        recreated now, and its envs come back restarted through the step path (async: the
        rows after their seeded reset, as after a death in a step; sync: at the next
        ``step``, whose batch reports them). The call is then made again (``REVIVED``)."""
        if self._async is not None and self._has_reset:
            self._async.revive(k, death)
        else:
            self._actors.revive(k, death)
            self._revived_by_call[k] = self._has_reset
        return REVIVED

    def _restarted_part(self, k: int) -> tuple:
        """Sync mode: actor ``k``'s envs after its restart: a seeded reset, truncated."""
        lo, hi = self._shards[k]
        request = self._actors.channels[k].request("reset", {"seed": self._actors.restart_seed(k)})
        reset = self._actors.gather([request], [k], self._revive_sync)[0]
        if len(reset) == 5:  # it died again while resetting, and was revived again
            return reset
        obs, infos = reset
        n = hi - lo
        infos["restarted_envs"] = list(range(lo, hi))
        return obs, np.zeros(n, np.float32), np.zeros(n, np.bool_), np.ones(n, np.bool_), infos


@with_options
def make_vec(
    env: Any,
    num_envs: int,
    *,
    num_actors: int,
    placement: Any = "spread",
    num_cpus_per_actor: float | None = None,
    actor_options: dict | None = None,
    placement_timeout: float = 60.0,
    restart_timeout: float = 60.0,
    **options: Any,
) -> RayVectorEnv:
    """Starts ``num_envs`` envs in ``num_actors`` Ray actors, each owning one shmenv pool
    (its workers on the actor's node), and returns them as one Gymnasium ``VectorEnv``
    (:class:`RayVectorEnv`). Call ``ray.init(address=...)`` first to use a cluster
    (otherwise Ray starts a local one).

    - ``env`` and every other keyword are :func:`shmenv.make_vec`'s, with the same meaning
      for the whole env: ``seed`` (env ``i`` is seeded ``seed + i``, whichever actor hosts
      it), ``batch_size`` (async mode: each batch joins whole actor batches of
      ``batch_size / num_actors`` rows, or of the largest divisor of ``batch_size``
      below that when it is not whole, from whichever actors are ready first), ``autoreset_mode``, ``episode_stats_key``, ``max_restarts``
      (also each actor's budget: Ray recreates a dead actor that many times, and its envs
      come back truncated and listed in ``infos["restarted_envs"]``), ``config``, ...
      ``num_workers`` is the total, split among the actors like the envs (default: each
      actor's pool takes one worker per core of its node). ``pin_workers`` defaults to False
      (actors sharing a node cannot see each other's pins), ``wait`` to ``"block"`` (the
      workers sleep between batches: the hop to the driver is longer than spinning pays for).
    - ``num_actors``: actors (pools); actor ``k`` hosts a contiguous shard of envs, as the
      engine splits envs among workers.
    - ``placement``: ``"spread"`` (default: a Ray placement group with one bundle per actor,
      spread over nodes), ``"strict_spread"`` (one actor per node), ``"pack"``,
      ``"strict_pack"``; a list of one Ray node id per actor (node affinity); or None
      (Ray's default scheduling).
    - ``num_cpus_per_actor``: the CPUs each actor reserves (default: its worker count, or 1).
    - ``actor_options``: more ``ray.remote`` options for the actors (``runtime_env``,
      ``resources``, ...).
    - ``placement_timeout``: seconds to wait for the placement group, and then for the
      actors to start their pools; ``restart_timeout``: seconds to wait for Ray to recreate
      a dead actor.

    Results are arrays the caller owns (joined from the actors' batches); with
    ``copy=False`` and one actor they are the arrays Ray returned, which may be read-only.
    """
    return RayVectorEnv(
        env,
        num_envs,
        num_actors=num_actors,
        placement=placement,
        num_cpus_per_actor=num_cpus_per_actor,
        actor_options=actor_options,
        placement_timeout=placement_timeout,
        restart_timeout=restart_timeout,
        **options,
    )


def from_fns(env_fns: Any, *, num_actors: int, **kwargs: Any) -> RayVectorEnv:
    """:func:`shmenv.from_fns` over Ray actors: one zero-argument callable per env (env
    ``i`` built by ``env_fns[i]`` in the actor hosting it, the callables shipped by Ray);
    ``num_actors`` and every other keyword as :func:`make_vec`."""
    env, num_envs = env_fns_target(env_fns, kwargs)
    return RayVectorEnv(env, num_envs, num_actors=num_actors, **kwargs)
