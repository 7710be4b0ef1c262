"""``python -m shmenv.bench``: steps an env through shmenv and, when installed, through
Gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv(shared_memory=True)`` and EnvPool, in one
run, and prints steps/s with ratios.

Contestants run one at a time (idle engines may still hold cores: EnvPool's threads, a
process per env), in ``--passes`` passes over all of them; each pass builds a contestant,
warms it up, times ``--rounds`` rounds of ``--round-seconds`` and closes it. The table
reports each one's median round, so the noise of a shared machine hits all of them alike.
Actions are the same random sequence for everybody.

    python -m shmenv.bench --env CartPole-v1 --num-envs 32 --workers 2 --png bench.png
    python -m shmenv.bench --env CartPole-v1 --python --num-envs 32      # Gymnasium's CartPole in shmenv
    python -m shmenv.bench --env shmenv.pyenvs:BurnEnv --config '{"step_us": 50}' --num-envs 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Contestant:
    """One engine under test: `step()` advances it and returns how many env steps it made."""

    name: str
    step: Callable[[], int]
    close: Callable[[], None]
    rates: list[float] = field(default_factory=list)

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

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def _actions(space, num_envs: int, count: int = 64, seed: int = 0) -> list[np.ndarray]:
    space.seed(seed)
    return [np.asarray([space.sample() for _ in range(num_envs)]) for _ in range(count)]


def _cycle(actions: list[np.ndarray]) -> Callable[[], np.ndarray]:
    i = 0

    def next_actions() -> np.ndarray:
        nonlocal i
        i = (i + 1) % len(actions)
        return actions[i]

    return next_actions


def _target(env_id: str, python: bool):
    """What shmenv runs: the native env, or with `python` the Gymnasium (Python) env of that id."""
    if python:
        import gymnasium as gym

        return gym.spec(env_id)
    return env_id


def _kind(env_id: str, python: bool) -> str:
    import shmenv

    return "native" if env_id in shmenv.builtin_env_ids() and not python else "Python env"


def shmenv_sync(env_id: str, n: int, workers: int, config: dict | None, python: bool = False) -> Contestant:
    import shmenv

    envs = shmenv.make_vec(_target(env_id, python), n, num_workers=workers, seed=0, config=config)
    envs.reset()
    acts = _cycle(_actions(envs.single_action_space, n))

    def step() -> int:
        envs.step(acts())
        return n

    return Contestant(f"shmenv sync ({workers} workers, {_kind(env_id, python)})", step, envs.close)


def shmenv_async(env_id: str, n: int, workers: int, batch: int, config: dict | None, python: bool) -> Contestant:
    import shmenv

    envs = shmenv.make_vec(_target(env_id, python), n, num_workers=workers, batch_size=batch, seed=0, config=config)
    envs.async_reset()
    acts = _cycle(_actions(envs.single_action_space, batch))

    def step() -> int:
        *_, ids = envs.recv()
        envs.send(acts(), ids)
        return batch

    return Contestant(f"shmenv async (batch {batch}, {workers} workers, {_kind(env_id, python)})", step, envs.close)


def gymnasium_vec(env_id: str, n: int, mode: str, config: dict | None) -> Contestant:
    import gymnasium as gym

    if ":" in env_id and env_id not in gym.registry:  # an entry point
        from shmenv.worker import load_entry_point

        factory = load_entry_point(env_id)
        fns = [lambda: factory(**(config or {})) for _ in range(n)]
        if mode == "async":
            envs = gym.vector.AsyncVectorEnv(fns, shared_memory=True)
        else:
            envs = gym.vector.SyncVectorEnv(fns)
    else:
        kwargs = {"shared_memory": True} if mode == "async" else {}
        envs = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode, vector_kwargs=kwargs)
    envs.reset(seed=0)
    acts = _cycle(_actions(envs.single_action_space, n))

    def step() -> int:
        envs.step(acts())
        return n

    label = "gymnasium AsyncVectorEnv(shared_memory=True)" if mode == "async" else "gymnasium SyncVectorEnv"
    return Contestant(label, step, envs.close)


def envpool_vec(env_id: str, n: int, threads: int, batch: int | None) -> Contestant:
    import envpool

    b = batch or n
    envs = envpool.make(env_id, env_type="gymnasium", num_envs=n, batch_size=b, num_threads=threads, seed=0)
    acts = _cycle(_actions(envs.action_space, b))
    if b == n:
        envs.reset()

        def step() -> int:
            envs.step(acts())
            return n

        label = f"EnvPool {envpool.__version__} sync ({threads} threads)"
    else:
        envs.async_reset()

        def step() -> int:
            info = envs.recv()[-1]
            envs.send(acts(), info["env_id"])
            return b

        label = f"EnvPool {envpool.__version__} async (batch {b}, {threads} threads)"
    return Contestant(label, step, envs.close)


def _settle(timeout: float = 10.0) -> None:
    """Waits until a closed contestant's processes are gone (AsyncVectorEnv's 32 workers
    take a while to exit and would eat the next contestant's cores), then a moment more."""
    import gc
    import multiprocessing

    gc.collect()
    deadline = time.monotonic() + timeout
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)


