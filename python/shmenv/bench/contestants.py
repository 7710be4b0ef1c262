"""The contestants of ``python -m shmenv.bench``: one engine under test each (shmenv sync
and async, Gymnasium's vector envs, EnvPool), with the helpers every benchmark mode
shares (random actions, waiting for a closed engine's processes to exit)."""

from __future__ import annotations

import gc
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from shmenv.errors import InvalidArgumentError

#: Contestant keys for ``--only``, in the order each pass runs them (each shmenv pair is
#: adjacent, so a copy / no-copy ratio compares neighbours in time).
KEYS = (
    "shmenv",
    "shmenv-nocopy",
    "shmenv-async",
    "shmenv-async-nocopy",
    "sync",
    "async",
    "envpool",
    "envpool-async",
)


class NotApplicable(Exception):
    """A baseline that has no counterpart for this env (reported, not an error)."""


@dataclass
class Contestant:
    """One engine under test: `step()` advances it and returns how many env steps it made."""

    name: str
    step: Callable[[], int]
    close: Callable[[], None]
    rates: list[float] = field(default_factory=list)
    key: str = ""
    #: Bytes of observations one `step()` returns (None when not known).
    obs_bytes: int | None = None

    def round(self, seconds: float) -> None:
        steps, start = 0, time.perf_counter()
        deadline = start + seconds
        while True:
            for _ in range(16):
                steps += self.step()
            now = time.perf_counter()
            if now >= deadline:
                break
        self.rates.append(steps / (now - start))

    def rounds(self, count: int, seconds: float, warm_up: float, on_round: Callable[[int], None] | None = None) -> None:
        """A warm-up round of ``warm_up`` s (not kept), then ``count`` rounds of ``seconds``;
        ``on_round(k)`` after the k-th (a progress line)."""
        self.round(warm_up)
        self.rates.clear()
        for k in range(count):
            self.round(seconds)
            if on_round is not None:
                on_round(k + 1)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def random_actions(space, num_envs: int, count: int = 64, seed: int = 0) -> list[np.ndarray]:
    """`count` batches of `num_envs` random actions of `space`, the same for every engine."""
    space.seed(seed)
    return [np.asarray([space.sample() for _ in range(num_envs)]) for _ in range(count)]


def cycle(actions: list[np.ndarray]) -> Callable[[], np.ndarray]:
    """A function returning the batches of `actions` in turn, forever."""
    i = 0

    def next_actions() -> np.ndarray:
        nonlocal i
        i = (i + 1) % len(actions)
        return actions[i]

    return next_actions


def _obs_bytes(space, rows: int) -> int | None:
    """Bytes of `rows` observations of `space` (a Box, or a Dict/Tuple of them)."""
    subspaces = getattr(space, "spaces", None)
    if subspaces is not None:
        parts = [_obs_bytes(s, rows) for s in (subspaces.values() if isinstance(subspaces, dict) else subspaces)]
        return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is None or dtype is None:
        return None
    return int(math.prod(shape)) * np.dtype(dtype).itemsize * rows


def _target(env_id: str, python: bool):
    """What shmenv runs: the native env, or with `python` the Gymnasium (Python) env of that id."""
    if python:
        import gymnasium as gym

        return gym.spec(env_id)
    return env_id


def is_native(env_id: str, python: bool) -> bool:
    import shmenv

    return env_id in shmenv.builtin_env_ids() and not python


def _kind(env_id: str, python: bool, plugin: str | None = None) -> str:
    if plugin is not None:
        return "C plugin"
    return "native" if is_native(env_id, python) else "Python env"


def _copy_label(copy: bool) -> str:
    return "" if copy else " copy=False"


def shmenv_sync(
    env_id: str,
    n: int,
    workers: int,
    config: dict | None,
    python: bool = False,
    copy: bool = True,
    plugin: str | None = None,
    **pool: Any,
) -> Contestant:
    """shmenv in sync mode; `copy` is passed explicitly (True: owned arrays, False: views);
    `pool` holds further ``make_vec`` keywords (``wait``, ``pin_workers``)."""
    import shmenv

    envs = shmenv.make_vec(
        _target(env_id, python), n, num_workers=workers, seed=0, config=config, copy=copy, plugin=plugin, **pool
    )
    envs.reset()
    acts = cycle(random_actions(envs.single_action_space, n))

    def step() -> int:
        envs.step(acts())
        return n

    name = f"shmenv sync{_copy_label(copy)} ({workers} workers, {_kind(env_id, python, plugin)})"
    return Contestant(name, step, envs.close, obs_bytes=_obs_bytes(envs.single_observation_space, n))


