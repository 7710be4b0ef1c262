"""What an info returned at every step costs: ``python -m shmenv.bench.infos``.

Steps/s of hosted Gymnasium CartPole-v1 envs (default 32 envs, 2 workers) wrapped by
:class:`LivesCartPole`, which returns ``{"lives": 3}`` at every step (as Atari envs do),
against the same wrapper returning no info. Rounds alternate between the two pools (both
built first and warmed up), and the figures are the median rounds: on a machine shared
with other work a single round says little.
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np


class LivesCartPole(gym.Wrapper):
    """Gymnasium's CartPole-v1 returning ``{"lives": 3}`` at every step (``lives=False``:
    the same wrapper returning no info)."""

    def __init__(self, lives: bool = True):
        super().__init__(gym.make("CartPole-v1", disable_env_checker=True))
        self.info = {"lives": 3} if lives else {}

    def step(self, action):
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, reward, terminated, truncated, dict(self.info)


def steps_per_second(envs, seconds: float) -> float:
    """Env steps per second of ``envs`` over about ``seconds``, random actions."""
    actions = [np.random.default_rng(i).integers(0, 2, envs.num_envs) for i in range(64)]
    for k in range(20):  # the idle pool's workers went to sleep: wake them first
        envs.step(actions[k % 64])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for k in range(50):
            envs.step(actions[k % 64])
        steps += 50
    return steps * envs.num_envs / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    from shmenv import make_vec

    parser = argparse.ArgumentParser(prog="python -m shmenv.bench.infos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0, help="per round and pool")
    args = parser.parse_args(argv)
    results: dict[str, list[float]] = {"no info": [], "lives every step": []}
    entry = "shmenv.bench.infos:LivesCartPole"
    pools = [make_vec(entry, args.envs, num_workers=args.workers, seed=0, config={"lives": v}) for v in (False, True)]
    with pools[0] as plain, pools[1] as lives:
        for envs in (plain, lives):
            envs.reset()
            steps_per_second(envs, 0.5)
        for _ in range(args.rounds):
            results["no info"].append(steps_per_second(plain, args.seconds))
            results["lives every step"].append(steps_per_second(lives, args.seconds))
    medians = {k: statistics.median(v) for k, v in results.items()}
    for name, value in medians.items():
        print(f"{name:>18}: {value:10.0f} steps/s (rounds: {', '.join(f'{v:.0f}' for v in results[name])})")
    print(f"{'ratio':>18}: {medians['lives every step'] / medians['no info']:.2f}")


if __name__ == "__main__":
    main()
