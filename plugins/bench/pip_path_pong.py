"""The pip path's Atari figure: ``shmenv.envpool.make("Pong-v5", env_type="gymnasium",
num_envs=N)`` (the ALE plugin wheel installed: the native plugin) against EnvPool's
``envpool.make`` with the same arguments and against shmenv's fallback without the plugin
(Gymnasium's ALE in Python workers, the plugin hidden from shmenv.plugins for that
contestant; needs opencv-python-headless), in interleaved rounds; prints each round and the
medians as one JSON line at the end.

    python plugins/bench/pip_path_pong.py [--num-envs 8] [--rounds 5] [--seconds 3]

Run it with a virtualenv that has shmenv, shmenv-ale and envpool==1.2.5 installed (not
this clone's sources: from an empty folder), on an idle machine (load average < 0.7)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np


def steps_per_second(make, n: int, seconds: float) -> float:
    env = make()
    try:
        env.reset()
        actions = np.random.default_rng(0).integers(0, 6, (1024, n))
        for t in range(50):  # warm-up
            env.step(actions[t % 1024])
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            env.step(actions[steps % 1024])
            steps += 1
        return steps * n / (time.perf_counter() - start)
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    import envpool
    import shmenv
    import shmenv.envpool as shm_envpool
    from shmenv import plugins

    n = args.num_envs
    native = plugins.find("AtariC-v5")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = shm_envpool.make("Pong-v5", env_type="gymnasium", num_envs=n)
        probe.close()
    path = (
        f"native plugin from {native.distribution} {native.version}"
        if native
        else "Gymnasium's ALE (Python workers)"
    )
    print(
        f"shmenv {shmenv.__version__} from {os.path.dirname(shmenv.__file__)}: Pong-v5 runs the {path}"
    )
    for w in caught:
        print("warning:", w.message)

    def fallback():
        # As without the shmenv-ale package: its ids hidden from the entry-point listing.
        kept = {k: v for k, v in plugins.installed().items() if k not in plugins.KNOWN}
        saved, plugins._installed = plugins._installed, kept
        plugins._found.clear()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", plugins.NativePluginMissingWarning)
                return shm_envpool.make("Pong-v5", env_type="gymnasium", num_envs=n)
        finally:
            plugins._installed = saved
            plugins._found.clear()

    contestants = {
        "shmenv.envpool.make": lambda: shm_envpool.make(
            "Pong-v5", env_type="gymnasium", num_envs=n
        ),
        "envpool.make": lambda: envpool.make(
            "Pong-v5", env_type="gymnasium", num_envs=n
        ),
        "shmenv.envpool.make without the plugin": fallback,
    }
    rounds: dict[str, list[float]] = {name: [] for name in contestants}
    for r in range(args.rounds):
        for name, make in (
            contestants.items() if r % 2 == 0 else reversed(list(contestants.items()))
        ):
            rounds[name].append(steps_per_second(make, n, args.seconds))
        print(
            f"round {r + 1}: "
            + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in rounds.items()),
            flush=True,
        )
    medians = {k: statistics.median(v) for k, v in rounds.items()}
    ratio = medians["shmenv.envpool.make"] / medians["envpool.make"]
    fallback_ratio = (
        medians["shmenv.envpool.make without the plugin"] / medians["envpool.make"]
    )
    print(
        json.dumps(
            {
                "num_envs": n,
                "path": path,
                "medians": medians,
                "rounds": rounds,
                "ratio": ratio,
                "fallback_ratio": fallback_ratio,
                "load_after": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
