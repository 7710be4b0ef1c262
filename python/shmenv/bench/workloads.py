"""``python -m shmenv.bench --workload atari|mujoco|classic``: real workloads, every engine
side by side in one run (the hosted envs: :mod:`shmenv.bench.envs`).

Systems (``--only``): the single env stepped in-process (its rate times the cores in use is
the N-core ideal), shmenv sync and async hosting the Python env (the native env for
classic), shmenv with a native plugin (``--plugin``: Atari, MuJoCo), EnvPool sync and async (when
installed), ALE's ``AtariVectorEnv`` sync and async (Atari, ``ale-py`` 0.12+), Gymnasium's
``SyncVectorEnv`` and ``AsyncVectorEnv``. Each size of the workload runs every system once
per pass, one at a time, in ``--passes`` passes; a system's figure is the median of its
rounds. Actions are random (the same sequence for everybody).

Columns: env steps/s, frames/s (Atari: steps x frame skip), the fraction of the ideal, and
the trainer's and workers' resident memory (VmRSS at the end of the rounds; engines with
threads have no workers). ``--trainer-us T`` spends T us of CPU per batch between ``recv``
and ``send`` (or between ``step`` calls), as a trainer that computes would. ``--json``
prints one JSON object per system and size. While it runs, a status line on stderr (a
terminal only) says which system, size, pass and round runs, and a warning says when the
load average exceeds the cores at the start or the end. A workload whose packages are
missing (atari: ``ale-py`` and ``opencv-python-headless``; mujoco: ``gymnasium[mujoco]``)
runs nothing: one line says what to ``pip install`` and the exit status is 1, as it is
when no system could run.

    python -m shmenv.bench --workload atari
    bash examples/cpp/build_ale.sh target/release/libale_atari.so
    python -m shmenv.bench --workload atari --plugin target/release/libale_atari.so
    bash examples/c/build_mujoco.sh target/release/libmujoco_locomotion.so
    python -m shmenv.bench --workload mujoco --plugin target/release/libmujoco_locomotion.so
    python -m shmenv.bench --workload atari --num-envs 16 --batch-size 8 --trainer-us 1000 \\
        --only shmenv-async,envpool-async,ale-async

What each engine runs, the same env with the same preprocessing everywhere:

**atari**: Pong with the preprocessing of EnvPool's ``Pong-v5`` defaults, for every engine:

- EnvPool ``Pong-v5``: frame skip 4 (max-pool of the last two frames), 84x84 grayscale
  (area resize), 4-frame stack, up to 30 no-op starts, ``repeat_action_probability=0``,
  27,000 steps (108,000 frames) per episode, no episodic life, no reward clipping, fire
  reset on (its default).
- Gymnasium and shmenv's hosted env (:func:`shmenv.bench.envs.make_atari`): ``ALE/Pong-v5`` with
  ``frameskip=1`` and ``repeat_action_probability=0.0`` (EnvPool's), wrapped in
  ``AtariPreprocessing(frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True)``
  and ``FrameStackObservation(4)``. Difference: ``AtariPreprocessing`` has no fire reset
  (one FIRE step after a reset in EnvPool; noise in a throughput figure).
- ALE's own ``ale_py.vector_env.AtariVectorEnv`` (C++ threads, ``ale-py`` 0.12+): the
  same settings, with ``reward_clipping=False`` (its default clips).

- shmenv's native plugin (``examples/cpp/ale_atari.cpp``, ``--plugin``): ``AtariC-v5``, the
  C++ ALE with EnvPool's preprocessing ported to C++; with the same seed and actions its frames
  equal EnvPool's.

``lives`` reaches the trainer in every engine's infos (shmenv: through info columns), except
the native plugin's (the plugin ABI has no infos).

**mujoco**: ``HalfCheetah-v5`` (Gymnasium, ``mujoco`` from PyPI) hosted in shmenv and in
Gymnasium's vector envs; EnvPool has only ``HalfCheetah-v4`` (on its own MuJoCo build);
a native C env (``examples/c/mujoco_locomotion.c``, ``--plugin``) runs as
``HalfCheetahC-v5`` (``HopperC-v5`` with ``--mujoco-env Hopper``).

**classic**: ``CartPole-v1``: shmenv's native (Rust) env, EnvPool's C++ one, Gymnasium's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from shmenv.assets import ale_roms, gymnasium_model
from shmenv.bench.contestants import Contestant, NotApplicable, cycle, random_actions, settle
from shmenv.bench.envs import (
    ATARI_FRAME_SKIP,
    ATARI_MAX_FRAMES,
    ATARI_NOOP_MAX,
    ATARI_SCREEN,
    ATARI_STACK,
    make_atari,
    make_gymnasium,
)
from shmenv.bench.progress import Progress, warn_if_loaded

SYSTEMS = (
    "single",
    "shmenv",
    "shmenv-async",
    "shmenv-native",
    "shmenv-native-async",
    "envpool",
    "envpool-async",
    "ale",
    "ale-async",
    "gym-sync",
    "gym-async",
)
#: Systems that only have a sync mode (measured at the sync sizes).
SYNC_ONLY = ("single", "gym-sync", "gym-async")


#: Gymnasium's model file of each MuJoCo env name.
MODEL_FILES = {"HalfCheetah": "half_cheetah.xml", "Hopper": "hopper.xml", "Ant": "ant.xml"}


@dataclass(frozen=True)
class Workload:
    """One workload: the env every engine runs and the sizes it is measured at."""

    name: str
    #: What the single env and Gymnasium run: a factory and its keyword arguments.
    factory: Callable[..., Any]
    kwargs: dict[str, Any]
    #: The env shmenv's hosted contestants run: a native id, or None for `factory`.
    shmenv_native_id: str | None
    #: EnvPool's env id and extra keyword arguments.
    envpool_id: str
    envpool_kwargs: dict[str, Any] = field(default_factory=dict)
    #: ALE's game name for `AtariVectorEnv` (Atari only).
    ale_game: str | None = None
    #: Emulator frames per env step (frames/s = steps/s x this), Atari only.
    frames_per_step: int | None = None
    #: (num_envs, batch_size or None for sync) measured by default.
    sizes: tuple[tuple[int, int | None], ...] = ()
    #: The id a native plugin provides for this workload (``--plugin``), and its config.
    plugin_id: str | None = None
    plugin_config: Callable[[], dict[str, Any]] | None = None
    #: The modules the env needs, each with what to ``pip install`` for it.
    needs: tuple[tuple[str, str], ...] = ()

    def missing(self) -> list[tuple[str, str]]:
        """The (module, pip requirement) pairs of `needs` that this Python cannot import."""
        return [(module, req) for module, req in self.needs if importlib.util.find_spec(module) is None]


def workloads(game: str = "Pong", mujoco_env: str = "HalfCheetah") -> dict[str, Workload]:
    """The workloads by name; `game` and `mujoco_env` pick the Atari game and MuJoCo env."""
    return {
        "atari": Workload(
            name="atari",
            factory=make_atari,
            kwargs={"game": game},
            shmenv_native_id=None,
            envpool_id=f"{game}-v5",
            ale_game=game.lower(),
            frames_per_step=ATARI_FRAME_SKIP,
            sizes=((8, None), (16, None), (16, 8)),
            plugin_id="AtariC-v5",
            plugin_config=lambda: {"rom_dir": ale_roms(), "game": game.lower()},
            # ale_py: the emulator and ROMs; cv2: AtariPreprocessing's resize.
            needs=(("ale_py", "ale-py"), ("cv2", "opencv-python-headless")),
        ),
        "mujoco": Workload(
            name="mujoco",
            factory=make_gymnasium,
            kwargs={"env_id": f"{mujoco_env}-v5"},
            shmenv_native_id=None,
            envpool_id=f"{mujoco_env}-v4",
            sizes=((8, None), (32, None), (32, 16)),
            plugin_id=f"{mujoco_env}C-v5",
            plugin_config=lambda: {"model": gymnasium_model(MODEL_FILES.get(mujoco_env, f"{mujoco_env.lower()}.xml"))},
            needs=(("mujoco", "gymnasium[mujoco]"),),
        ),
        "classic": Workload(
            name="classic",
            factory=make_gymnasium,
            kwargs={"env_id": "CartPole-v1"},
            shmenv_native_id="CartPole-v1",
            envpool_id="CartPole-v1",
            sizes=((32, None), (32, 16)),
        ),
    }


def ale_vector_env(game: str, num_envs: int, batch_size: int | None, threads: int) -> Any:
    """ALE's ``AtariVectorEnv`` with EnvPool's ``Pong-v5`` settings (see the module doc)."""
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(
        game,
        num_envs,
        batch_size=batch_size or 0,
        num_threads=threads,
        max_num_frames_per_episode=ATARI_MAX_FRAMES,
        repeat_action_probability=0.0,
        img_height=ATARI_SCREEN,
        img_width=ATARI_SCREEN,
        grayscale=True,
        stack_num=ATARI_STACK,
        frameskip=ATARI_FRAME_SKIP,
        maxpool=True,
        noop_max=ATARI_NOOP_MAX,
        episodic_life=False,
        reward_clipping=False,
        use_fire_reset=True,
    )


def burner(trainer_us: float) -> Callable[[], None]:
    """A function spending `trainer_us` microseconds of CPU (a trainer's per-batch work)."""
    if trainer_us <= 0:
        return lambda: None
    span = int(trainer_us * 1000)

    def burn() -> None:
        end = time.perf_counter_ns() + span
        while time.perf_counter_ns() < end:
            pass

    return burn


def _rss_kib(pid: int | str = "self") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _descendants(pid: int | str = "self") -> list[int]:
    """Every process below `pid` (read from /proc/<pid>/task/*/children)."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            found.append(kid)
            found.extend(_descendants(kid))
    return found


def memory() -> tuple[int, int]:
    """(trainer RSS, sum of its descendants' RSS) in KiB."""
    return _rss_kib(), sum(_rss_kib(p) for p in _descendants())


class Runner:
    """Builds one system's contestant for one size of a workload."""

    def __init__(self, w: Workload, args: argparse.Namespace, n: int, batch: int | None):
        self.w, self.args, self.n, self.batch = w, args, n, batch
        self.burn = burner(args.trainer_us)

    def _sync(self, name: str, envs: Any, space: Any, close: Callable[[], None]) -> Contestant:
        acts, burn, n = cycle(random_actions(space, self.n)), self.burn, self.n

        def step() -> int:
            envs.step(acts())
            burn()
            return n

        return Contestant(name, step, close)

    def _async(self, name: str, batch: int, envs: Any, space: Any, recv: Callable, send: Callable) -> Contestant:
        """An async contestant of batches of ``batch`` rows (``self.batch``, known not None)."""
        acts, burn, b = cycle(random_actions(space, batch)), self.burn, batch

        def step() -> int:
            info = recv()[-1]
            burn()
            send(acts(), info["env_id"])
            return b

        return Contestant(name, step, envs.close)

    def single(self) -> Contestant:
        env = self.w.factory(**self.w.kwargs)
        env.reset(seed=0)
        acts = cycle(random_actions(env.action_space, 1))
        burn = self.burn

        def step() -> int:
            _, _, term, trunc, _ = env.step(acts()[0])
            if term or trunc:
                env.reset()
            burn()
            return 1

        return Contestant("single env, in-process", step, env.close)

    def shmenv(self, native: bool = False) -> Contestant:
        import shmenv

        w, a = self.w, self.args
        library = a.plugin
        if native:
            from shmenv import plugins

            if not library and w.plugin_id:
                found = plugins.find(w.plugin_id)  # an installed plugin package (shmenv-ale, shmenv-mujoco)
                library = found.library if found else None
            if not library or not w.plugin_id:
                package = plugins.KNOWN.get(w.plugin_id or "", "its plugin package")
                raise NotApplicable(f"needs --plugin (a native build of this workload's env) or pip install {package}")
            env, kind = w.plugin_id, "native plugin"
            config = w.plugin_config() if w.plugin_config else None
        elif w.shmenv_native_id:
            env, config, kind = w.shmenv_native_id, None, "native"
        else:
            env, config, kind = w.factory, w.kwargs, "Python env"
        envs = shmenv.make_vec(
            env,
            self.n,
            num_workers=a.workers,
            batch_size=self.batch,
            seed=0,
            config=config,
            plugin=library if native else None,
            pin_workers=not a.no_pin,
        )
        space = envs.single_action_space
        if self.batch is None:
            envs.reset()
            return self._sync(f"shmenv sync ({a.workers} workers, {kind})", envs, space, envs.close)
        envs.async_reset()
        name = f"shmenv async (batch {self.batch}, {a.workers} workers, {kind})"
        return self._async(name, self.batch, envs, space, envs.recv, envs.send)

    def envpool(self) -> Contestant:
        import envpool

        w, a = self.w, self.args
        if w.envpool_id not in envpool.list_all_envs():
            raise NotApplicable(f"EnvPool has no {w.envpool_id}")
        b = self.batch or self.n
        envs = envpool.make(
            w.envpool_id,
            env_type="gymnasium",
            num_envs=self.n,
            batch_size=b,
            num_threads=a.workers,
            seed=0,
            **w.envpool_kwargs,
        )
        label = f"EnvPool {envpool.__version__} {w.envpool_id}"
        if self.batch is None:
            envs.reset()
            return self._sync(f"{label} sync ({a.workers} threads)", envs, envs.action_space, envs.close)
        envs.async_reset()
        name = f"{label} async (batch {b}, {a.workers} threads)"
        return self._async(name, b, envs, envs.action_space, envs.recv, envs.send)

    def ale(self) -> Contestant:
        if self.w.ale_game is None:
            raise NotApplicable("AtariVectorEnv runs Atari only")
        import ale_py

        threads = self.args.workers
        envs = ale_vector_env(self.w.ale_game, self.n, self.batch, threads)
        space = envs.single_action_space
        label = f"ale_py {ale_py.__version__} AtariVectorEnv"
        if self.batch is None:
            envs.reset(seed=0)
            return self._sync(f"{label} sync ({threads} threads)", envs, space, envs.close)
        envs.reset(seed=0)  # the first batch is waiting; recv it, then send its actions
        envs.send(random_actions(space, self.batch)[0])

        def send(actions: Any, env_ids: Any) -> None:
            envs.send(actions)  # it acts on the envs of the batch just received

        name = f"{label} async (batch {self.batch}, {threads} threads)"
        return self._async(name, self.batch, envs, space, envs.recv, send)

    def gymnasium(self, mode: str) -> Contestant:
        import gymnasium as gym

        factory, kwargs = self.w.factory, self.w.kwargs
        fns = [lambda: factory(**kwargs) for _ in range(self.n)]
        if mode == "async":
            envs = gym.vector.AsyncVectorEnv(fns, shared_memory=True)
        else:
            envs = gym.vector.SyncVectorEnv(fns)
        envs.reset(seed=0)
        label = "gymnasium AsyncVectorEnv(shared_memory=True)" if mode == "async" else "gymnasium SyncVectorEnv"
        return self._sync(label, envs, envs.single_action_space, envs.close)

    def make(self, key: str) -> Contestant:
        makers: dict[str, Callable[[], Contestant]] = {
            "single": self.single,
            "shmenv": self.shmenv,
            "shmenv-native": lambda: self.shmenv(native=True),
            "envpool": self.envpool,
            "ale": self.ale,
            "gym-sync": lambda: self.gymnasium("sync"),
            "gym-async": lambda: self.gymnasium("async"),
        }
        return makers[key.removesuffix("-async") if key.endswith("-async") and key != "gym-async" else key]()


def _applies(key: str, batch: int | None) -> bool:
    """Whether system `key` runs at a size with this batch (None: sync)."""
    if key in SYNC_ONLY:
        return batch is None
    return key.endswith("-async") == (batch is not None)


def _reason(e: Exception) -> str:
    """One line for a system that could not be built: a worker's traceback (in shmenv's
    errors) is cut to its first and last lines."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = lines[0] if len(lines) <= 1 else f"{lines[0]} ... {lines[-1]}"
    return f"{type(e).__name__}: {text}"


def _measure(
    runner: Runner,
    key: str,
    args: argparse.Namespace,
    record: dict[str, Any],
    on_round: Callable[[int], None] | None = None,
) -> None:
    """One pass of system `key`: builds it, warms it up, times the rounds, closes it, and adds
    the rates and memory to `record` (or the reason it could not run); `on_round` is called
    after each timed round."""
    try:
        c = runner.make(key)
    except NotApplicable as e:
        record["not_applicable"] = str(e)
        return
    except ImportError as e:
        record["skipped"] = f"{e.name or e} not installed"
        return
    except Exception as e:  # noqa: BLE001 - a system that cannot run is reported, not fatal
        record["skipped"] = _reason(e)
        return
    try:
        c.rounds(args.rounds, args.round_seconds, warm_up=min(0.3, args.round_seconds), on_round=on_round)
        trainer, workers = memory()
    finally:
        c.close()
    record["name"] = c.name
    record.setdefault("rates", []).extend(c.rates)
    record["trainer_rss_kib"], record["worker_rss_kib"] = trainer, workers
    del c
    settle()


def _sizes(w: Workload, args: argparse.Namespace) -> list[tuple[int, int | None]]:
    if args.num_envs is None:
        return list(w.sizes)
    return [(args.num_envs, args.batch_size if args.batch_size and args.batch_size < args.num_envs else None)]


def measure_all(w: Workload, args: argparse.Namespace, wanted: list[str]) -> list[dict[str, Any]]:
    """Every size of `w`, every wanted system, in passes; one result row per system and size."""
    records: dict[tuple[int, int | None, str], dict[str, Any]] = {}
    single_key = (0, None, "single")
    sizes = _sizes(w, args)
    runs = [(n, b, k) for n, b in sizes for k in wanted if k != "single" and _applies(k, b)]
    progress = Progress(args.passes * (len(runs) + ("single" in wanted)))
    for p in range(args.passes):
        if "single" in wanted:  # once per pass: the same env at every size
            what = f"pass {p + 1}/{args.passes}: single env"
            _measure(
                Runner(w, args, 1, None),
                "single",
                args,
                records.setdefault(single_key, {}),
                progress.begin(what, args.rounds),
            )
            progress.end(what)
        for n, batch, key in runs:
            rec = records.setdefault((n, batch, key), {})
            what = f"pass {p + 1}/{args.passes}: {key}, {n} envs" + (f", batch {batch}" if batch else "")
            if "skipped" not in rec and "not_applicable" not in rec:
                _measure(Runner(w, args, n, batch), key, args, rec, progress.begin(what, args.rounds))
            progress.end(what)
    progress.close()
    single = records.get(single_key, {}).get("rates")
    single_rate = statistics.median(single) if single else None
    cores = min(args.workers, os.cpu_count() or 1)
    rows = []
    for (n, batch, key), rec in records.items():
        if not rec:
            continue
        rows.append(_row(w, args, key, 1 if key == "single" else n, batch, rec, single_rate, cores))
    return rows


def _row(
    w: Workload,
    args: argparse.Namespace,
    key: str,
    n: int,
    batch: int | None,
    rec: dict[str, Any],
    single_rate: float | None,
    cores: int,
) -> dict[str, Any]:
    rates = rec.get("rates")
    rate = statistics.median(rates) if rates else None
    ideal = single_rate * (1 if key == "single" else cores) if single_rate else None
    return {
        "workload": w.name,
        "env": w.kwargs.get("game") or w.kwargs.get("env_id"),
        "system": key,
        "name": rec.get("name", key),
        "num_envs": n,
        "batch_size": batch or n,
        "workers": args.workers,
        "trainer_us": args.trainer_us,
        "steps_per_sec": round(rate) if rate else None,
        "frames_per_sec": round(rate * w.frames_per_step) if rate and w.frames_per_step else None,
        "ideal_steps_per_sec": round(ideal) if ideal else None,
        "fraction_of_ideal": rate / ideal if rate and ideal else None,
        "rounds": len(rates or []),
        "min": round(min(rates)) if rates else None,
        "max": round(max(rates)) if rates else None,
        "trainer_rss_kib": rec.get("trainer_rss_kib"),
        "worker_rss_kib": rec.get("worker_rss_kib"),
        "skipped": rec.get("skipped"),
        "not_applicable": rec.get("not_applicable"),
        "loadavg": os.getloadavg()[0],
    }


def _print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    atari = any(r["frames_per_sec"] for r in rows)
    print(
        f"workload {args.workload}, {args.workers} workers/threads, trainer {args.trainer_us:g} us per batch, "
        f"median of {args.passes} x {args.rounds} rounds of {args.round_seconds:g} s; ideal = single env x cores"
    )
    width = max([len(r["name"]) for r in rows] + [10])
    head = f"{'envs':>5} {'batch':>5}  {'engine':<{width}}  {'steps/s':>10}"
    head += f"  {'frames/s':>10}" if atari else ""
    print(head + f"  {'x ideal':>7}  {'trainer RSS':>11}  {'worker RSS':>10}")
    reasons: dict[str, str] = {}
    for r in rows:
        if r["steps_per_sec"] is None:
            reasons.setdefault(
                r["system"],
                f"{'skipped' if r['skipped'] else 'n/a'} {r['system']}: {r['skipped'] or r['not_applicable']}",
            )
            continue
        line = f"{r['num_envs']:>5} {r['batch_size']:>5}  {r['name']:<{width}}  {r['steps_per_sec']:>10,}"
        line += f"  {r['frames_per_sec']:>10,}" if atari else ""
        frac = f"{r['fraction_of_ideal']:.2f}" if r["fraction_of_ideal"] else "-"
        mib = lambda k: f"{k / 1024:.0f} MiB" if k else "-"  # noqa: E731
        print(line + f"  {frac:>7}  {mib(r['trainer_rss_kib']):>11}  {mib(r['worker_rss_kib']):>10}")
    for line in reasons.values():
        print(line)


def run(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--workload``: checks the arguments, runs every wanted system at every size, prints
    the table (or one JSON object per line)."""
    wanted = [k for k in args.only.split(",") if k]
    unknown = [k for k in wanted if k not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {', '.join(unknown)} in --only: use {', '.join(SYSTEMS)}")
    if args.trainer_us < 0:
        p.error(f"--trainer-us is {args.trainer_us:g}; give 0 or more microseconds")
    w = workloads(args.game, args.mujoco_env)[args.workload]
    missing = w.missing()
    if missing:
        print(
            f"skipped every engine of the {w.name} workload: {', '.join(m for m, _ in missing)} not installed; "
            f"pip install {' '.join(repr(r) if '[' in r else r for _, r in missing)}",
            file=sys.stderr,
        )
        return 1
    warn_if_loaded("at the start")
    rows = measure_all(w, args, [k for k in SYSTEMS if k in wanted])
    warn_if_loaded("at the end")
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        _print_table(rows, args)
    if not any(r["steps_per_sec"] for r in rows):
        print(f"nothing of the {w.name} workload could run (the reasons are above)", file=sys.stderr)
        return 1
    return 0
