"""What an info returned at every step costs: ``python -m shmenv.bench.infos``.

Two pools of the same hosted env, one whose envs return infos at every step and one whose
envs return none, both built first and warmed up, stepped with random actions:

- in alternating rounds: each pool's steps/s and the trainer's CPU time per batch (its
  thread's CPU time over the round, divided by the batches), medians of the rounds;
- then batch by batch, one pool then the other (``--pairs`` pairs, every other one the
  pool with infos first): **what the infos cost the trainer**, from the difference of the
  trainer thread's CPU time in each pair's two ``step`` calls: the median over the pairs
  of each order, and their mean (the difference of the rounds' figures moves by tens of
  microseconds between runs; a pair's two batches meet the same machine, and the second
  finds caches the first warmed, which the two orders undo; the trainer's CPU time includes
  its waits for the workers, which spin or yield for up to a millisecond, so work the infos
  add in the workers counts too);
- then ``--pairs`` batches of the pool with infos, timing each merge of the infos into the
  batch's (``shmenv.batches.Batches.merge_infos``, its thread's CPU time, median over the batches),
  and every other batch instead the same timing around a call that does nothing (where
  the trainer's caches are as cold), and the difference.

- ``--workload cartpole``: Gymnasium's CartPole-v1 wrapped by :class:`LivesCartPole`,
  which returns ``{"lives": 3}`` at every step (as Atari envs do), against the same
  wrapper returning no info (default 32 envs).
- ``--workload pong``: Gymnasium's ``ALE/Pong-v5`` with EnvPool's preprocessing
  (:func:`shmenv.bench.envs.make_atari`), which returns ``lives``, ``episode_frame_number``
  and ``frame_number``, against the same env with its infos dropped (:func:`atari`;
  default 16 envs; needs ``ale-py``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

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


class _NoInfos(gym.Wrapper):
    """An env whose ``reset`` and ``step`` return empty infos."""

    def reset(self, **kwargs: Any):
        return self.env.reset(**kwargs)[0], {}

    def step(self, action):
        return (*self.env.step(action)[:4], {})


def atari(game: str = "Pong", infos: bool = True) -> Any:
    """:func:`shmenv.bench.envs.make_atari`, with its infos dropped when ``infos`` is false."""
    from shmenv.bench.envs import make_atari

    env = make_atari(game)
    return env if infos else _NoInfos(env)


WORKLOADS = {
    # name: (entry point, config with infos, config without, default number of envs)
    "cartpole": ("shmenv.bench.infos:LivesCartPole", {"lives": True}, {"lives": False}, 32),
    "pong": ("shmenv.bench.infos:atari", {"infos": True}, {"infos": False}, 16),
}


def measure(envs, seconds: float) -> tuple[float, float]:
    """Env steps per second of ``envs`` over about ``seconds`` with random actions, and the
    trainer thread's CPU time per batch in microseconds."""
    actions = _actions(envs)
    for k in range(20):  # the idle pool's workers went to sleep: wake them first
        envs.step(actions[k % 64])
    batches, start, cpu = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - start < seconds:
        for k in range(10):
            envs.step(actions[k % 64])
        batches += 10
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - start
    return batches * envs.num_envs / wall, cpu / batches * 1e6


