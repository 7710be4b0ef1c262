"""``python -m shmenv.bench.ray``: what the Ray path costs per batch, against one local pool
of the same size, measured in the same run on a Ray cluster of 2 nodes simulated on this
machine (``ray.cluster_utils.Cluster``), plus the figures ``docs/scaling.md`` builds on.

Cases (random actions): CartPole-v1 with 64 envs and Burn-v0 with ``step_us`` 1000 (16
envs), sync ``step``; the Burn-v0 case again in async mode (batch 8, EnvPool loop). The Ray env has 2 actors, one per node, each a pool of half the
envs with 1 worker; the local pool has the same envs and 2 workers. Rounds alternate
between the two (so the machine's noise hits both alike) and the figures are medians.
Also measured: the round trip of an empty Ray actor call, the local pool's per-batch time
for a 1-env no-op env, the bytes of one batch, and where a sync Burn-v0 batch's time goes
(``breakdown``)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import numpy as np

CASES = [
    ("CartPole-v1", 64, None, None),
    ("Burn-v0", 16, {"step_us": 1000}, None),
    ("Burn-v0", 16, {"step_us": 1000}, 8),
]
"""(env, num_envs, config, batch_size): None is sync mode."""


def _time_batches(envs, state: dict, seconds: float) -> float:
    """Seconds per batch over a round of about ``seconds``: a sync ``step``, or in async
    mode ``step(actions, ids)`` (``send`` + ``recv``) of the envs the last batch returned,
    kept in ``state["ids"]``. The first batch warms up (the idle pool's workers went to
    sleep while the other contender ran)."""
    actions = [envs.action_space.sample() for _ in range(8)]
    n, start = -1, 0.0
    while n < 0 or time.perf_counter() - start < seconds:
        state["ids"] = envs.step(actions[n % 8], state["ids"] if envs.is_async else None)[4]["env_id"]
        n += 1
        if n == 0:
            start = time.perf_counter()
    return (time.perf_counter() - start) / n


def batch_bytes(batch: tuple) -> int:
    """Bytes of a batch's arrays (observations, rewards, flags, per-row infos)."""

    def size(x: Any) -> int:
        if isinstance(x, np.ndarray):
            return x.nbytes
        if isinstance(x, dict):
            return sum(size(v) for v in x.values())
        return 0

    return sum(size(x) for x in batch)


def compare(
    env_id: str, num_envs: int, config: dict | None, batch_size: int | None, rounds: int, seconds: float
) -> dict:
    import shmenv
    import shmenv.ray

    kwargs: dict[str, Any] = dict(num_workers=2, seed=0, config=config, batch_size=batch_size)
    ray_envs = shmenv.ray.make_vec(
        env_id, num_envs, num_actors=2, placement="strict_spread", num_cpus_per_actor=1, **kwargs
    )
    local = shmenv.make_vec(env_id, num_envs, **kwargs)
    times: dict[str, list[float]] = {"ray": [], "local": []}
    states = {"ray": {}, "local": {}}
    try:
        for name, envs in (("ray", ray_envs), ("local", local)):
            states[name]["ids"] = envs.reset()[1]["env_id"]
        first = local.step(local.action_space.sample(), states["local"]["ids"] if local.is_async else None)
        nbytes = batch_bytes(first)
        states["local"]["ids"] = first[4]["env_id"]  # async: the envs to send next (all 16 stay in flight)
        for _ in range(rounds):
            times["ray"].append(_time_batches(ray_envs, states["ray"], seconds))
            times["local"].append(_time_batches(local, states["local"], seconds))
    finally:
        ray_envs.close()
        local.close()
    ray_s, local_s = statistics.median(times["ray"]), statistics.median(times["local"])
    # Each round's ratio is of two neighbouring measurements, so a change of load between
    # rounds hits both sides: their median is the figure, not the ratio of the medians.
    per_round = [lo / r for lo, r in zip(times["local"], times["ray"])]
    rows = batch_size or num_envs
    return {
        "env": env_id,
        "num_envs": num_envs,
        "config": config or {},
        "batch_size": rows,
        "rounds": rounds,
        "local_us_per_batch": local_s * 1e6,
        "ray_us_per_batch": ray_s * 1e6,
        "ray_overhead_us_per_batch": (ray_s - local_s) * 1e6,
        "local_steps_per_sec": rows / local_s,
        "ray_steps_per_sec": rows / ray_s,
        "ratio": statistics.median(per_round),
        "bytes_per_batch": nbytes,
        "ratios_per_round": per_round,
    }


def ray_round_trip_us(rounds: int = 5, calls: int = 300) -> float:
    """Median microseconds of an empty actor call (``ray.get(actor.ping.remote())``) to an
    actor on the other simulated node."""
    import ray

    @ray.remote(num_cpus=0)
    class Echo:
        def ping(self, x=None):
            return x

    actor = Echo.remote()
    ray.get(actor.ping.remote())
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            ray.get(actor.ping.remote())
        out.append((time.perf_counter() - start) / calls * 1e6)
    ray.kill(actor)
    return statistics.median(out)


