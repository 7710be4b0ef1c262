"""The cost of one ``step()`` call of a 1-env, 1-worker shmenv pool, with and without
copies, measured the way :func:`call_overhead` explains (used by ``python -m shmenv.bench``:
:mod:`shmenv.bench.compare`)."""

from __future__ import annotations

import gc
import os
import statistics
import time
from typing import Any, Callable

import numpy as np

#: Burn-v0 config keys that make each step burn CPU time: :func:`call_overhead` drops them.
_ENV_WORK_KEYS = ("step_us", "step_us_jitter")


def call_overhead(env_id: str, config: dict | None, rounds: int = 7, round_seconds: float = 0.05) -> dict[str, Any]:
    """Microseconds per `step()` call of a 1-env, 1-worker shmenv pool of native env
    `env_id`, with ``copy=True`` and ``copy=False``: the engine round trip plus the Python
    layer, not the env's work (Burn-v0's ``step_us``/``step_us_jitter`` are dropped from
    `config`; its observation shape stays, so an image env's copy shows).

    How, and why (an earlier version printed ~58-61 us where a direct loop takes ~2 us):

    - The trainer process is pinned, for the measurement only, to cores other than the
      worker's. A 1-worker pool pins its worker to the first core and counts 2 processes on
      2 cores, so the ``auto`` wait strategy spins (up to 50 us) before yielding. When the
      scheduler puts the unpinned trainer on the worker's core (likely when anything else
      runs on the other core, e.g. a build or the previous contestant's exiting
      processes), the spinning trainer holds the core the worker needs and every call
      costs the whole 50 us spin: measured here 58 us on the worker's core, 2.2 us on the
      other, 1.8-2 us unpinned on an idle machine. The earlier figure was that.
    - The env's own work is left out (the earlier version kept the user's ``step_us``:
      Burn-v0 with 50 us steps printed ~130 us).
    - Both pools are warmed up (first calls fault pages in, the wait policy's running
      average settles), rounds alternate between them with a short warm-up each (the idle
      pool's worker went to sleep meanwhile), each round is a fixed number of calls sized
      to `round_seconds`, the garbage collector is off while timing (as in ``timeit``),
      and the figure is the median round.
    """
    import shmenv

    cfg = {k: v for k, v in (config or {}).items() if k not in _ENV_WORK_KEYS} if env_id == "Burn-v0" else config
    allowed = os.sched_getaffinity(0)
    gc_was_enabled = gc.isenabled()
    pools: dict[bool, Any] = {}
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for copy in (True, False):
            pools[copy] = shmenv.make_vec(env_id, 1, num_workers=1, seed=0, config=cfg, copy=copy)
        worker_cores = {c for envs in pools.values() for pid in envs.worker_pids for c in os.sched_getaffinity(pid)}
        trainer_cores = allowed - worker_cores
        if trainer_cores:
            os.sched_setaffinity(0, trainer_cores)
        calls_of: dict[bool, tuple[Callable[..., Any], np.ndarray]] = {}
        for copy, envs in pools.items():
            envs.reset()
            act = np.asarray([envs.single_action_space.sample()])
            calls_of[copy] = (envs.step, act)
            for _ in range(2000):
                envs.step(act)
        gc.collect()
        gc.disable()
        calls = _time_rounds(calls_of, times, rounds, round_seconds)
    finally:
        if gc_was_enabled:
            gc.enable()
        os.sched_setaffinity(0, allowed)
        for envs in pools.values():
            envs.close()

    def summary(us: list[float]) -> dict[str, Any]:
        return {"median_us": statistics.median(us), "min_us": min(us), "max_us": max(us), "rounds_us": us}

    return {
        "env": env_id,
        "config": cfg,
        "calls_per_round": calls,
        "worker_cores": sorted(worker_cores),
        "trainer_cores": sorted(trainer_cores) if trainer_cores else sorted(allowed),
        "trainer_pinned": bool(trainer_cores),
        "copy": summary(times[True]),
        "nocopy": summary(times[False]),
        "copy_adds_us": statistics.median(times[True]) - statistics.median(times[False]),
    }


def _time_rounds(
    calls_of: dict[bool, tuple[Callable[..., Any], np.ndarray]],
    times: dict[bool, list[float]],
    rounds: int,
    round_seconds: float,
) -> int:
    """Times `rounds` rounds of each pool's ``step`` (the order alternating per round, a
    short warm-up before each), appending microseconds per call to `times`; returns the
    calls per round: enough for `round_seconds` at the speed of a calibration run."""
    step, act = calls_of[True]
    start = time.perf_counter()
    for _ in range(1000):
        step(act)
    per_call = (time.perf_counter() - start) / 1000
    calls = max(1000, int(round_seconds / max(per_call, 1e-7)))
    warm = max(200, calls // 10)
    for r in range(rounds):
        for copy in (True, False) if r % 2 == 0 else (False, True):
            step, act = calls_of[copy]
            for _ in range(warm):
                step(act)
            start = time.perf_counter()
            for _ in range(calls):
                step(act)
            times[copy].append((time.perf_counter() - start) / calls * 1e6)
    return calls