def call_overhead(env_id: str, config: dict | None) -> float:
    """Microseconds per `step()` call of a 1-env, 1-worker shmenv pool (native env)."""
    c = shmenv_sync(env_id, 1, 1, config)
    try:
        for _ in range(2000):
            c.step()
        for _ in range(5):
            c.round(0.3)
        return 1e6 / c.median
    finally:
        c.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shmenv.bench", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--env",
        default="CartPole-v1",
        help="a native or Gymnasium id, or an entry point 'module:Class' (e.g. shmenv.pyenvs:BurnEnv)",
    )
    p.add_argument(
        "--python",
        action="store_true",
        help="host the Gymnasium (Python) env of --env in shmenv's workers instead of the native one",
    )
    p.add_argument("--num-envs", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="shmenv workers and EnvPool threads")
    p.add_argument("--batch-size", type=int, default=None, help="async batch (default num_envs / 2)")
    p.add_argument("--config", type=json.loads, default=None, help="shmenv env config (JSON)")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3, help="rounds per pass")
    p.add_argument("--round-seconds", type=float, default=0.5)
    p.add_argument(
        "--only",
        default="shmenv,shmenv-async,sync,async,envpool,envpool-async",
        help="comma-separated contestants: shmenv, shmenv-async, sync, async, envpool, envpool-async",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--png", default=None, help="save a bar chart (needs matplotlib)")
    args = p.parse_args(argv)
    n, w = args.num_envs, args.workers
    batch = args.batch_size or max(1, n // 2)
    wanted = set(args.only.split(","))

    makers: list[tuple[str, Callable[[], Contestant]]] = [
        ("shmenv", lambda: shmenv_sync(args.env, n, w, args.config, args.python)),
        ("shmenv-async", lambda: shmenv_async(args.env, n, w, batch, args.config, args.python)),
        ("sync", lambda: gymnasium_vec(args.env, n, "sync", args.config)),
        ("async", lambda: gymnasium_vec(args.env, n, "async", args.config)),
        ("envpool", lambda: envpool_vec(args.env, n, w, None)),
        ("envpool-async", lambda: envpool_vec(args.env, n, w, batch)),
    ]
    rates: dict[str, list[float]] = {}
    skipped: dict[str, str] = {}
    for _ in range(args.passes):
        for key, make in makers:
            if key not in wanted or key in skipped or (key == "shmenv-async" and batch >= n):
                continue
            try:
                c = make()
            except ImportError as e:
                skipped[key] = f"{e.name or e} not installed"
                continue
            except Exception as e:  # noqa: BLE001 - a contestant that cannot run is reported, not fatal
                skipped[key] = f"{type(e).__name__}: {e}"
                continue
            try:
                c.round(0.2)  # warm-up
                c.rates.clear()
                for _ in range(args.rounds):
                    c.round(args.round_seconds)
            finally:
                c.close()
                _settle()
            rates.setdefault(c.name, []).extend(c.rates)
    contestants = [Contestant(name, lambda: 0, lambda: None, r) for name, r in rates.items()]
    import shmenv

    native = args.env in shmenv.builtin_env_ids() and not args.python
    overhead = call_overhead(args.env, args.config) if "shmenv" in wanted and native else None

    base = next((c.median for c in contestants if c.name.startswith("shmenv sync")), None)
    sync_ref = next((c.median for c in contestants if c.name == "gymnasium SyncVectorEnv"), None)
    rows = [
        {
            "name": c.name,
            "steps_per_sec": round(c.median),
            "min": round(min(c.rates)),
            "max": round(max(c.rates)),
            "shmenv_ratio": (base / c.median) if base else None,
            "vs_sync_vector_env": (c.median / sync_ref) if sync_ref else None,
        }
        for c in contestants
    ]
    result = {
        "env": args.env,
        "num_envs": n,
        "workers": w,
        "batch_size": batch,
        "rounds": args.rounds * args.passes,
        "rows": rows,
        "shmenv_step_call_us_1_env": overhead,
        "skipped": skipped,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.env}, {n} envs, {w} workers/threads, median of {args.passes} x {args.rounds} rounds")
        width = max(len(r["name"]) for r in rows) if rows else 10
        print(f"{'engine':<{width}}  {'steps/s':>12}  {'range':>23}  {'shmenv sync is':>14}  {'x SyncVectorEnv':>15}")
        for r in rows:
            ratio = f"{r['shmenv_ratio']:.2f}x" if r["shmenv_ratio"] else "-"
            vs = f"{r['vs_sync_vector_env']:.2f}x" if r["vs_sync_vector_env"] else "-"
            span = f"{r['min']:,}-{r['max']:,}"
            print(f"{r['name']:<{width}}  {r['steps_per_sec']:>12,}  {span:>23}  {ratio:>14}  {vs:>15}")
        if overhead is not None:
            print(f"shmenv step() call, 1 env, 1 worker: {overhead:.2f} us")
        for key, why in skipped.items():
            print(f"skipped {key}: {why}")
    if args.png:
        _chart(result, args.png)
    return 0


def _chart(result: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--png needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.5))
    names = [r["name"] for r in rows][::-1]
    rates = [r["steps_per_sec"] for r in rows][::-1]
    bars = ax.barh(names, rates, color=["#d62728" if n.startswith("shmenv") else "#7f7f7f" for n in names])
    ax.bar_label(bars, labels=[f"{r / 1e6:.2f}M" if r >= 1e6 else f"{r / 1e3:.0f}k" for r in rates], padding=3)
    ax.set_xscale("log")
    ax.set_xlabel("env steps per second (log scale)")
    ax.set_title(f"{result['env']}, {result['num_envs']} envs, {result['workers']} workers/threads")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"saved {path}")


if __name__ == "__main__":
    sys.exit(main())
