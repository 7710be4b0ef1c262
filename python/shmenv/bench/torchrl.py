"""``python -m shmenv.bench.torchrl [--workload cartpole|pong|raw-pong|all] [--envs 16] [--rounds 3]
[--frames N] [--batch 512] [--workers 2] [--torch-threads T] [--plugin PATH] [--no-parallel-per-env] [--core] [--warmup 1]``:
random-policy ``Collector`` frames/s, ``shmenv.torchrl.ShmEnv`` against TorchRL's own batched
envs (``SerialEnv``, ``ParallelEnv``, ``MultiThreadedEnv`` over EnvPool) in the same run,
rounds interleaved, medians printed. Needs torch and TorchRL (and ale-py for Pong, EnvPool
for ``MultiThreadedEnv``). The ``__main__`` guard is for TorchRL's ``ParallelEnv``, which
starts processes that re-import this module; ``ShmEnv`` itself needs none."""

from __future__ import annotations

import functools
import os
import statistics
import time
from typing import Any, Callable

import torch

from shmenv.libs.torchrl import ShmEnv

#: The native ALE plugin as ``tests/run`` builds it (relative to the repository root).
_PLUGIN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "target", "plugins", "libale_atari.so")


# --- env factories, module-level so that ParallelEnv's processes find them by name ---------


def _gym_env(env_id: str):
    from torchrl.envs import GymEnv

    return GymEnv(env_id)


def _gym_sync_vector(n: int, env_id: str):
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from torchrl.envs import GymWrapper

    envs = SyncVectorEnv([lambda: gym.make(env_id) for _ in range(n)], autoreset_mode=AutoresetMode.DISABLED)
    return GymWrapper(envs)


def _atari_env():
    from torchrl.envs import GymWrapper

    from shmenv.bench.envs import make_atari

    return GymWrapper(make_atari())


def _raw_pong_env():
    import ale_py  # noqa: F401 - registers the ALE ids with Gymnasium
    from torchrl.envs import GymEnv

    return GymEnv("ALE/Pong-v5")


def _atari_sync_vector(n: int):
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from torchrl.envs import GymWrapper

    from shmenv.bench.envs import make_atari

    return GymWrapper(SyncVectorEnv([make_atari] * n, autoreset_mode=AutoresetMode.DISABLED))


def _multithreaded_env(n: int, task_id: str):
    """TorchRL's ``MultiThreadedEnv`` (EnvPool's threads). TorchRL 0.14.1 converts EnvPool's
    spaces under ``set_gym_backend("gym")``, which fails without the old ``gym`` package
    (and with it, as EnvPool 1.2.5 returns Gymnasium spaces): the Gymnasium backend is used
    for that conversion here."""
    import torchrl.envs.libs.gym as torchrl_gym
    from torchrl.envs import MultiThreadedEnv

    original = torchrl_gym.set_gym_backend
    torchrl_gym.set_gym_backend = lambda backend: original("gymnasium" if backend == "gym" else backend)
    try:
        return MultiThreadedEnv(n, task_id)
    finally:
        torchrl_gym.set_gym_backend = original


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# --- what runs -----------------------------------------------------------------------------


