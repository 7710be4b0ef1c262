"""``python -m shmenv.multiagent.bench``: multi-agent stepping speed, env-steps/s and
agent-steps/s, of shmenv.multiagent against SuperSuit's ``concat_vec_envs_v1`` and
TorchRL's ``ParallelEnv(PettingZooWrapper)`` over the same PettingZoo env, in one run.

    python -m shmenv.multiagent.bench --env simple_spread --num-envs 8
    python -m shmenv.multiagent.bench --env commons_harvest --num-envs 16

Each contestant steps ``--num-envs`` envs with random valid actions for ``--seconds``
after a warm-up (start-up is not timed) and prints one row; a contestant whose package is
missing, or that cannot host the env (SuperSuit pickles the env: a dmlab2d ``Lab2d`` does
not pickle), prints why. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any, Callable

ENVS = {
    "simple_spread": ("mpe2.simple_spread_v3:parallel_env", {"N": 3, "max_cycles": 25}),
    "pistonball": ("pettingzoo.butterfly.pistonball_v6:parallel_env", {"n_pistons": 20}),
    "commons_harvest": ("shmenv.multiagent.lab2d:Lab2dParallelEnv", {"level": "commons_harvest", "num_players": 4}),
}


def _maker(name: str) -> Callable[[], Any]:
    from shmenv.multiagent.adapter import _load

    entry, kwargs = ENVS[name]
    return functools.partial(_load(entry), **kwargs)


def _timed(step: Callable[[int], object], seconds: float, warmup: int = 5) -> tuple[int, float]:
    """Calls ``step(k)`` ``warmup`` times, then for ``seconds``; (steps, elapsed)."""
    for k in range(warmup):
        step(k)
    start, k = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        step(k)
        k += 1
    return k, time.perf_counter() - start


def run_shmenv(make: Callable, n: int, seconds: float, workers: int) -> tuple[int, float, int]:
    import shmenv.multiagent as ma

    with ma.make_vec(make, n, num_workers=workers, seed=0) as envs:
        envs.reset()
        space = envs.action_space
        batches = [space.sample() for _ in range(16)]
        steps, elapsed = _timed(lambda k: envs.step(batches[k % 16]), seconds)
        return steps * n, elapsed, envs.num_agents


def run_supersuit(make: Callable, n: int, seconds: float, workers: int) -> tuple[int, float, int]:
    import supersuit

    venv = supersuit.concat_vec_envs_v1(supersuit.pettingzoo_env_to_vec_env_v1(make()), n, num_cpus=workers)
    try:
        venv.reset(seed=0)
        rows = venv.num_envs
        from gymnasium.vector.utils import batch_space

        space = batch_space(venv.action_space, rows)
        batches = [space.sample() for _ in range(16)]
        steps, elapsed = _timed(lambda k: venv.step(batches[k % 16]), seconds)
        return steps * n, elapsed, rows // n
    finally:
        venv.close()


def run_torchrl(make: Callable, n: int, seconds: float, workers: int) -> tuple[int, float, int]:
    from torchrl.envs import ParallelEnv

    env = ParallelEnv(n, functools.partial(_wrapped, make))
    try:
        return _rollouts(env, n, seconds)
    finally:
        env.close()


def _wrapped(make: Callable) -> Any:
    import warnings

    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return PettingZooWrapper(make(), done_on_any=False)


def run_torchrl_shmenv(make: Callable, n: int, seconds: float, workers: int) -> tuple[int, float, int]:
    from shmenv.libs.torchrl_multiagent import MultiAgentShmEnv

    with MultiAgentShmEnv(make, n, num_workers=workers, seed=0) as env:
        return _rollouts(env, n, seconds)


def _rollouts(env: Any, n: int, seconds: float) -> tuple[int, float, int]:
    """TorchRL rollouts of 20 steps with the random policy until ``seconds`` have passed."""
    td = env.reset()  # (starts a ParallelEnv's workers)
    roots = ("done", "terminated", "truncated")
    agents = sum(td.get(g).batch_size[-1] for g in td.keys() if g not in roots)
    env.rollout(5, break_when_any_done=False)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        env.rollout(20, break_when_any_done=False)
        steps += 20
    return steps * n, time.perf_counter() - start, agents


CONTESTANTS = {
    "shmenv": run_shmenv,
    "supersuit": run_supersuit,
    "torchrl": run_torchrl,
    "torchrl-shmenv": run_torchrl_shmenv,
}
LABELS = {
    "shmenv": "shmenv.multiagent.make_vec",
    "supersuit": "SuperSuit concat_vec_envs_v1 (num_cpus={w})",
    "torchrl": "TorchRL ParallelEnv({n}, PettingZooWrapper)",
    "torchrl-shmenv": "shmenv.multiagent.torchrl.MultiAgentShmEnv (rollout)",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m shmenv.multiagent.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--env", choices=sorted(ENVS), default="simple_spread", help="the PettingZoo env")
    parser.add_argument("--num-envs", type=int, default=8, help="envs stepped together (default 8)")
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes of shmenv and SuperSuit (default: one per core)",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per contestant (default 5)")
    parser.add_argument(
        "--contestants",
        default=",".join(CONTESTANTS),
        help=f"comma-separated, of {', '.join(CONTESTANTS)} (default: all)",
    )
    args = parser.parse_args(argv)
    make = _maker(args.env)
    print(
        f"env {args.env}, {args.num_envs} envs, {args.workers} workers, {args.seconds:g} s each; "
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print("| contestant | env-steps/s | agent-steps/s |\n|---|---|---|")
    for name in args.contestants.split(","):
        label = LABELS[name].format(n=args.num_envs, w=args.workers)
        try:
            env_steps, elapsed, agents = CONTESTANTS[name](make, args.num_envs, args.seconds, args.workers)
        except ImportError as e:
            print(f"| {label} | not installed ({e.name}) | |")
            continue
        except Exception as e:  # noqa: BLE001 - a contestant that cannot host the env is a result
            print(f"| {label} | fails: {type(e).__name__}: {str(e).splitlines()[0][:120]} | |")
            continue
        rate = env_steps / elapsed
        print(f"| {label} | {rate:,.0f} | {rate * agents:,.0f} |", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
