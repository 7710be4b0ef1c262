"""``python -m shmenv.bench --contend N [--trainer-threads T]``: how each wait strategy holds
up on a busy machine, against EnvPool and Gymnasium's ``SyncVectorEnv`` in the same run.

What it measures. Every contestant is built once and kept alive for the whole run:

- shmenv sync with ``wait`` in auto / yield / block x ``pin_workers`` True / False (six
  rows; auto + pinned is the library's default, marked "default"),
- shmenv async (``batch_size`` = ``--batch-size`` or num_envs // 2, EnvPool-style
  ``recv``/``send``) with the default settings and with ``wait="block", pin_workers=False``,
- Gymnasium ``SyncVectorEnv``, EnvPool sync and async (skipped when EnvPool is missing).

Each is stepped with the same pre-drawn random actions under two conditions:

- **idle**: nothing else runs (the N busy processes are stopped with SIGSTOP);
- **contended**: N busy processes (``python -c "while True: pass"``) run (SIGCONT), and
  with ``--trainer-threads T`` the trainer does four 192x192 float32 matmuls on T BLAS
  threads (``threadpoolctl``) before every batch, as a small policy update would. That
  work is the same for every contestant and is counted in the contended time.

Rounds are interleaved: for each of ``--rounds`` rounds, for each condition, for each
contestant (the order rotates by one each round), one untimed batch, then
``--round-seconds`` of stepping. The figures are medians over rounds, so slow drift of a
shared machine hits every contestant alike.

How to read it. ``idle`` and ``contended`` are median env steps/s; ``cont/idle`` is how
much of its idle speed a contestant keeps under contention (it includes the trainer's
matmul time, which costs a fast engine more of its rate than a slow one); ``/best`` compares
each shmenv row with the best shmenv row in the same condition (1.00x marks the best
setting there); the last lines give the default's ratio to EnvPool sync and to
SyncVectorEnv. The 1-minute load average is printed before and after; a load above the
core count at the start means someone else was busy too (warned on stderr).

Examples:

    python -m shmenv.bench --contend 2                        # 2 busy processes on the defaults
    python -m shmenv.bench --contend 0 --trainer-threads 2    # only the trainer's own BLAS threads
    python -m shmenv.bench --contend 1 --trainer-threads 2 --env CartPole-v1 --num-envs 256 --json

Defaults here: ``--env CartPole-v1 --num-envs 64 --workers 2 --rounds 5 --round-seconds 0.5``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

import numpy as np

from shmenv.bench.contestants import Contestant, NotApplicable, envpool_vec, gymnasium_vec, shmenv_async, shmenv_sync

#: Defaults of `python -m shmenv.bench`'s options that differ for a contention run.
DEFAULTS: dict[str, Any] = {"num_envs": 64, "rounds": 5}
CONDITIONS = ("idle", "contended")
#: The busy processes' program; the comment makes them easy to find in ``ps``/``/proc``.
BUSY_CODE = "while True: pass  # shmenv.bench --contend busy loop"
#: Seconds to let the machine settle after busy processes stop or start.
SETTLE_SECONDS = 0.2
_PR_SET_PDEATHSIG = 1
MATMULS, MATMUL_SIZE = 4, 192


class BusyProcesses:
    """``count`` CPU spin loops, started stopped (SIGSTOP); ``resume``/``pause`` them with
    SIGCONT/SIGSTOP; ``close`` kills and reaps them. Each dies with this process as well
    (``PR_SET_PDEATHSIG``), should it be killed before ``close`` runs."""

    def __init__(self, count: int) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(count):
                self.procs.append(self._spawn())
                self.procs[-1].send_signal(signal.SIGSTOP)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _spawn() -> subprocess.Popen[bytes]:
        parent = os.getpid()
        prctl = ctypes.CDLL(None, use_errno=True).prctl

        def die_with_parent() -> None:  # runs in the child between fork and exec
            prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)

        return subprocess.Popen(
            [sys.executable, "-c", BUSY_CODE],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )

    def _signal(self, sig: signal.Signals) -> None:
        for p in self.procs:
            p.send_signal(sig)

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def close(self) -> None:
        for p in self.procs:
            p.kill()  # SIGKILL also ends a stopped process
        for p in self.procs:
            p.wait()


def blas_limits(threads: int) -> ContextManager[Any]:
    """``threadpool_limits(threads)`` for BLAS (a no-op for 0 threads)."""
    if threads <= 0:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        sys.exit("--trainer-threads needs threadpoolctl: pip install threadpoolctl")
    return threadpool_limits(limits=threads, user_api="blas")


def trainer_work() -> Callable[[], None]:
    """The trainer's work between batches: four 192x192 float32 matmuls."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE), dtype=np.float32)
    b = rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE), dtype=np.float32)
    out = np.empty_like(a)

    def work() -> None:
        for _ in range(MATMULS):
            np.matmul(a, b, out=out)

    return work


