"""``python -m shmenv.bench``: steps an env through shmenv and, when installed, through
Gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv(shared_memory=True)`` and EnvPool, in one
run, and prints steps/s with ratios.

shmenv runs twice in each mode: with default settings (``copy=True``: ``reset``/``step``/
``recv`` return owned arrays) and with ``copy=False`` (zero-copy views of the shared
memory). Both pass ``copy=`` explicitly, so the figures mean the same before and after the
library's default changes. The table and ``--json`` give what the copy costs at this size:
default / copy=False in steps/s, and the time it adds per batch.

Contestants run one at a time (idle engines may still hold cores: EnvPool's threads, a
process per env), in ``--passes`` passes over all of them; each pass builds a contestant,
warms it up, times ``--rounds`` rounds of ``--round-seconds`` and closes it. The table
reports each one's median round, so the noise of a shared machine hits all of them alike.
Actions are the same random sequence for everybody. Baselines that do not apply to the env
(Gymnasium and EnvPool have no ``Burn-v0``) are listed as such instead of failing.

Then, for native envs, the cost of one ``step()`` call of a 1-env, 1-worker pool, with
``copy=True`` and ``copy=False`` (see :func:`call_overhead` for how it is measured).

The release reports three configurations, each against EnvPool 1.2.5 async in the same run
(EnvPool is optional: ``pip install envpool`` where a wheel exists; without it its rows are
skipped with a message):

    # 1. CartPole-v1, 32 envs
    python -m shmenv.bench --env CartPole-v1 --num-envs 32 --workers 2
    # 2. CartPole-v1, 256 envs (no AsyncVectorEnv: a process per env)
    python -m shmenv.bench --env CartPole-v1 --num-envs 256 --workers 2 \\
        --only shmenv,shmenv-nocopy,shmenv-async,shmenv-async-nocopy,sync,envpool,envpool-async
    # 3. Burn-v0 image observations (4x84x84 uint8, 28 KB per env), 16 envs. EnvPool has
    #    no Burn-v0: the row is EnvPool's async CartPole-v1 at the same size and batch, a
    #    generous baseline (16-byte observations, no image to move).
    python -m shmenv.bench --env Burn-v0 --config '{"obs_shape": [4, 84, 84], "obs_dtype": "u8"}' \\
        --num-envs 16 --workers 2 --envpool-env CartPole-v1

More:

    python -m shmenv.bench --env CartPole-v1 --num-envs 32 --png bench.png   # bar chart (matplotlib)
    python -m shmenv.bench --env CartPole-v1 --python --num-envs 32          # Gymnasium's CartPole in shmenv
    python -m shmenv.bench --env shmenv.pyenvs:BurnEnv --config '{"step_us": 50}' --num-envs 8
    # A C env (examples/c/cartpole.c built into libcartpole.so) against EnvPool's CartPole
    python -m shmenv.bench --plugin ./libcartpole.so --env CartPoleC-v1 --envpool-env CartPole-v1 \\
        --num-envs 32 --workers 2 --only shmenv,shmenv-nocopy,envpool,envpool-async
    # Real workloads (Atari, MuJoCo, classic) against EnvPool, ALE and Gymnasium: see
    # shmenv.bench_workloads
    python -m shmenv.bench --workload atari
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from shmenv.bench_call import call_overhead

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

    def rounds(self, count: int, seconds: float, warm_up: float) -> None:
        """A warm-up round of ``warm_up`` s (not kept), then ``count`` rounds of ``seconds``."""
        self.round(warm_up)
        self.rates.clear()
        for _ in range(count):
            self.round(seconds)

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


def _is_native(env_id: str, python: bool) -> bool:
    import shmenv

    return env_id in shmenv.builtin_env_ids() and not python


def _kind(env_id: str, python: bool, plugin: str | None = None) -> str:
    if plugin is not None:
        return "C plugin"
    return "native" if _is_native(env_id, python) else "Python env"


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
    acts = _cycle(_actions(envs.single_action_space, n))

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
        _target(env_id, python), n, num_workers=workers, batch_size=batch, seed=0, config=config, copy=copy,
        plugin=plugin, **pool,
    )
    envs.async_reset()
    acts = _cycle(_actions(envs.single_action_space, batch))

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
        fns = [lambda: factory(**(config or {})) for _ in range(n)]
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
    acts = _cycle(_actions(envs.single_action_space, n))

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
    acts = _cycle(_actions(envs.action_space, b))
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


def _settle(timeout: float = 10.0) -> None:
    """Waits until a closed contestant's processes are gone (AsyncVectorEnv's 32 workers
    take a while to exit and would eat the next contestant's cores), then a moment more."""
    import multiprocessing

    gc.collect()
    deadline = time.monotonic() + timeout
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m shmenv.bench",
        description=__doc__.split("\n\n")[0],
        epilog="contestants: " + ", ".join(KEYS),
    )
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
    p.add_argument(
        "--envpool-env",
        default=None,
        help="the EnvPool env of the envpool contestants when it is not --env (e.g. CartPole-v1 for Burn-v0)",
    )
    p.add_argument(
        "--plugin",
        default=None,
        help="run --env from this plugin library (a C/C++ env, shmenv_env.h) in shmenv's contestants",
    )
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3, help="rounds per pass")
    p.add_argument("--round-seconds", type=float, default=0.5)
    p.add_argument(
        "--overhead-rounds",
        type=int,
        default=7,
        help="rounds of the 1-env step() call cost (native envs; 0 skips it)",
    )
    p.add_argument("--only", default=",".join(KEYS), help="comma-separated contestants: " + ", ".join(KEYS))
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--png", default=None, help="save a bar chart (needs matplotlib)")
    p.add_argument(
        "--contend",
        type=int,
        default=None,
        metavar="N",
        help="contention benchmark (shmenv.bench_contend): every shmenv wait strategy x pinning, shmenv async, "
        "SyncVectorEnv and EnvPool, each idle and with N busy processes (CPU spin loops; 0 for none), rounds "
        "interleaved, medians (defaults then: --num-envs 64 --rounds 5; --passes, --only, --png do not apply)",
    )
    p.add_argument(
        "--trainer-threads",
        type=int,
        default=0,
        metavar="T",
        help="with --contend: in the contended rounds the trainer also does four 192x192 float32 matmuls on T "
        "BLAS threads between batches, as a small policy update would (needs threadpoolctl; 0: none)",
    )
    return p