def local_handoff_us(rounds: int = 5, seconds: float = 0.2) -> float:
    """Median microseconds per ``step`` of a 1-env, 1-worker local pool of a no-op env."""
    import shmenv

    envs = shmenv.make_vec("Burn-v0", 1, num_workers=1, seed=0)
    try:
        envs.reset()
        return statistics.median(_time_batches(envs, {}, seconds) * 1e6 for _ in range(rounds))
    finally:
        envs.close()


def breakdown(steps: int = 300) -> dict:
    """Where a sync batch of the Burn-v0 case goes, median microseconds per batch over
    ``steps`` steps (the first 20 left out): the driver checking the actions and sending
    the requests; from a request's sending to its actor method starting; the actor method
    (the pool step); from the last actor method's end to the driver holding both results
    (the actor pickling and sending, the driver reading and unpickling); the driver joining
    them. The
    stages are timed with ``time.time()`` in the driver and in the actors, which share
    this machine's clock."""
    import ray

    from shmenv.ray import RayVectorEnv
    from shmenv.ray.host import PoolHost

    class TimedPoolHost(PoolHost):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.spans: list[tuple[float, float]] = []

        def step(self, actions: np.ndarray) -> Any:
            start = time.time()
            out = super().step(actions)
            self.spans.append((start, time.time()))
            return out

        def timings(self) -> list:
            return self.spans

    class TimedRayVectorEnv(RayVectorEnv):
        host_class = TimedPoolHost

    envs = TimedRayVectorEnv(
        "Burn-v0",
        16,
        num_actors=2,
        placement="strict_spread",
        num_cpus_per_actor=1,
        num_workers=2,
        seed=0,
        config={"step_us": 1000},
    )
    try:
        envs.reset()
        actions = [envs.action_space.sample() for _ in range(8)]
        driver = []
        for i in range(steps):
            t0 = time.time()
            batch = envs._actions(actions[i % 8], envs.num_envs)
            submitted, refs = [], []
            for channel, (lo, hi) in zip(envs._actors.channels, envs._shards):
                refs.append(channel.request("step", batch[lo:hi]))
                submitted.append(time.time())
            parts = [r.get() for r in refs]
            t2 = time.time()
            envs._join(parts)
            driver.append((t0, submitted, t2, time.time()))
        spans = [ray.get(actor.timings.remote())[20:] for actor in envs._actors.handles]
    finally:
        envs.close()
    driver = driver[20:]

    def median_us(values) -> float:
        return statistics.median(values) * 1e6

    rows = list(zip(driver, *spans))
    return {
        "batch": median_us(d[3] - d[0] for d, *_ in rows),
        "driver_submit": median_us(d[1][-1] - d[0] for d, *_ in rows),
        "to_actor": median_us(s[0] - d[1][k] for d, *ss in rows for k, s in enumerate(ss)),
        "actor_method": median_us(s[1] - s[0] for _, *ss in rows for s in ss),
        "back_to_driver": median_us(d[2] - max(s[1] for s in ss) for d, *ss in rows),
        "driver_join": median_us(d[3] - d[2] for d, *_ in rows),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m shmenv.bench.ray", description="shmenv's Ray path against one local pool of the same size"
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per round")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # the simulated nodes on 127.0.0.1
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        cluster.wait_for_nodes()
        report = {
            "ray_round_trip_us": ray_round_trip_us(),
            "local_handoff_us": local_handoff_us(),
            "cases": [compare(env, n, cfg, batch, args.rounds, args.seconds) for env, n, cfg, batch in CASES],
            "breakdown_us": breakdown(),
        }
    finally:
        ray.shutdown()
        cluster.shutdown()
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(
        f"empty Ray actor call: {report['ray_round_trip_us']:.0f} us; local 1-env handoff: "
        f"{report['local_handoff_us']:.1f} us"
    )
    for c in report["cases"]:
        mode = f"async batch {c['batch_size']}" if c["batch_size"] < c["num_envs"] else "sync"
        print(
            f"{c['env']} {c['config'] or ''} {c['num_envs']} envs {mode}: local {c['local_us_per_batch']:.0f} us/batch "
            f"({c['local_steps_per_sec']:,.0f} steps/s), Ray {c['ray_us_per_batch']:.0f} us/batch "
            f"({c['ray_steps_per_sec']:,.0f} steps/s), overhead {c['ray_overhead_us_per_batch']:.0f} us/batch, "
            f"Ray/local {c['ratio']:.2f}x (rounds {', '.join(f'{r:.2f}' for r in c['ratios_per_round'])}), "
            f"{c['bytes_per_batch']} bytes/batch"
        )
    print(
        "Burn-v0 sync batch through Ray, median us: "
        + ", ".join(f"{k} {v:.0f}" for k, v in report["breakdown_us"].items())
    )


if __name__ == "__main__":
    main()
