"""``python -m shmenv.bench.torchrl [--envs 16] [--frames 4096] [--rounds 3] [--torch-threads 1]
[--parallel16]``: random-policy ``Collector`` frames/s for CartPole-v1, ``shmenv.torchrl.ShmEnv``
against TorchRL's own batched envs, rounds interleaved, medians printed. Needs torch and
TorchRL. (The ``__main__`` guard is for TorchRL's ``ParallelEnv`` baselines, which start
processes that re-import this module; ``ShmEnv`` itself needs none.)"""

from __future__ import annotations

import torch

from shmenv.torchrl import ShmEnv

def _gym_sync_vector(n: int):
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from torchrl.envs import GymWrapper

    return GymWrapper(
        SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)], autoreset_mode=AutoresetMode.DISABLED)
    )


def _gym_env():
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1")


def _bench(argv=None) -> None:
    import argparse
    import functools
    import os
    import statistics
    import time

    import gymnasium as gym
    from torchrl.collectors import Collector
    from torchrl.envs import ParallelEnv, SerialEnv

    parser = argparse.ArgumentParser(prog="python -m shmenv.torchrl", description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--frames", type=int, default=4096, help="frames per round and env kind")
    parser.add_argument("--batch", type=int, default=512, help="frames_per_batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="ShmEnv workers and ParallelEnv processes")
    parser.add_argument("--parallel16", action="store_true", help="also ParallelEnv(envs, GymEnv): one process per env")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    n, w = args.envs, args.workers
    this = __import__("shmenv.bench.torchrl", fromlist=["_gym_env"])  # picklable by name in TorchRL's processes

    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}, torch threads: {torch.get_num_threads()}")
    builders = {
        f"ShmEnv('CartPole-v1', {n}, num_workers={w}) [native CartPole]": lambda: ShmEnv(
            "CartPole-v1", n, num_workers=w, seed=0
        ),
        f"ShmEnv(gym.spec('CartPole-v1'), {n}, num_workers={w}) [Gymnasium's CartPole in workers]": lambda: ShmEnv(
            gym.spec("CartPole-v1"), n, num_workers=w, seed=0
        ),
        f"ParallelEnv({w}, GymWrapper(SyncVectorEnv x{n // w}))": lambda: ParallelEnv(
            w, functools.partial(this._gym_sync_vector, n // w)
        ),
        f"SerialEnv({n}, GymEnv('CartPole-v1'))": lambda: SerialEnv(n, this._gym_env),
        f"GymWrapper(SyncVectorEnv x{n}) [one process]": lambda: this._gym_sync_vector(n),
    }
    if args.parallel16:
        builders[f"ParallelEnv({n}, GymEnv('CartPole-v1'))"] = lambda: ParallelEnv(n, this._gym_env)
    rates: dict[str, list[float]] = {name: [] for name in builders}
    for r in range(args.rounds):
        for name, build in builders.items():
            # Built afresh each round, outside the timing (the Collector closes its env at
            # the end); the Collector's constructor resets the env, which starts
            # ParallelEnv's processes, so only collection is timed.
            t = time.perf_counter()
            env = build()
            env.set_seed(r)
            collector = Collector(env, None, frames_per_batch=args.batch, total_frames=args.frames)
            setup = time.perf_counter() - t
            frames = 0
            t = time.perf_counter()
            for batch in collector:
                frames += batch.numel()
            dt = time.perf_counter() - t
            collector.shutdown()
            if not env.is_closed:
                env.close()
            rates[name].append(frames / dt)
            print(f"round {r}: {frames / dt:>9,.0f} frames/s  {name}  (setup {setup:.1f} s)", flush=True)
    print(f"load average after: {os.getloadavg()}")
    base = statistics.median(next(iter(rates.values())))
    print(f"\nmedian of {args.rounds} rounds, {args.frames} frames each, frames_per_batch={args.batch}, random policy:")
    for name, values in rates.items():
        med = statistics.median(values)
        print(f"  {med:>10,.0f} frames/s  ({med / base:.2f}x of the first)  {name}  [{min(values):,.0f}-{max(values):,.0f}]")


if __name__ == "__main__":
    _bench()