def _run_passes(
    makers: dict[str, Callable[[], Contestant]],
    wanted: list[str],
    args: argparse.Namespace,
    skipped: dict[str, str],
    not_applicable: dict[str, str],
) -> tuple[dict[str, Contestant], dict[str, list[float]]]:
    """Runs every wanted contestant once per pass, one at a time; returns the figures (not
    the engines) and each contestant's median per pass. Contestants that cannot run are
    recorded in `skipped` or `not_applicable`."""
    found: dict[str, Contestant] = {}
    pass_medians: dict[str, list[float]] = {}
    for _ in range(args.passes):
        for key in KEYS:
            if key not in wanted or key in skipped or key in not_applicable:
                continue
            try:
                c = makers[key]()
            except NotApplicable as e:
                not_applicable[key] = str(e)
                continue
            except ImportError as e:
                name = e.name or str(e)
                skipped[key] = f"{name} not installed" + (" (pip install envpool)" if name == "envpool" else "")
                continue
            except Exception as e:  # noqa: BLE001 - a contestant that cannot run is reported, not fatal
                skipped[key] = f"{type(e).__name__}: {e}"
                continue
            try:
                c.rounds(args.rounds, args.round_seconds, warm_up=min(0.2, args.round_seconds))
            finally:
                c.close()
            # Keep the figures, not the closures: they would keep the engine (EnvPool's
            # threads) alive into the next contestant's turn.
            kept = found.setdefault(key, Contestant(c.name, lambda: 0, lambda: None, key=key, obs_bytes=c.obs_bytes))
            kept.rates.extend(c.rates)
            pass_medians.setdefault(key, []).append(statistics.median(c.rates))
            del c
            _settle()
    return found, pass_medians


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--workload" or a.startswith("--workload=") for a in argv):
        from shmenv.bench_workloads import main as workload_main

        return workload_main(argv)
    p = _parser()
    if p.parse_known_args(argv)[0].contend is not None:
        from shmenv.bench_contend import DEFAULTS, run as contend_main

        p.set_defaults(**DEFAULTS)
        return contend_main(p, p.parse_args(argv))
    args = p.parse_args(argv)
    if args.trainer_threads:
        p.error("--trainer-threads needs --contend N (0: no busy processes)")
    n, w = args.num_envs, args.workers
    batch = args.batch_size or max(1, n // 2)
    wanted = [k for k in args.only.split(",") if k]
    unknown = [k for k in wanted if k not in KEYS]
    if unknown:
        p.error(f"unknown contestant(s) {', '.join(unknown)} in --only: use {', '.join(KEYS)}")

    env, cfg, py, lib = args.env, args.config, args.python, args.plugin
    makers: dict[str, Callable[[], Contestant]] = {
        "shmenv": lambda: shmenv_sync(env, n, w, cfg, py, copy=True, plugin=lib),
        "shmenv-nocopy": lambda: shmenv_sync(env, n, w, cfg, py, copy=False, plugin=lib),
        "shmenv-async": lambda: shmenv_async(env, n, w, batch, cfg, py, copy=True, plugin=lib),
        "shmenv-async-nocopy": lambda: shmenv_async(env, n, w, batch, cfg, py, copy=False, plugin=lib),
        "sync": lambda: gymnasium_vec(env, n, "sync", cfg),
        "async": lambda: gymnasium_vec(env, n, "async", cfg),
        "envpool": lambda: envpool_vec(env, n, w, None, args.envpool_env),
        "envpool-async": lambda: envpool_vec(env, n, w, batch, args.envpool_env),
    }
    steps_per_call = {k: (batch if "async" in k else n) for k in KEYS}
    skipped: dict[str, str] = {}
    not_applicable: dict[str, str] = {}
    for key in ("shmenv-async", "shmenv-async-nocopy", "envpool-async"):
        if batch >= n and key in wanted:
            not_applicable[key] = f"batch size {batch} >= {n} envs: no async mode"
    load_before = os.getloadavg()

    found, pass_medians = _run_passes(makers, wanted, args, skipped, not_applicable)
    contestants = list(found.values())

    native = _is_native(env, py) and lib is None
    overhead = None
    if args.overhead_rounds > 0 and native and ("shmenv" in wanted or "shmenv-nocopy" in wanted):
        try:
            overhead = call_overhead(env, cfg, rounds=args.overhead_rounds)
        except Exception as e:  # noqa: BLE001 - reported like a contestant that cannot run
            skipped["call-overhead"] = f"{type(e).__name__}: {e}"
    elif args.overhead_rounds > 0 and not native:
        not_applicable["call-overhead"] = "measured for native envs only (a Python env's step dominates)"

    copy_cost = _copy_costs(found, pass_medians, steps_per_call)
    base_key = "shmenv" if "shmenv" in found else "shmenv-nocopy"
    base = found[base_key].median if base_key in found else None
    sync_ref = found["sync"].median if "sync" in found else None
    rows = []
    for c in contestants:
        nocopy = found.get(c.key + "-nocopy")
        rows.append(
            {
                "key": c.key,
                "name": c.name,
                "steps_per_sec": round(c.median),
                "min": round(min(c.rates)),
                "max": round(max(c.rates)),
                "shmenv_ratio": (base / c.median) if base else None,
                "vs_sync_vector_env": (c.median / sync_ref) if sync_ref else None,
                "vs_nocopy": (c.median / nocopy.median) if nocopy else None,
                "obs_bytes_per_batch": c.obs_bytes,
            }
        )
    result: dict[str, Any] = {
        "env": env,
        "config": cfg,
        "num_envs": n,
        "workers": w,
        "batch_size": batch,
        "envpool_env": args.envpool_env,
        "rounds": args.rounds * args.passes,
        "rows": rows,
        "copy_cost": copy_cost,
        "call_overhead": overhead,
        # The default (copy=True) figure under the key earlier versions printed.
        "shmenv_step_call_us_1_env": overhead["copy"]["median_us"] if overhead else None,
        "skipped": skipped,
        "not_applicable": not_applicable,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result, base_key, args.passes, args.rounds)
    if args.png:
        _chart(result, args.png, quiet=args.json)
    return 0


def _copy_costs(
    found: dict[str, Contestant], pass_medians: dict[str, list[float]], steps_per_call: dict[str, int]
) -> dict[str, Any]:
    """What ``copy=True`` costs against ``copy=False``, per mode that ran both: the ratio of
    median steps/s (default / copy=False; below 1 = the copy costs), the same ratio within
    each pass (neighbours in time), and the time the copy adds per batch."""
    out: dict[str, Any] = {}
    for mode, key in (("sync", "shmenv"), ("async", "shmenv-async")):
        copy, nocopy = found.get(key), found.get(key + "-nocopy")
        if copy is None or nocopy is None:
            continue
        rows = steps_per_call[key]
        out[mode] = {
            "copy_steps_per_sec": round(copy.median),
            "nocopy_steps_per_sec": round(nocopy.median),
            "ratio": copy.median / nocopy.median,
            "pass_ratios": [a / b for a, b in zip(pass_medians[key], pass_medians[key + "-nocopy"])],
            "batch_envs": rows,
            "copy_adds_us_per_batch": (rows / copy.median - rows / nocopy.median) * 1e6,
            "obs_bytes_per_batch": copy.obs_bytes,
        }
    return out


def _kb(nbytes: int | None) -> str:
    if nbytes is None:
        return "?"
    return f"{nbytes / 1024:.1f} KiB" if nbytes >= 1024 else f"{nbytes} B"


def _print_table(result: dict[str, Any], base_key: str, passes: int, rounds: int) -> None:
    rows = result["rows"]
    cfg = f" {json.dumps(result['config'])}" if result["config"] else ""
    print(
        f"{result['env']}{cfg}, {result['num_envs']} envs, {result['workers']} workers/threads, "
        f"median of {passes} x {rounds} rounds"
    )
    width = max([len(r["name"]) for r in rows] + [6])
    base_head = f"{base_key} is"
    print(
        f"{'engine':<{width}}  {'steps/s':>12}  {'range':>23}  {base_head:>{max(14, len(base_head))}}  "
        f"{'x SyncVectorEnv':>15}  {'/ copy=False':>12}"
    )
    for r in rows:
        ratio = f"{r['shmenv_ratio']:.2f}x" if r["shmenv_ratio"] else "-"
        vs = f"{r['vs_sync_vector_env']:.2f}x" if r["vs_sync_vector_env"] else "-"
        nc = f"{r['vs_nocopy']:.2f}x" if r["vs_nocopy"] else ""
        span = f"{r['min']:,}-{r['max']:,}"
        print(
            f"{r['name']:<{width}}  {r['steps_per_sec']:>12,}  {span:>23}  {ratio:>{max(14, len(base_head))}}  "
            f"{vs:>15}  {nc:>12}"
        )
    for mode, c in result["copy_cost"].items():
        passes_txt = ", ".join(f"{x:.2f}" for x in c["pass_ratios"])
        print(
            f"copy cost, {mode}: default (copy=True) is {c['ratio']:.2f}x copy=False in steps/s "
            f"(per pass: {passes_txt}); {c['copy_adds_us_per_batch']:+.2f} us per batch of "
            f"{c['batch_envs']} envs ({_kb(c['obs_bytes_per_batch'])} of observations)"
        )
    o = result["call_overhead"]
    if o is not None:
        cfg = f" {json.dumps(o['config'])}" if o["config"] else ""
        where = (
            f"trainer on core {','.join(map(str, o['trainer_cores']))}, worker on "
            f"{','.join(map(str, o['worker_cores']))}"
            if o["trainer_pinned"]
            else "trainer not pinned (no core free of the worker)"
        )
        print(
            f"shmenv step() call, 1 env, 1 worker ({o['env']}{cfg}; {where}; median of {len(o['copy']['rounds_us'])}):"
        )
        for label, key in (("copy=True (default)", "copy"), ("copy=False", "nocopy")):
            s = o[key]
            print(f"  {label:<20} {s['median_us']:6.2f} us  ({s['min_us']:.2f}-{s['max_us']:.2f})")
        print(f"  the copy adds {o['copy_adds_us']:+.2f} us per call")
    for key, why in result["not_applicable"].items():
        print(f"n/a {key}: {why}")
    for key, why in result["skipped"].items():
        print(f"skipped {key}: {why}")


def _chart(result: dict[str, Any], path: str, quiet: bool = False) -> None:
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
    print(f"saved {path}", file=sys.stderr if quiet else sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
