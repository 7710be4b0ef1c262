"""The benchmark tools say what they are doing: ``python -m shmenv.bench`` and
``shmenv bench`` show a status line (what runs, which round) on a terminal, warn when the
load average exceeds the cores, and a workload whose packages are missing is skipped for
every engine in one line saying what to ``pip install``, with a non-zero exit status."""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import shmenv_program

from shmenv.bench import progress
from shmenv.bench.__main__ import main as bench_main
from shmenv.bench.__main__ import parser

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--passes", "1", "--rounds", "1", "--round-seconds", "0.05"]

pytestmark = pytest.mark.timeout(180)


def run_on_a_terminal(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 150):
    """Runs `cmd` with stderr on a pseudo-terminal and stdout in a file; returns the exit
    status, stdout, and what the terminal received."""
    master, slave = os.openpty()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=slave, env=env, cwd=ROOT)
        os.close(slave)
        received = bytearray()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.5)
                if not ready:
                    if proc.poll() is not None:
                        break
                    continue
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has closed it
                    break
                if not chunk:
                    break
                received += chunk
            status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        return status, out.read(), received.decode(errors="replace")


def hidden(module: str, tmp_path: Path) -> dict[str, str]:
    """An environment in which `module` cannot be imported, in this process's children and
    theirs (shmenv's workers): a sitecustomize that puts None in ``sys.modules``."""
    (tmp_path / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}


@pytest.mark.parametrize(
    ("workload", "module", "install"),
    [("atari", "ale_py", "pip install ale-py"), ("mujoco", "mujoco", "pip install 'gymnasium[mujoco]'")],
)
def test_a_workload_without_its_package_skips_every_engine_in_one_line(tmp_path, workload, module, install):
    cmd = [sys.executable, "-m", "shmenv.bench", "--workload", workload, *TINY]
    out = subprocess.run(cmd, env=hidden(module, tmp_path), capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"skipped every engine of the {workload} workload: {module} not installed"), lines
    assert install in lines[0], lines
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_a_workload_where_nothing_runs_exits_non_zero(capsys):
    # AtariVectorEnv runs Atari only: with --only ale, the classic workload has nothing to run.
    status = bench_main(["--workload", "classic", "--num-envs", "2", "--only", "ale", *TINY])
    captured = capsys.readouterr()
    assert status == 1
    assert "n/a ale: AtariVectorEnv runs Atari only" in captured.out
    assert "nothing of the classic workload could run" in captured.err


def test_help_shows_workload_as_an_option_with_its_choices(capsys):
    with pytest.raises(SystemExit) as done:
        bench_main(["--workload", "atari", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: python -m shmenv.bench [-h] "), text.splitlines()[0]
    assert "[--workload {atari,mujoco,classic}]" in " ".join(text.split())
    assert "shmenv.bench --workload [-h]" not in text
    assert parser().format_usage() in text


def test_the_comparison_shows_what_runs_on_a_terminal_and_only_there():
    cmd = [sys.executable, "-m", "shmenv.bench", "--only", "shmenv,shmenv-nocopy", "--num-envs", "4",
           "--workers", "1", "--passes", "1", "--rounds", "2", "--round-seconds", "0.05", "--overhead-rounds", "0"]
    status, out, terminal = run_on_a_terminal(cmd)
    assert status == 0, terminal
    assert "[1/2, " in terminal and "pass 1/1: shmenv: round 2/2 done" in terminal, terminal
    assert "pass 1/1: shmenv-nocopy" in terminal, terminal
    assert "shmenv sync" in out and "\r" not in out  # the table on stdout, without status lines
    piped = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert piped.returncode == 0 and "round" not in piped.stderr, piped.stderr


def test_load_above_the_cores_is_warned_about(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(os, "getloadavg", lambda: (progress.cores() + 0.5, 0.0, 0.0))
    load = progress.warn_if_loaded("at the start", stream)
    assert load == progress.cores() + 0.5
    text = stream.getvalue()
    assert text.startswith(f"warning: the load average is {load:.2f} at the start, above the {progress.cores()} cores")
    monkeypatch.setattr(os, "getloadavg", lambda: (progress.cores() - 0.5, 0.0, 0.0))
    quiet = io.StringIO()
    progress.warn_if_loaded("at the end", quiet)
    assert quiet.getvalue() == ""


def test_shmenv_bench_shows_each_round_and_the_serial_loop_on_a_terminal():
    program = shmenv_program()
    if program is None:
        pytest.skip("no shmenv program built in target/ (cargo test or cargo build builds one)")
    cmd = [str(program), "bench", "--env", "CartPole-v1", "--num-envs", "16", "--workers", "1", "--seconds", "3",
           "--baseline"]
    status, out, terminal = run_on_a_terminal(cmd)
    assert status == 0, terminal
    # 6 rounds of 0.5 s each for the pool and the loop; the line is redrawn every 0.25 s.
    assert "/6, shmenv pool:" in terminal and "/6, serial loop:" in terminal, terminal
    assert "steps/s after" in terminal
    assert "shmenv pool:" in out and "ratio:" in out