def _time_work(work: Callable[[], None], calls: int = 200) -> float:
    """Median microseconds of one `work()` on an otherwise idle machine (5 runs)."""
    work()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls // 5):
            work()
        runs.append((time.perf_counter() - start) / (calls // 5) * 1e6)
    return statistics.median(runs)


@dataclass
class Row:
    """One contestant of the table and its rounds per condition."""

    key: str
    maker: Callable[[], Contestant]
    label: str
    shmenv: bool = False
    default: bool = False
    #: Baselines take their name (with versions) from the built contestant.
    own_name: bool = False
    contestant: Contestant | None = None
    plain_step: Callable[[], int] | None = None
    rates: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CONDITIONS})
    skipped: str | None = None

    def median(self, condition: str) -> float | None:
        r = self.rates[condition]
        return statistics.median(r) if r else None


def _async_mode(batch: int, n: int) -> None:
    if batch >= n:
        raise NotApplicable(f"batch size {batch} >= {n} envs: no async mode")


def make_rows(args: argparse.Namespace) -> list[Row]:
    """The contestants, not built yet: each row's maker builds it."""
    env, n, w, cfg, py, lib = args.env, args.num_envs, args.workers, args.config, args.python, args.plugin
    batch = args.batch_size or max(1, n // 2)
    rows = []
    for wait in ("auto", "yield", "block"):
        for pin in (True, False):
            default = wait == "auto" and pin
            label = f"shmenv sync wait={wait}, {'pinned' if pin else 'unpinned'}" + (" (default)" if default else "")

            def maker(wait: str = wait, pin: bool = pin) -> Contestant:
                return shmenv_sync(env, n, w, cfg, py, plugin=lib, wait=wait, pin_workers=pin)

            rows.append(Row(f"shmenv-{wait}-{'pinned' if pin else 'unpinned'}", maker, label, True, default))
    for wait, pin, key in (("auto", True, "shmenv-async"), ("block", False, "shmenv-async-block-unpinned")):

        def async_maker(wait: str = wait, pin: bool = pin) -> Contestant:
            _async_mode(batch, n)
            return shmenv_async(env, n, w, batch, cfg, py, plugin=lib, wait=wait, pin_workers=pin)

        label = f"shmenv async batch {batch}, wait={wait}, {'pinned' if pin else 'unpinned'}"
        rows.append(Row(key, async_maker, label, shmenv=True))
    rows.append(Row("sync", lambda: gymnasium_vec(env, n, "sync", cfg), "gymnasium SyncVectorEnv", own_name=True))
    rows.append(Row("envpool", lambda: envpool_vec(env, n, w, None, args.envpool_env), "EnvPool sync", own_name=True))
    envpool_async = lambda: _async_mode(batch, n) or envpool_vec(env, n, w, batch, args.envpool_env)  # noqa: E731
    rows.append(Row("envpool-async", envpool_async, f"EnvPool async (batch {batch})", own_name=True))
    return rows


def build(rows: list[Row]) -> None:
    """Builds every row's contestant; rows that cannot run say why in `skipped`."""
    for r in rows:
        try:
            c = r.maker()
        except NotApplicable as e:
            r.skipped = f"n/a: {e}"
        except ImportError as e:
            name = e.name or str(e)
            r.skipped = "skipped: pip install envpool" if name == "envpool" else f"skipped: {name} not installed"
        except Exception as e:  # noqa: BLE001 - a contestant that cannot run is reported, not fatal
            r.skipped = f"skipped: {type(e).__name__}: {e}"
        else:
            r.contestant, r.plain_step = c, c.step
            if r.own_name:
                r.label = c.name


def _with_work(step: Callable[[], int], work: Callable[[], None]) -> Callable[[], int]:
    def loaded() -> int:
        work()
        return step()

    return loaded


def _time_round(r: Row, condition: str, work: Callable[[], None] | None, seconds: float) -> None:
    """One untimed batch, then `seconds` of stepping; the rate goes to ``r.rates[condition]``.
    A contestant that fails is closed and reported, and the run goes on without it."""
    c, plain = r.contestant, r.plain_step
    assert c is not None and plain is not None
    c.step = plain if work is None else _with_work(plain, work)
    try:
        c.step()
        c.round(seconds)
    except Exception as e:  # noqa: BLE001 - reported in the table
        r.skipped = f"failed in a {condition} round: {type(e).__name__}: {e}"
        r.contestant = None
        with contextlib.suppress(Exception):
            c.close()
        return
    r.rates[condition].append(c.rates.pop())


def measure(rows: list[Row], busy: BusyProcesses, work: Callable[[], None] | None, args: argparse.Namespace) -> None:
    """The interleaved rounds: round, then condition, then contestant (rotated each round)."""
    show = sys.stderr.isatty()
    for i in range(args.rounds):
        for condition in CONDITIONS:
            if condition == "contended":
                busy.resume()
            else:
                busy.pause()
            time.sleep(SETTLE_SECONDS)
            live = [r for r in rows if r.contestant is not None]
            if show:
                print(f"round {i + 1}/{args.rounds}, {condition} ({len(live)} contestants)", file=sys.stderr)
            shift = i % len(live) if live else 0
            for r in live[shift:] + live[:shift]:
                _time_round(r, condition, work if condition == "contended" else None, args.round_seconds)
    busy.pause()


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _rounded(rate: float | None) -> int | None:
    """A median rate as a whole number, or None when there is none (or it is 0)."""
    return round(rate) if rate else None


def results(rows: list[Row], meta: dict[str, Any]) -> dict[str, Any]:
    """The JSON object: medians per row and condition, ratios, the run's settings."""
    best = {c: max((m for r in rows if r.shmenv and (m := r.median(c)) is not None), default=None) for c in CONDITIONS}
    by_key = {r.key: r for r in rows}
    default = next(r for r in rows if r.default)
    out_rows = []
    for r in rows:
        med = {c: r.median(c) for c in CONDITIONS}
        out_rows.append(
            {
                "key": r.key,
                "name": r.label,
                "shmenv": r.shmenv,
                "default": r.default,
                **{f"{c}_steps_per_sec": _rounded(med[c]) for c in CONDITIONS},
                **{f"{c}_rounds": [round(x) for x in r.rates[c]] for c in CONDITIONS},
                "contended_over_idle": _ratio(med["contended"], med["idle"]),
                "vs_best_shmenv": {c: _ratio(med[c], best[c]) for c in CONDITIONS} if r.shmenv else None,
                "skipped": r.skipped,
            }
        )
    default_vs = {
        ref: {c: _ratio(default.median(c), by_key[key].median(c)) for c in CONDITIONS}
        for ref, key in (("envpool_sync", "envpool"), ("sync_vector_env", "sync"))
    }
    return {**meta, "best_shmenv_steps_per_sec": best, "rows": out_rows, "default_vs": default_vs}


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    """`x` formatted with `spec` and `unit`, or "-" right-aligned to the same width."""
    if x is None:
        width = "".join(ch for ch in spec.split(".")[0].split(",")[0] if ch.isdigit())
        return "-".rjust(int(width or 0) + len(unit))
    return format(x, spec) + unit


def print_table(result: dict[str, Any]) -> None:
    m = result
    cfg = f" {json.dumps(m['config'])}" if m["config"] else ""
    work = ""
    if m["trainer_threads"]:
        work = (
            f" + trainer {MATMULS} matmuls {MATMUL_SIZE}x{MATMUL_SIZE} f32 per batch on {m['trainer_threads']} "
            f"threads ({m['trainer_work_us']:.0f} us alone)"
        )
    print(
        f"{m['env']}{cfg}, {m['num_envs']} envs, {m['workers']} workers/threads; contended: {m['contend']} busy "
        f"process{'' if m['contend'] == 1 else 'es'}{work}; median of {m['rounds']} rounds x {m['round_seconds']} s"
    )
    rows = m["rows"]
    width = max(len(r["name"]) for r in rows)
    print(
        f"{'engine':<{width}}  {'idle steps/s':>13}  {'contended':>13}  {'cont/idle':>9}  "
        f"{'/best idle':>10}  {'/best cont':>10}"
    )
    for r in rows:
        if r["idle_steps_per_sec"] is None and r["contended_steps_per_sec"] is None:
            print(f"{r['name']:<{width}}  {r['skipped'] or 'no rounds'}")
            continue
        vs = r["vs_best_shmenv"] or {}
        best = f"  {_fmt(vs.get('idle'), '>9.2f', 'x')}  {_fmt(vs.get('contended'), '>9.2f', 'x')}" if vs else ""
        print(
            f"{r['name']:<{width}}  {_fmt(r['idle_steps_per_sec'], '>13,')}  "
            f"{_fmt(r['contended_steps_per_sec'], '>13,')}  {_fmt(r['contended_over_idle'], '>8.2f', 'x')}{best}"
        )
        if r["skipped"]:
            print(f"{'':<{width}}  {r['skipped']}")
    for ref, label in (("envpool_sync", "EnvPool sync"), ("sync_vector_env", "SyncVectorEnv")):
        d = m["default_vs"][ref]
        print(f"default vs {label}: {_fmt(d['contended'], '.2f')}x under contention ({_fmt(d['idle'], '.2f')}x idle)")
    before, after = m["loadavg_before"][0], m["loadavg_after"][0]
    print(f"load average (1 min): {before:.2f} before, {after:.2f} after ({m['cores']} cores)")


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.contend < 0 or args.trainer_threads < 0:
        p.error("--contend and --trainer-threads take a count >= 0")
    for name in ("only", "png", "passes"):
        if getattr(args, name) != p.get_default(name):
            p.error(f"--{name} does not apply to --contend")
    if args.rounds < 1 or args.round_seconds <= 0:
        p.error("--contend needs --rounds >= 1 and --round-seconds > 0")


def run(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The contention benchmark: builds the contestants, times the rounds, prints the table
    (or ``--json``). The busy processes are killed and reaped whatever happens."""
    _check_args(p, args)
    cores = len(os.sched_getaffinity(0))
    load_before = os.getloadavg()
    if load_before[0] > cores:
        print(
            f"warning: 1-minute load average {load_before[0]:.2f} exceeds the {cores} cores before the run: "
            "other work is competing, the idle figures are not idle",
            file=sys.stderr,
        )
    rows = make_rows(args)
    limits = blas_limits(args.trainer_threads)  # exits with a message without threadpoolctl
    busy = BusyProcesses(args.contend)  # before any contestant's threads exist
    work_us = None
    try:
        try:
            with limits:
                work = trainer_work() if args.trainer_threads else None
                work_us = _time_work(work) if work else None
                build(rows)
                measure(rows, busy, work, args)
        finally:
            busy.close()
    finally:
        for r in rows:
            if r.contestant is not None:
                with contextlib.suppress(Exception):
                    r.contestant.close()
    meta = {
        "mode": "contend",
        "env": args.env,
        "config": args.config,
        "num_envs": args.num_envs,
        "workers": args.workers,
        "batch_size": args.batch_size or max(1, args.num_envs // 2),
        "contend": args.contend,
        "trainer_threads": args.trainer_threads,
        "trainer_work_us": work_us,
        "rounds": args.rounds,
        "round_seconds": args.round_seconds,
        "cores": cores,
        "busy_pids": [p.pid for p in busy.procs],
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    result = results(rows, meta)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0