def shmenv_async(
    env_id: str,
    n: int,
    workers: int,
    batch: int,
    config: dict | None,
    python: bool,
    copy: bool = True,
    plugin: str | None = None,
    **pool: Any,
) -> Contestant:
    """shmenv in async mode (`batch` < `n`), EnvPool style: ``recv`` a batch, ``send`` its actions;
    `pool` holds further ``make_vec`` keywords (``wait``, ``pin_workers``)."""
    import shmenv

    envs = shmenv.make_vec(
        _target(env_id, python),
        n,
        num_workers=workers,
        batch_size=batch,
        seed=0,
        config=config,
        copy=copy,
        plugin=plugin,
        **pool,
    )
    envs.async_reset()
    acts = cycle(random_actions(envs.single_action_space, batch))

    def step() -> int:
        envs.send(acts(), envs.recv()[4]["env_id"])
        return batch

    name = f"shmenv async{_copy_label(copy)} (batch {batch}, {workers} workers, {_kind(env_id, python, plugin)})"
    return Contestant(name, step, envs.close, obs_bytes=_obs_bytes(envs.single_observation_space, batch))


def gymnasium_vec(env_id: str, n: int, mode: str, config: dict | None) -> Contestant:
    """Gymnasium's SyncVectorEnv or AsyncVectorEnv(shared_memory=True) of a Gymnasium id
    or an entry point ``module:Class`` (with `config` as keyword arguments)."""
    import gymnasium as gym

    if ":" in env_id and env_id not in gym.registry:  # an entry point
        from shmenv.worker import load_entry_point

        factory = load_entry_point(env_id)
        if not callable(factory):
            raise InvalidArgumentError(
                f"entry point {env_id!r} names a {type(factory).__name__}, not a callable: name the env's class "
                "or a function that returns the env"
            )
        make: Callable[..., Any] = factory
        fns = [lambda: make(**(config or {})) for _ in range(n)]
        if mode == "async":
            envs = gym.vector.AsyncVectorEnv(fns, shared_memory=True)
        else:
            envs = gym.vector.SyncVectorEnv(fns)
    elif env_id not in gym.registry:
        raise NotApplicable(f"Gymnasium has no {env_id} (a native shmenv env)")
    else:
        kwargs = {"shared_memory": True} if mode == "async" else {}
        envs = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode, vector_kwargs=kwargs)
    envs.reset(seed=0)
    acts = cycle(random_actions(envs.single_action_space, n))

    def step() -> int:
        envs.step(acts())
        return n

    label = "gymnasium AsyncVectorEnv(shared_memory=True)" if mode == "async" else "gymnasium SyncVectorEnv"
    return Contestant(label, step, envs.close, obs_bytes=_obs_bytes(envs.single_observation_space, n))


def envpool_vec(env_id: str, n: int, threads: int, batch: int | None, envpool_env: str | None = None) -> Contestant:
    """EnvPool sync (`batch` None) or async; `envpool_env` runs another EnvPool env than
    `env_id` (e.g. CartPole-v1 as the baseline of a native env EnvPool does not have)."""
    import envpool

    target = envpool_env or env_id
    if target not in envpool.list_all_envs():
        hint = "" if envpool_env else " (--envpool-env CartPole-v1 compares with EnvPool's CartPole instead)"
        raise NotApplicable(f"EnvPool has no {target}{hint}")
    b = batch or n
    envs = envpool.make(target, env_type="gymnasium", num_envs=n, batch_size=b, num_threads=threads, seed=0)
    acts = cycle(random_actions(envs.action_space, b))
    other = f" {target}" if target != env_id else ""
    if b == n:
        envs.reset()

        def step() -> int:
            envs.step(acts())
            return n

        label = f"EnvPool {envpool.__version__} sync{other} ({threads} threads)"
    else:
        envs.async_reset()

        def step() -> int:
            info = envs.recv()[-1]
            envs.send(acts(), info["env_id"])
            return b

        label = f"EnvPool {envpool.__version__} async{other} (batch {b}, {threads} threads)"
    return Contestant(label, step, envs.close, obs_bytes=_obs_bytes(envs.observation_space, b))


def settle(timeout: float = 10.0) -> None:
    """Waits until a closed contestant's processes are gone (AsyncVectorEnv's 32 workers
    take a while to exit and would eat the next contestant's cores), then a moment more."""
    import multiprocessing

    gc.collect()
    deadline = time.monotonic() + timeout
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
