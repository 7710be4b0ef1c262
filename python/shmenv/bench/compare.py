"""The default mode of ``python -m shmenv.bench``: every contestant in ``--passes`` passes,
one at a time, then the table (or ``--json``) with the copy costs and the 1-env call cost."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
from typing import Any, Callable

from shmenv.bench.call import call_overhead
from shmenv.bench.contestants import (
    KEYS,
    Contestant,
    NotApplicable,
    envpool_vec,
    gymnasium_vec,
    is_native,
    settle,
    shmenv_async,
    shmenv_sync,
)
from shmenv.bench.progress import Progress, warn_if_loaded


def _run_passes(
    makers: dict[str, Callable[[], Contestant]],
    wanted: list[str],
    args: argparse.Namespace,
    skipped: dict[str, str],
    not_applicable: dict[str, str],
) -> tuple[dict[str, Contestant], dict[str, list[float]]]:
    """Runs every wanted contestant once per pass, one at a time; returns the figures (not
    the engines) and each contestant's median per pass. Contestants that cannot run are
    recorded in `skipped` or `not_applicable`. A status line on a terminal says which runs."""
    found: dict[str, Contestant] = {}
    pass_medians: dict[str, list[float]] = {}
    progress = Progress(args.passes * sum(key in wanted for key in KEYS))
    for p in range(args.passes):
        for key in KEYS:
            if key not in wanted:
                continue
            what = f"pass {p + 1}/{args.passes}: {key}"
            if key in skipped or key in not_applicable:
                progress.end(what)
                continue
            round_done = progress.begin(what, args.rounds)
            try:
                c = makers[key]()
            except NotApplicable as e:
                not_applicable[key] = str(e)
                progress.end(what, "not applicable")
                continue
            except ImportError as e:
                name = e.name or str(e)
                skipped[key] = f"{name} not installed" + (" (pip install envpool)" if name == "envpool" else "")
                progress.end(what, "skipped")
                continue
            except Exception as e:  # noqa: BLE001 - a contestant that cannot run is reported, not fatal
                skipped[key] = f"{type(e).__name__}: {e}"
                progress.end(what, "skipped")
                continue
            try:
                c.rounds(args.rounds, args.round_seconds, warm_up=min(0.2, args.round_seconds), on_round=round_done)
            finally:
                c.close()
            progress.end(what)
            # Keep the figures, not the closures: they would keep the engine (EnvPool's
            # threads) alive into the next contestant's turn.
            kept = found.setdefault(key, Contestant(c.name, lambda: 0, lambda: None, key=key, obs_bytes=c.obs_bytes))
            kept.rates.extend(c.rates)
            pass_medians.setdefault(key, []).append(statistics.median(c.rates))
            del c
            settle()
    progress.close()
    return found, pass_medians


def run(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The comparison: every wanted contestant in passes, the call cost of a native env,
    then the table (or ``--json``) and the plot (``--plot``). A ``--plot`` file that could
    not be written is refused before anything runs."""
    if args.trainer_threads:
        p.error("--trainer-threads needs --contend N (0: no busy processes)")
    check_plot_path(p, args.plot)
    n, batch = args.num_envs, args.batch_size or max(1, args.num_envs // 2)
    wanted = [k for k in args.only.split(",") if k]
    unknown = [k for k in wanted if k not in KEYS]
    if unknown:
        p.error(f"unknown contestant(s) {', '.join(unknown)} in --only: use {', '.join(KEYS)}")
    skipped: dict[str, str] = {}
    not_applicable: dict[str, str] = {}
    for key in ("shmenv-async", "shmenv-async-nocopy", "envpool-async"):
        if batch >= n and key in wanted:
            not_applicable[key] = f"batch size {batch} >= {n} envs: no async mode"
    load_before = os.getloadavg()
    warn_if_loaded("at the start")
    found, pass_medians = _run_passes(_makers(args, batch), wanted, args, skipped, not_applicable)
    overhead = _call_overhead(args, wanted, skipped, not_applicable)
    steps_per_call = {k: (batch if "async" in k else n) for k in KEYS}
    base_key = "shmenv" if "shmenv" in found else "shmenv-nocopy"
    result: dict[str, Any] = {
        "env": args.env,
        "config": args.config,
        "num_envs": n,
        "workers": args.workers,
        "batch_size": batch,
        "envpool_env": args.envpool_env,
        "rounds": args.rounds * args.passes,
        "rows": _rows(found, base_key),
        "copy_cost": _copy_costs(found, pass_medians, steps_per_call),
        "call_overhead": overhead,
        # The default (copy=True) figure under the key earlier versions printed.
        "shmenv_step_call_us_1_env": overhead["copy"]["median_us"] if overhead else None,
        "skipped": skipped,
        "not_applicable": not_applicable,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    warn_if_loaded("at the end")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result, base_key, args.passes, args.rounds)
    if args.plot:
        _chart(result, args.plot, quiet=args.json)
    return 0


def _makers(args: argparse.Namespace, batch: int) -> dict[str, Callable[[], Contestant]]:
    """How to build each contestant of ``KEYS`` from the arguments."""
    env, n, w, cfg, py, lib = args.env, args.num_envs, args.workers, args.config, args.python, args.plugin
    return {
        "shmenv": lambda: shmenv_sync(env, n, w, cfg, py, copy=True, plugin=lib),
        "shmenv-nocopy": lambda: shmenv_sync(env, n, w, cfg, py, copy=False, plugin=lib),
        "shmenv-async": lambda: shmenv_async(env, n, w, batch, cfg, py, copy=True, plugin=lib),
        "shmenv-async-nocopy": lambda: shmenv_async(env, n, w, batch, cfg, py, copy=False, plugin=lib),
        "sync": lambda: gymnasium_vec(env, n, "sync", cfg),
        "async": lambda: gymnasium_vec(env, n, "async", cfg),
        "envpool": lambda: envpool_vec(env, n, w, None, args.envpool_env),
        "envpool-async": lambda: envpool_vec(env, n, w, batch, args.envpool_env),
    }


def _call_overhead(
    args: argparse.Namespace, wanted: list[str], skipped: dict[str, str], not_applicable: dict[str, str]
) -> dict[str, Any] | None:
    """The 1-env ``step()`` call cost (native envs, when a shmenv sync contestant ran), or
    None with the reason in `skipped` / `not_applicable`."""
    if args.overhead_rounds <= 0:
        return None
    if not (is_native(args.env, args.python) and args.plugin is None):
        not_applicable["call-overhead"] = "measured for native envs only (a Python env's step dominates)"
        return None
    if "shmenv" not in wanted and "shmenv-nocopy" not in wanted:
        return None
    status = Progress(1)
    status.begin("the 1-env step() call cost", args.overhead_rounds)
    try:
        return call_overhead(args.env, args.config, rounds=args.overhead_rounds)
    except Exception as e:  # noqa: BLE001 - reported like a contestant that cannot run
        skipped["call-overhead"] = f"{type(e).__name__}: {e}"
        return None
    finally:
        status.close()


def _rows(found: dict[str, Contestant], base_key: str) -> list[dict[str, Any]]:
    """One result row per contestant that ran, with its ratios to the shmenv baseline, to
    ``SyncVectorEnv`` and (a copying shmenv contestant) to its copy=False twin."""
    base = found[base_key].median if base_key in found else None
    sync_ref = found["sync"].median if "sync" in found else None
    rows = []
    for c in found.values():
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
    return rows


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


#: The plot formats ``--plot`` writes, chosen by the file's suffix.
PLOT_SUFFIXES = (".svg", ".png")
#: Bar colours: shmenv's contestants, and everybody else.
SHMENV_COLOUR, OTHER_COLOUR = "#d62728", "#7f7f7f"


def check_plot_path(p: argparse.ArgumentParser, path: str | None) -> None:
    """Refuses (a usage error, exit 2) a ``--plot`` file that could not be written, before
    any contestant runs: a suffix other than ``.svg``/``.png``, matplotlib not installed,
    or a path that cannot be opened for writing (no such directory, a directory, no
    permission). The check opens the file without truncating it and removes it again if it
    did not exist before, so nothing is left behind by a refused or interrupted run."""
    if path is None:
        return
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in PLOT_SUFFIXES:
        p.error(
            f"--plot {path!r}: the suffix {suffix or '(none)'!r} names no format this bench writes; "
            f"end the file name with {' or '.join(PLOT_SUFFIXES)}"
        )
    if importlib.util.find_spec("matplotlib") is None:
        p.error(
            "--plot needs matplotlib, which is not installed: pip install 'shmenv[bench]' (or pip install matplotlib)"
        )
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as e:
        p.error(
            f"--plot {path!r} cannot be written ({e.strerror or e}): give a file in a directory that exists and you can write to"
        )
    if not existed:
        os.remove(path)


def _label(rate: float) -> str:
    return f"{rate / 1e6:.2f}M" if rate >= 1e6 else f"{rate / 1e3:.1f}k"


def _chart(result: dict[str, Any], path: str, quiet: bool = False) -> None:
    """Draws the comparison with matplotlib (imported here only, so the bench without
    ``--plot`` never imports it) into `path`, SVG or PNG by its suffix: one bar per
    contestant that ran (the median of its rounds, the whiskers its slowest and fastest
    round), each labelled with its steps/s and its ratio to ``SyncVectorEnv``; SVG keeps
    its text as text."""
    import matplotlib
    from matplotlib.figure import Figure

    rows = result["rows"][::-1]  # the first contestant on top
    names = [r["name"] for r in rows]
    rates = [r["steps_per_sec"] for r in rows]
    whiskers = [[r["steps_per_sec"] - r["min"] for r in rows], [r["max"] - r["steps_per_sec"] for r in rows]]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "shmenv"}):
        fig = Figure(figsize=(10, 0.55 * len(rows) + 2.0))
        ax = fig.subplots()
        colours = [SHMENV_COLOUR if r["key"].startswith("shmenv") else OTHER_COLOUR for r in rows]
        bars = ax.barh(names, rates, xerr=whiskers, color=colours, error_kw={"ecolor": "#333333", "capsize": 3})
        labels = [
            _label(r["steps_per_sec"])
            + (f"  {r['vs_sync_vector_env']:.2f}x SyncVectorEnv" if r["vs_sync_vector_env"] else "")
            for r in rows
        ]
        ax.bar_label(bars, labels=labels, padding=6, fontsize=8)
        ax.set_xscale("log")
        # From the power of ten below the slowest round (bars on a log axis start somewhere),
        # with room on the right for the labels.
        slowest = min(r["min"] for r in rows)
        ax.set_xlim(left=10 ** math.floor(math.log10(max(slowest, 1))), right=max(rates) * 12)
        ax.set_xlabel("env steps per second (log scale; bar: median round, whiskers: slowest and fastest)")
        cfg = f" {json.dumps(result['config'])}" if result["config"] else ""
        batches = f", async batches of {result['batch_size']}" if any("async" in r["key"] for r in rows) else ""
        ax.set_title(
            f"{result['env']}{cfg}: {result['num_envs']} envs, {result['workers']} workers/threads{batches}",
            fontsize=10,
        )
        fig.text(0.01, 0.01, _chart_footer(result), fontsize=7, color="#555555")
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        fig.savefig(path, dpi=120)
    print(f"saved {path}", file=sys.stderr if quiet else sys.stdout)


def _chart_footer(result: dict[str, Any]) -> str:
    """The run's conditions under the plot: rounds, load, and who did not run."""
    before, after = result["loadavg_before"][0], result["loadavg_after"][0]
    missing = sorted({*result["skipped"], *result["not_applicable"]} - {"call-overhead"})
    return f"medians of {result['rounds']} rounds; load average {before:.2f} before, {after:.2f} after" + (
        f"; not run: {', '.join(missing)}" if missing else ""
    )
