"""The node side of :mod:`shmenv.ray`: :class:`PoolHost`, the Ray actor that owns one
shmenv pool (its workers on the actor's node) and serves its step path
(:mod:`shmenv.ray.channel`), and the helpers that join the batches of several actors into
one. This module imports neither Ray nor gymnasium at import time."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from shmenv._shmenv import shard
from shmenv.errors import Error, WorkerDiedError, WorkerError, WorkerTimeoutError
from shmenv.ray.channel import StepServer

if TYPE_CHECKING:
    from shmenv.vector import ShmVectorEnv


class ActorRestarted(Exception):
    """Raised by a :class:`PoolHost` whose pool has not been reset since it was built:
    after a restart by Ray, its pool is new and knows nothing of the old one's episodes
    (the driver resets every actor before its first step, so only a restart shows it)."""


class PoolHost:
    """One shmenv pool inside a Ray actor: envs ``first_env .. first_env + num_envs`` of
    a :class:`shmenv.ray.RayVectorEnv`. ``options`` are :func:`shmenv.make_vec`'s keywords,
    with ``seed`` already ``seed + first_env``, so local env ``i`` is seeded as global env
    ``first_env + i`` of one big pool. Errors of the pool are raised with global env ids.

    The step path (``reset``, ``step``, ``send``, ``recv``) is served on the connection
    that ``describe()["step_address"]`` names; Ray calls the rest. A lock keeps the two
    from using the pool at once (a pool is used from one thread at a time)."""

    def __init__(self, env: Any, num_envs: int, first_env: int, options: dict):
        import ray

        context = ray.get_runtime_context()
        self.first_env = first_env
        self.node_id = context.get_node_id()
        # A new pool refuses to step until the driver resets it: after a restart (Ray runs
        # __init__ again) that tells the driver its envs start over.
        self.restarted = True
        self.envs: ShmVectorEnv | None = None  # None when the pool could not be made: init_error says why
        self.init_error: BaseException | None = None
        self.send_error: BaseException | None = None
        self.lock = threading.Lock()
        self.server: StepServer | None = None
        try:
            from shmenv.vector import make_vec

            # env_id and elapsed_step in every result: the driver merges the actors' batches by them.
            self.envs = make_vec(env, num_envs, **{"pool_infos": True, **options})
        except Exception as e:  # raised by describe(), so the driver gets it typed
            self.init_error = self._global(e)
            return
        self.server = StepServer(ray.util.get_node_ip_address(), self.serve)

    def describe(self) -> dict:
        """What the driver needs to know about this actor and its pool."""
        e = self._pool()
        assert self.server is not None, "a host whose pool was made serves its step path"
        return {
            "node_id": self.node_id,
            "pid": os.getpid(),
            "step_address": self.server.address,
            "worker_pids": list(e.worker_pids),
            "single_observation_space": e.single_observation_space,
            "single_action_space": e.single_action_space,
            "action_json": e.engine_spec["action"],
            "metadata": e.metadata,
            "render_mode": e.render_mode,
            "spec": e.spec,
            "max_episode_steps": e.max_episode_steps,
            "env_id": e.env_id,
            "python_env": e.python_env,
        }

    # --- the step path: each returns a batch with global env ids -----------------------

    def serve(self, method: str, payload: Any) -> Any:
        """One request of the driver's step connection: ``reset`` (``payload`` its
        keywords), ``step``, ``send`` or ``recv``."""
        with self.lock:
            if method == "reset":
                return self.reset(**payload)
            if method == "step":
                return self.step(payload)
            if method == "send":
                return self.send(payload)
            if method == "recv":
                return self.recv()
        raise ValueError(f"unknown step-path method {method!r}: use reset, step, send or recv")

    def reset(self, seed: Any = None, options: dict | None = None) -> Any:
        self.restarted = False
        self.send_error = None
        envs = self._pool()
        return self._run(lambda: envs.reset(seed=seed, options=options))

    def step(self, actions: np.ndarray) -> Any:
        """``actions``: the action array of this actor's envs."""
        self._check_fresh()
        envs = self._pool()
        return self._run(lambda: envs.step(actions))

    def send(self, actions_and_ids: tuple) -> None:
        """Fire and forget (``actions_and_ids``: the actions and their global env ids): a
        failure is kept and raised by the next ``recv``."""
        if self.send_error is not None:
            return
        try:
            self._check_fresh()
            actions, env_ids = actions_and_ids
            self._pool().send(actions, env_ids - self.first_env)
        except Exception as e:
            self.send_error = self._global(e)

    def recv(self) -> Any:
        if self.send_error is not None:
            error, self.send_error = self.send_error, None
            raise error
        self._check_fresh()
        return self._run(self._pool().recv)

    # --- the side channel --------------------------------------------------------------

    def invoke(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``envs.method(*args, **kwargs)`` (``call``, ``get_attr``, ``set_attr``,
        ``stats``), or the attribute ``method`` when it is not callable."""
        with self.lock:
            value = getattr(self.envs, method)
            try:
                return value(*args, **kwargs) if callable(value) else value
            except Exception as e:
                raise self._global(e) from None

    def close(self) -> list[int]:
        """Stops serving the step path and closes the pool (stops and reaps its
        workers); returns their pids."""
        if self.server is not None:
            self.server.close()
        if self.envs is None:
            return []
        with self.lock:
            pids = list(self.envs.worker_pids)
            self.envs.close()
        return pids

    # --- internals ---------------------------------------------------------------------

    def _pool(self) -> ShmVectorEnv:
        """The actor's pool; when it could not be made, the error that says why."""
        if self.envs is None:
            raise self.init_error or RuntimeError("this actor has no pool: its start-up did not finish")
        return self.envs

    def _check_fresh(self) -> None:
        if self.restarted:
            raise ActorRestarted("this actor was restarted by Ray: reset it first")

    def _run(self, call: Callable[[], Any]) -> Any:
        """The batch of ``call()`` with global env ids."""
        try:
            batch = call()
        except Exception as e:
            raise self._global(e) from None
        infos = batch[-1]
        infos["env_id"] = infos["env_id"] + np.int32(self.first_env)
        if "restarted_envs" in infos:
            infos["restarted_envs"] = [i + self.first_env for i in infos["restarted_envs"]]
        return batch

    def _global(self, error: BaseException) -> BaseException:
        """A shmenv error with its env ids made global, and the actor named."""
        if not isinstance(error, Error):
            return error
        # The errors that carry env ids (the extension sets them; getattr: a Python-raised
        # one may lack them). UnknownEnvError's env_id is a name, not an index.
        if isinstance(error, (WorkerDiedError, WorkerTimeoutError)):
            env_ids = getattr(error, "env_ids", None)
            if env_ids is not None:
                error.env_ids = [i + self.first_env for i in env_ids]
        if isinstance(error, WorkerError):
            env_id = getattr(error, "env_id", None)
            if isinstance(env_id, int):
                error.env_id = env_id + self.first_env
        note = f"(in the Ray actor on node {self.node_id}, pid {os.getpid()}, hosting envs from {self.first_env}: "
        note += f"the env ids in this message are local, add {self.first_env})"
        if error.args and isinstance(error.args[0], str) and self.first_env:
            error.args = (f"{error.args[0]} {note}", *error.args[1:])
        return error


# --- joining the actors' batches -------------------------------------------------------


def split_evenly(total: int, parts: int) -> list[tuple[int, int]]:
    """``[a, b)`` ranges of ``total`` items in ``parts`` contiguous shards, each of
    ``total // parts`` or one more items: the engine's split of envs among workers
    (``_shmenv.shard``, the one rule), so actor ``k`` hosts the envs that worker ``k`` of
    one pool of ``total`` envs and ``parts`` workers would."""
    return [shard(k, total, parts) for k in range(parts)]


def concat_batches(batches: Sequence[tuple]) -> tuple:
    """One ``(obs, rewards, terminations, truncations, infos)`` (or ``(obs, infos)``)
    batch from several, rows in order: arrays concatenated, infos merged key by key."""
    sizes = [len(b[-2] if len(b) == 5 else b[-1]["env_id"]) for b in batches]
    columns = [_concat([b[i] for b in batches]) for i in range(len(batches[0]) - 1)]
    return (*columns, merge_infos([b[-1] for b in batches], sizes))


def _concat(values: list) -> Any:
    if isinstance(values[0], dict):
        return {k: np.concatenate([v[k] for v in values]) for k in values[0]}
    return np.concatenate(values)


def merge_infos(infos: Sequence[dict], sizes: Sequence[int]) -> dict:
    """Infos of consecutive row ranges as one batch's: per-row arrays concatenated (a key
    an actor did not return is filled as Gymnasium fills it: zeros, False or None), dicts
    merged the same way, ``restarted_envs`` lists joined."""
    keys = list(dict.fromkeys(k for i in infos for k in i))
    out: dict[str, Any] = {}
    for key in keys:
        values = [i.get(key) for i in infos]
        present = [v for v in values if v is not None]
        if key == "restarted_envs":
            out[key] = [e for v in present for e in v]
        elif all(isinstance(v, dict) for v in present):
            out[key] = merge_infos([v or {} for v in values], sizes)
        elif all(isinstance(v, np.ndarray) and v.ndim >= 1 for v in present):
            like = present[0]
            out[key] = np.concatenate([_filler(like, n) if v is None else v for v, n in zip(values, sizes)])
        else:
            out[key] = present[0]
    return out


def _filler(like: np.ndarray, rows: int) -> np.ndarray:
    if like.dtype == object:
        return np.full((rows, *like.shape[1:]), None, dtype=object)
    return np.zeros((rows, *like.shape[1:]), dtype=like.dtype)


def take_rows(batch: tuple, rows: np.ndarray) -> tuple:
    """The ``rows`` of a 5-tuple batch (arrays indexed, infos' per-row arrays too)."""
    obs, rewards, terms, truncs, infos = batch
    size = len(rewards)
    taken = {k: v[rows] for k, v in obs.items()} if isinstance(obs, dict) else obs[rows]
    return taken, rewards[rows], terms[rows], truncs[rows], _take_infos(infos, rows, size)


def _take_infos(infos: dict, rows: np.ndarray, size: int) -> dict:
    out: dict[str, Any] = {}
    kept = set(infos["env_id"][rows].tolist()) if "env_id" in infos else set()
    for key, value in infos.items():
        if key == "restarted_envs":
            value = [e for e in value if e in kept]
            if value:
                out[key] = value
        elif isinstance(value, dict):
            out[key] = _take_infos(value, rows, size)
        elif isinstance(value, np.ndarray) and value.ndim >= 1 and len(value) == size:
            out[key] = value[rows]
        else:
            out[key] = value
    return out