def cartpole_builders(n: int, w: int | None, per_env: bool) -> dict[str, Callable[[], Any]]:
    """CartPole-v1: shmenv's native and Gymnasium's CartPole in ShmEnv's workers, TorchRL's
    SerialEnv and ParallelEnv over GymEnv, and EnvPool's threads."""
    import gymnasium as gym
    from torchrl.envs import ParallelEnv, SerialEnv

    this = __import__("shmenv.bench.torchrl", fromlist=["_gym_env"])  # picklable by name
    gym_env = functools.partial(this._gym_env, "CartPole-v1")
    out: dict[str, Callable[[], Any]] = {
        f"ShmEnv('CartPole-v1', {n}, {_label(w)}) [native CartPole]": lambda: ShmEnv(
            "CartPole-v1", n, **_pool(w), seed=0
        ),
        f"ShmEnv('CartPole-v1', {n}, {_label(w)}, autoreset_mode='disabled') [a pool call per reset]": lambda: ShmEnv(
            "CartPole-v1", n, **_pool(w), seed=0, autoreset_mode="disabled"
        ),
        f"ShmEnv(gym.spec('CartPole-v1'), {n}, {_label(w)}) [Gymnasium's CartPole in workers]": lambda: ShmEnv(
            gym.spec("CartPole-v1"), n, **_pool(w), seed=0
        ),
        f"SerialEnv({n}, GymEnv('CartPole-v1'))": lambda: SerialEnv(n, gym_env),
        f"ParallelEnv({w or 2}, GymWrapper(SyncVectorEnv x{n // (w or 2)}))": lambda: ParallelEnv(
            w or 2, functools.partial(this._gym_sync_vector, n // (w or 2), "CartPole-v1")
        ),
    }
    if per_env:
        out[f"ParallelEnv({n}, GymEnv('CartPole-v1'))"] = lambda: ParallelEnv(n, gym_env)
    if _has("envpool"):
        out[f"MultiThreadedEnv({n}, 'CartPole-v1') [EnvPool]"] = lambda: this._multithreaded_env(n, "CartPole-v1")
    out[f"GymWrapper(SyncVectorEnv x{n}) [one process]"] = lambda: this._gym_sync_vector(n, "CartPole-v1")
    return out


def pong_builders(n: int, w: int | None, per_env: bool, plugin: str | None) -> dict[str, Callable[[], Any]]:
    """Pong (EnvPool's preprocessing: 4x84x84 uint8): the native ALE plugin (when built) and
    Gymnasium's ALE (``shmenv.bench.envs:make_atari``) in ShmEnv's workers, TorchRL's
    SerialEnv and ParallelEnv over ``make_atari``, and EnvPool's threads."""
    from torchrl.envs import ParallelEnv, SerialEnv

    this = __import__("shmenv.bench.torchrl", fromlist=["_atari_env"])
    out: dict[str, Callable[[], Any]] = {}
    if plugin:
        from shmenv.assets import ale_roms

        config = {"rom_dir": ale_roms(), "game": "pong"}
        out[f"ShmEnv('AtariC-v5', {n}, {_label(w)}, plugin=libale_atari.so) [native ALE plugin]"] = lambda: ShmEnv(
            "AtariC-v5", n, **_pool(w), plugin=plugin, config=config, seed=0
        )
        out[f"ShmEnv('AtariC-v5', {n}, {_label(w)}, autoreset_mode='disabled') [a pool call per reset]"] = lambda: (
            ShmEnv("AtariC-v5", n, **_pool(w), plugin=plugin, config=config, seed=0, autoreset_mode="disabled")
        )
    out[f"ShmEnv('shmenv.bench.envs:make_atari', {n}, {_label(w)}) [Gymnasium's ALE in workers]"] = lambda: ShmEnv(
        "shmenv.bench.envs:make_atari", n, **_pool(w), seed=0
    )
    if _has("envpool"):
        out[f"MultiThreadedEnv({n}, 'Pong-v5') [EnvPool]"] = lambda: this._multithreaded_env(n, "Pong-v5")
    out[f"SerialEnv({n}, GymWrapper(make_atari()))"] = lambda: SerialEnv(n, this._atari_env)
    out[f"ParallelEnv({w or 2}, GymWrapper(SyncVectorEnv([make_atari] * {n // (w or 2)})))"] = lambda: ParallelEnv(
        w or 2, functools.partial(this._atari_sync_vector, n // (w or 2))
    )
    if per_env:
        out[f"ParallelEnv({n}, GymWrapper(make_atari()))"] = lambda: ParallelEnv(n, this._atari_env)
    return out


class Split:
    """Where a collector's batches go, for a ``ShmEnv`` or a ``MultiThreadedEnv``: the
    seconds in the env engine's calls (shmenv's pool ``step``/``reset``, EnvPool's), in the
    wrapper's ``_step``/``_reset`` around them (numpy results to tensors and a TensorDict),
    and the rest of the batch (TorchRL's own: the policy, ``step_mdp``, done checks, resets,
    the collector's bookkeeping). The calls are timed by wrapping the instances' methods
    (two ``perf_counter`` calls each)."""

    def __init__(self, env: Any):
        self.engine = self.wrapper = 0.0
        self.env = env
        if isinstance(env, ShmEnv):
            engine = env.pool
        else:
            engine = getattr(env, "_env", None) if type(env).__name__ == "MultiThreadedEnv" else None
        if engine is None:
            self.env = None
            return
        for obj, names, slot in ((engine, ("step", "reset"), "engine"), (env, ("_step", "_reset"), "wrapper")):
            for name in names:
                object.__setattr__(obj, name, self._timed(getattr(obj, name), slot))

    def _timed(self, call: Callable, slot: str) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                setattr(self, slot, getattr(self, slot) + time.perf_counter() - t)

        return timed

    def take(self) -> tuple[float, float]:
        """(engine, wrapper-only) seconds since the last take."""
        out = (self.engine, self.wrapper - self.engine)
        self.engine = self.wrapper = 0.0
        return out


def raw_pong_builders(n: int, w: int | None) -> dict[str, Callable[[], Any]]:
    """``ALE/Pong-v5`` as Gymnasium makes it (210x160 RGB frames, frame skip 4, sticky
    actions): Gymnasium's ALE in ShmEnv's workers, and TorchRL's SerialEnv over GymEnv."""
    from torchrl.envs import SerialEnv

    this = __import__("shmenv.bench.torchrl", fromlist=["_raw_pong_env"])
    return {
        f"ShmEnv('ALE/Pong-v5', {n}, {_label(w)}) [Gymnasium's ALE in workers]": lambda: ShmEnv(
            "ALE/Pong-v5", n, **_pool(w), seed=0
        ),
        f"SerialEnv({n}, GymEnv('ALE/Pong-v5'))": lambda: SerialEnv(n, this._raw_pong_env),
    }


def run(
    builders: dict[str, Callable[[], Any]],
    rounds: int,
    frames: int,
    batch: int,
    threads: int | None = None,
    warmup: int = 1,
) -> tuple[dict[str, list[float]], dict[str, list[tuple[float, float, float]]]]:
    """Rounds interleaved over the builders; each round builds the env afresh outside the
    timing (the Collector's constructor resets it, which starts ParallelEnv's processes)
    and times the collection of ``frames`` frames (over all envs) after ``warmup`` batches. ``threads``:
    torch's threads, set again before each round (closing a ``SerialEnv`` or
    ``ParallelEnv`` raises torch's thread count by its worker count). Returns the frames/s
    of each round and, for ShmEnv and MultiThreadedEnv, each timed batch's split in seconds
    (engine calls, wrapper, TorchRL's own)."""
    from torchrl.collectors import Collector

    rates: dict[str, list[float]] = {name: [] for name in builders}
    splits: dict[str, list[tuple[float, float, float]]] = {name: [] for name in builders}
    for r in range(rounds):
        for name, build in builders.items():
            if threads:
                torch.set_num_threads(threads)
            t = time.perf_counter()
            env = build()
            env.set_seed(r)
            # One batch more than is timed: the Collector closes its env as it collects the
            # last batch of total_frames (a ShmEnv's pool stops and reaps its workers, tens of
            # ms), a one-off per run that is left out of the rate, for every contender.
            total = frames + (warmup + 1) * batch
            collector = Collector(env, None, frames_per_batch=batch, total_frames=total)
            setup = time.perf_counter() - t
            got, dt, rows = _collect(collector, Split(env), frames, warmup)
            collector.shutdown()
            if not env.is_closed:
                env.close()
            rates[name].append(got / dt)
            splits[name].extend(rows)
            print(f"round {r}: {got / dt:>9,.0f} frames/s  {name}  (setup {setup:.1f} s)", flush=True)
    return rates, splits


def _collect(collector: Any, split: Split, frames: int, warmup: int) -> tuple[int, float, list]:
    """Iterates ``collector``: ``warmup`` batches untimed, then ``frames`` frames timed.
    Returns the frames, the seconds and each timed batch's split."""
    it = iter(collector)
    for _ in range(warmup):
        next(it)
    split.take()
    rows = []
    got = 0
    t = last = time.perf_counter()
    for data in it:
        got += data.numel()
        now = time.perf_counter()
        if split.env is not None:
            engine, wrapper = split.take()
            rows.append((engine, wrapper, now - last - engine - wrapper))
        last = time.perf_counter()
        if got >= frames:
            break
    return got, time.perf_counter() - t, rows


def report(title: str, rates: dict[str, list[float]], splits: dict | None = None) -> None:
    """Medians with their range, against the first contender; then each ShmEnv's ratio to
    MultiThreadedEnv and SerialEnv (of the medians, and the median of the per-round ratios:
    rounds alternate, so a round's contenders shared its load), and the per-batch split."""
    print(f"\n{title}")
    base = statistics.median(next(iter(rates.values())))
    for name, values in rates.items():
        med = statistics.median(values)
        spread = f"[{min(values):,.0f}-{max(values):,.0f}]"
        print(f"  {med:>10,.0f} frames/s  ({med / base:.2f}x of the first)  {name}  {spread}")
    for name in (n for n in rates if n.startswith("ShmEnv(")):
        for other in (n for n in rates if n.startswith(("MultiThreadedEnv(", "SerialEnv("))):
            per_round = statistics.median(a / b for a, b in zip(rates[name], rates[other]))
            ratio = statistics.median(rates[name]) / statistics.median(rates[other])
            print(f"  {ratio:.2f}x (per-round median {per_round:.2f}x)  {name.split(' [')[0]} / {other.split(' [')[0]}")
    for name, rows in (splits or {}).items():
        if rows:
            ms = [statistics.median(row[i] for row in rows) * 1e3 for i in range(3)]
            print(
                f"  per batch (median of {len(rows)}): engine calls {ms[0]:.1f} ms, wrapper's tensors "
                f"{ms[1]:.1f} ms, TorchRL's own {ms[2]:.1f} ms  {name.split(' [')[0]}"
            )


def _bench(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m shmenv.bench.torchrl", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--workload", choices=("cartpole", "pong", "raw-pong", "all"), default="all")
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--frames", type=int, default=None, help="frames per round and env (4096 CartPole, 2048 Pong)")
    parser.add_argument("--batch", type=int, default=512, help="frames_per_batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="ShmEnv workers (0: the trainer steps every env) and ParallelEnv processes (default: ShmEnv's own "
        "choice; ParallelEnv 2)",
    )
    parser.add_argument("--no-parallel-per-env", action="store_true", help="skip ParallelEnv with one process per env")
    parser.add_argument(
        "--core",
        action="store_true",
        help="only the native ShmEnv, MultiThreadedEnv and SerialEnv (the collector targets), rounds alternating",
    )
    parser.add_argument("--plugin", default=None, help="the ALE plugin (default: target/plugins/libale_atari.so)")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--warmup", type=int, default=1, help="batches collected before the timing starts")
    args = parser.parse_args(argv)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    n, w, per_env = args.envs, args.workers, not args.no_parallel_per_env
    plugin = args.plugin or os.environ.get("SHMENV_ALE_PLUGIN") or (_PLUGIN if os.path.exists(_PLUGIN) else None)
    if plugin:
        plugin = os.path.abspath(plugin)
    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}, torch threads: {torch.get_num_threads()}")
    done = []
    if args.workload in ("cartpole", "all"):
        frames = args.frames or 4096
        builders = _core(cartpole_builders(n, w, per_env), args.core)
        rates, splits = run(builders, args.rounds, frames * n, args.batch, args.torch_threads, args.warmup)
        done.append((f"CartPole-v1, {n} envs: median of {args.rounds} rounds, {frames} frames per env", rates, splits))
    if args.workload in ("pong", "all"):
        if not _has("ale_py"):
            print("Pong skipped: ale-py is not installed (pip install ale-py)")
        else:
            frames = args.frames or 2048
            builders = _core(pong_builders(n, w, per_env, plugin), args.core)
            rates, splits = run(builders, args.rounds, frames * n, args.batch, args.torch_threads, args.warmup)
            done.append((f"Pong, {n} envs: median of {args.rounds} rounds, {frames} frames per env", rates, splits))
    if args.workload == "raw-pong":
        frames = args.frames or 2048
        rates, splits = run(
            raw_pong_builders(n, w), args.rounds, frames * n, args.batch, args.torch_threads, args.warmup
        )
        done.append((f"ALE/Pong-v5, {n} envs: median of {args.rounds} rounds, {frames} frames per env", rates, splits))
    print(f"load average after: {os.getloadavg()}")
    for title, rates, splits in done:
        report(f"{title}, frames_per_batch={args.batch}, random policy:", rates, splits)


def _pool(w: int | None) -> dict[str, Any]:
    """ShmEnv's worker count: ``w``, or the pool's own choice (no ``--workers``:
    ``trainer_shard="auto"`` takes the trainer's shard, or every env where a batch costs
    less than a handoff)."""
    return {} if w is None else {"num_workers": w}


def _label(w: int | None) -> str:
    return "default workers" if w is None else f"num_workers={w}"


def _core(builders: dict[str, Callable[[], Any]], core: bool) -> dict[str, Callable[[], Any]]:
    """With ``--core``: the first ShmEnv (native envs) and its ``autoreset_mode='disabled'``
    twin, MultiThreadedEnv and SerialEnv."""
    if not core:
        return builders
    shm = next(n for n in builders if n.startswith("ShmEnv("))
    keep = (shm, "MultiThreadedEnv(", "SerialEnv(")
    return {n: b for n, b in builders.items() if n.startswith(keep) or "[a pool call per reset]" in n}


if __name__ == "__main__":
    _bench()
