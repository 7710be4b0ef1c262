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

    python -m shmenv.bench --env CartPole-v1 --num-envs 32 --plot bench.svg  # the plot (.svg or .png; matplotlib)
    python -m shmenv.bench --env CartPole-v1 --python --num-envs 32          # Gymnasium's CartPole in shmenv
    python -m shmenv.bench --env shmenv.bench.envs:BurnEnv --config '{"step_us": 50}' --num-envs 8
    # A C env (examples/c/cartpole.c built into libcartpole.so) against EnvPool's CartPole
    python -m shmenv.bench --plugin ./libcartpole.so --env CartPoleC-v1 --envpool-env CartPole-v1 \\
        --num-envs 32 --workers 2 --only shmenv,shmenv-nocopy,envpool,envpool-async
    # Real workloads (Atari, MuJoCo, classic) against EnvPool, ALE and Gymnasium: see
    # shmenv.bench.workloads
    python -m shmenv.bench --workload atari
    # How each wait strategy holds up on a busy machine: see shmenv.bench.contend
    python -m shmenv.bench --contend 2

Modes and modules: the comparison above (:mod:`shmenv.bench.compare`, contestants in
:mod:`shmenv.bench.contestants`, the call cost in :mod:`shmenv.bench.call`), ``--workload``
(:mod:`shmenv.bench.workloads`), ``--contend`` (:mod:`shmenv.bench.contend`). Two more
benchmarks run on their own: ``python -m shmenv.bench.infos`` (what infos cost) and
``python -m shmenv.bench.ray`` (the Ray path).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from shmenv.bench import compare, contend, workloads
from shmenv.bench.contestants import KEYS
from shmenv.bench.workloads import SYSTEMS

#: Defaults of the options whose default depends on the mode (``None`` in the parser).
MODE_DEFAULTS: dict[str, dict[str, Any]] = {
    "compare": {"num_envs": 32, "passes": 3, "rounds": 3, "round_seconds": 0.5, "only": ",".join(KEYS)},
    "contend": {
        "num_envs": 32,
        "passes": 3,
        "rounds": 3,
        "round_seconds": 0.5,
        "only": ",".join(KEYS),
        **contend.DEFAULTS,
    },
    "workload": {"num_envs": None, "passes": 2, "rounds": 3, "round_seconds": 1.0, "only": ",".join(SYSTEMS)},
}
#: Options of the comparison (and ``--contend``) that ``--workload`` does not take.
NOT_FOR_WORKLOADS = (
    "env",
    "python",
    "config",
    "envpool_env",
    "overhead_rounds",
    "plot",
    "png",
    "contend",
    "trainer_threads",
)
#: Options of ``--workload`` only.
WORKLOAD_ONLY = ("game", "mujoco_env", "trainer_us", "no_pin")


def _common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--num-envs",
        type=int,
        default=None,
        help="envs (default 32; 64 with --contend; with --workload: one size instead of the workload's sizes)",
    )
    p.add_argument("--workers", type=int, default=2, help="shmenv workers, EnvPool and ALE threads")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="async batch (default num_envs / 2; with --workload and --num-envs: sync when absent)",
    )
    p.add_argument(
        "--plugin",
        default=None,
        help="run --env from this plugin library (a C/C++ env, shmenv_env.h) in shmenv's contestants; with "
        "--workload: a native plugin of the workload's env (Atari, MuJoCo)",
    )
    p.add_argument(
        "--passes", type=int, default=None, help="passes over every contestant (default 3; 2 with --workload)"
    )
    p.add_argument("--rounds", type=int, default=None, help="rounds per pass (default 3; 5 with --contend)")
    p.add_argument(
        "--round-seconds", type=float, default=None, help="seconds per round (default 0.5; 1 with --workload)"
    )
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated contestants (default: all): "
        + ", ".join(KEYS)
        + "; with --workload: "
        + ", ".join(SYSTEMS),
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON (--workload: one object per line)")