def main(argv: list[str] | None = None) -> None:
    from shmenv import make_vec

    parser = argparse.ArgumentParser(prog="python -m shmenv.bench.infos", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="cartpole")
    parser.add_argument("--envs", type=int, default=None, help="32 for cartpole, 16 for pong")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0, help="per round and pool")
    parser.add_argument("--pairs", type=int, default=300, help="batches of each pool, alternating")
    args = parser.parse_args(argv)
    if args.pairs < 4:
        parser.error(f"--pairs must be at least 4 (two pairs of each order), got {args.pairs}")
    entry, with_infos, without, default_envs = WORKLOADS[args.workload]
    n = args.envs or default_envs
    names = ("no info", "infos every step")
    rates: dict[str, list[float]] = {k: [] for k in names}
    cpus: dict[str, list[float]] = {k: [] for k in names}
    pools = [make_vec(entry, n, num_workers=args.workers, seed=0, config=c) for c in (without, with_infos)]
    with pools[0] as plain, pools[1] as noisy:
        for envs in (plain, noisy):
            envs.reset(seed=0)
            measure(envs, 0.5)
        for _ in range(args.rounds):
            for name, envs in zip(names, (plain, noisy)):
                rate, cpu = measure(envs, args.seconds)
                rates[name].append(rate)
                cpus[name].append(cpu)
        paired = _paired_costs(plain, noisy, args.pairs)
        merge_ns = _time_merges(noisy, args.pairs)
    print(f"{args.workload}, {n} envs, {args.workers} workers, {args.rounds} rounds (medians)")
    for name in names:
        rounds = ", ".join(f"{v:.0f}" for v in rates[name])
        print(
            f"{name:>18}: {statistics.median(rates[name]):10.0f} steps/s, "
            f"trainer CPU {statistics.median(cpus[name]):7.1f} us/batch (rounds: {rounds})"
        )
    ratio = statistics.median(rates[names[1]]) / statistics.median(rates[names[0]])
    print(f"{'ratio':>18}: {ratio:.2f}")
    plain_first, noisy_first = (statistics.median(d) / 1e3 for d in paired)
    print(
        f"{'infos cost':>18}: {(plain_first + noisy_first) / 2:.1f} us of trainer CPU per batch (the mean of the "
        f"medians of {len(paired[0]) + len(paired[1])} paired batches, {plain_first:.1f} with the pool without "
        f"infos first and {noisy_first:.1f} with it second)"
    )
    merge, timer = (statistics.median(ns[len(ns) // 4 :]) / 1e3 for ns in merge_ns)
    print(f"{'merging infos':>18}: {merge:.1f} us of trainer CPU per batch (median of {len(merge_ns[0])} batches)")
    print(f"{'the timer itself':>18}: {timer:.1f} us (the same timing around a call that does nothing)")
    print(f"{'merging, net':>18}: {merge - timer:.1f} us of trainer CPU per batch")


def _actions(envs) -> list[np.ndarray]:
    """64 batches of random actions for ``envs``."""
    n = envs.single_action_space.n
    return [np.random.default_rng(i).integers(0, n, envs.num_envs) for i in range(64)]


def _paired_costs(plain, noisy, pairs: int) -> tuple[list[int], list[int]]:
    """Steps ``plain`` and ``noisy`` one batch each, ``pairs`` times, every other pair
    ``noisy`` first; returns the differences (ns) of the trainer thread's CPU time in each
    pair's two ``step`` calls, ``noisy``'s less ``plain``'s, of the pairs where ``plain``
    went first and of those where ``noisy`` did. The second call of a pair finds the caches
    the first warmed (the same Python and extension code), so each list alone is off by
    that, the other way for each."""
    actions = _actions(plain)
    spent: tuple[list[int], list[int]] = ([], [])
    for k in range(pairs):
        first, second = (plain, noisy) if k % 2 == 0 else (noisy, plain)
        start = time.thread_time_ns()
        first.step(actions[k % 64])
        middle = time.thread_time_ns()
        second.step(actions[k % 64])
        end = time.thread_time_ns()
        difference = (end - middle) - (middle - start)
        spent[k % 2].append(difference if first is plain else -difference)
    return spent


def _time_merges(envs, batches: int) -> tuple[list[int], list[int]]:
    """Steps ``envs`` ``batches`` times, timing (thread CPU, ns) its merges of the hosted
    infos into a batch's infos and, every other batch, the same timing around a call that
    does nothing before the merge (so that no merge runs after a timing that warmed the
    caches for it)."""
    spent: list[int] = []
    timer: list[int] = []
    merge = envs._batches.merge_infos

    def nothing(*args: Any, **kwargs: Any) -> None:
        pass

    def timed(*args: Any, **kwargs: Any) -> None:
        if len(timer) < len(spent):
            start = time.thread_time_ns()
            nothing(*args, **kwargs)
            timer.append(time.thread_time_ns() - start)
            merge(*args, **kwargs)
            return
        start = time.thread_time_ns()
        merge(*args, **kwargs)
        spent.append(time.thread_time_ns() - start)

    envs._batches.merge_infos = timed
    try:
        actions = _actions(envs)
        for k in range(batches):
            envs.step(actions[k % 64])
    finally:
        del envs._batches.merge_infos
    return spent, timer


if __name__ == "__main__":
    main()