def _comparison_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("the comparison (and --contend)")
    g.add_argument(
        "--env",
        default="CartPole-v1",
        help="a native or Gymnasium id, or an entry point 'module:Class' (e.g. shmenv.bench.envs:BurnEnv)",
    )
    g.add_argument(
        "--python",
        action="store_true",
        help="host the Gymnasium (Python) env of --env in shmenv's workers instead of the native one",
    )
    g.add_argument("--config", type=json.loads, default=None, help="shmenv env config (JSON)")
    g.add_argument(
        "--envpool-env",
        default=None,
        help="the EnvPool env of the envpool contestants when it is not --env (e.g. CartPole-v1 for Burn-v0)",
    )
    g.add_argument(
        "--overhead-rounds", type=int, default=7, help="rounds of the 1-env step() call cost (native envs; 0 skips it)"
    )
    g.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="draw the comparison into FILE, SVG or PNG by its suffix (.svg, .png): each contestant's median "
        "steps/s with its range and its ratio to SyncVectorEnv; needs matplotlib (pip install 'shmenv[bench]'); "
        "a file that cannot be written is refused before the runs",
    )
    g.add_argument("--png", default=None, metavar="FILE", help="deprecated: the old name of --plot (same behaviour)")


def _mode_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("other modes")
    g.add_argument(
        "--workload",
        default=None,
        choices=("atari", "mujoco", "classic"),
        help="real workloads (shmenv.bench.workloads): the env with its preprocessing in every engine, the single "
        "env in-process as the ideal, at the workload's sizes",
    )
    g.add_argument(
        "--contend",
        type=int,
        default=None,
        metavar="N",
        help="contention benchmark (shmenv.bench.contend): every shmenv wait strategy x pinning, shmenv async, "
        "SyncVectorEnv and EnvPool, each idle and with N busy processes (CPU spin loops; 0 for none), rounds "
        "interleaved, medians (--passes, --only, --plot do not apply)",
    )
    g.add_argument(
        "--trainer-threads",
        type=int,
        default=0,
        metavar="T",
        help="with --contend: in the contended rounds the trainer also does four 192x192 float32 matmuls on T "
        "BLAS threads between batches, as a small policy update would (needs threadpoolctl; 0: none)",
    )
    w = p.add_argument_group("with --workload")
    w.add_argument("--game", default="Pong", help="Atari game (EnvPool's id without -v5)")
    w.add_argument("--mujoco-env", default="HalfCheetah", help="MuJoCo env (Gymnasium's id without -v5)")
    w.add_argument("--trainer-us", type=float, default=0.0, help="CPU time the trainer spends per batch (us)")
    w.add_argument(
        "--no-pin", action="store_true", help="do not pin shmenv's workers to cores (make_vec(pin_workers=False))"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m shmenv.bench",
        description=(__doc__ or "").split("\n\n")[0],
        epilog="contestants: " + ", ".join(KEYS) + "; --workload systems: " + ", ".join(SYSTEMS),
    )
    _common_options(p)
    _comparison_options(p)
    _mode_options(p)
    return p


def _mode(p: argparse.ArgumentParser, argv: list[str] | None) -> str:
    known = p.parse_known_args(argv)[0]
    if known.workload is not None:
        return "workload"
    return "compare" if known.contend is None else "contend"


def _refuse_foreign(p: argparse.ArgumentParser, args: argparse.Namespace, mode: str) -> None:
    """Exits with a usage error when an option of another mode was given."""
    foreign = NOT_FOR_WORKLOADS if mode == "workload" else WORKLOAD_ONLY
    for name in foreign:
        if getattr(args, name) != p.get_default(name):
            option = "--" + name.replace("_", "-")
            p.error(f"{option} does not apply to --workload" if mode == "workload" else f"{option} needs --workload")


def _plot_alias(p: argparse.ArgumentParser, args: argparse.Namespace, mode: str) -> None:
    """Takes the deprecated ``--png FILE`` as ``--plot FILE`` (saying so on stderr), and
    refuses ``--plot`` where no plot is drawn (``--contend``)."""
    if args.png is not None:
        if args.plot is not None:
            p.error("--png is the old name of --plot: give only --plot FILE")
        print("note: --png is deprecated; use --plot FILE (.svg or .png)", file=sys.stderr)
        if mode == "compare":
            args.plot, args.png = args.png, None
    if mode == "contend" and args.plot is not None:
        p.error("--plot does not apply to --contend (it prints a table, or JSON with --json)")


def main(argv: list[str] | None = None) -> int:
    p = parser()
    mode = _mode(p, argv)
    p.set_defaults(**MODE_DEFAULTS[mode])
    args = p.parse_args(argv)
    _refuse_foreign(p, args, mode)
    _plot_alias(p, args, mode)
    if mode == "workload":
        return workloads.run(p, args)
    if mode == "contend":
        return contend.run(p, args)
    return compare.run(p, args)


if __name__ == "__main__":
    sys.exit(main())
