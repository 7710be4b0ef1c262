"""``python -m shmenv.bench --contend``: a tiny run in a subprocess gives idle and contended
figures for every shmenv row, and leaves no busy process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import alive

from shmenv.bench.contend import BUSY_CODE

SHMENV_ROWS = {
    "shmenv-auto-pinned",
    "shmenv-auto-unpinned",
    "shmenv-yield-pinned",
    "shmenv-yield-unpinned",
    "shmenv-block-pinned",
    "shmenv-block-unpinned",
    "shmenv-async",
    "shmenv-async-block-unpinned",
}


def busy_processes() -> set[int]:
    """Pids of live processes running the benchmark's busy loop (a /proc scan)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if BUSY_CODE in cmdline and alive(int(entry)):
            found.add(int(entry))
    return found


@pytest.mark.timeout(150)
def test_contend_reports_every_shmenv_setting_and_kills_its_busy_processes():
    before = busy_processes()
    cmd = [sys.executable, "-m", "shmenv.bench", "--contend", "1", "--trainer-threads", "1", "--rounds", "1",
           "--round-seconds", "0.05", "--num-envs", "8", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["mode"] == "contend" and r["contend"] == 1 and r["trainer_threads"] == 1 and r["num_envs"] == 8
    assert r["trainer_work_us"] > 0
    rows = {row["key"]: row for row in r["rows"]}
    assert SHMENV_ROWS <= set(rows)
    for key in SHMENV_ROWS:
        row = rows[key]
        assert row["shmenv"] and row["skipped"] is None, row
        assert row["idle_steps_per_sec"] > 0 and row["contended_steps_per_sec"] > 0, row
        assert row["vs_best_shmenv"]["idle"] > 0 and row["vs_best_shmenv"]["contended"] > 0
    assert [k for k, row in rows.items() if row["default"]] == ["shmenv-auto-pinned"]
    # Baselines ran or say why not (EnvPool may not be installed).
    for key in ("sync", "envpool", "envpool-async"):
        assert rows[key]["idle_steps_per_sec"] or rows[key]["skipped"], rows[key]
    assert len(r["busy_pids"]) == 1
    left = busy_processes()
    assert not set(r["busy_pids"]) & left, "a busy process outlived the benchmark"
    assert left <= before, f"busy processes left behind: {left - before}"


@pytest.mark.timeout(120)
def test_contend_refuses_options_that_do_not_apply():
    done = subprocess.run([sys.executable, "-m", "shmenv.bench", "--contend", "0", "--only", "shmenv"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--only does not apply to --contend" in done.stderr
    done = subprocess.run([sys.executable, "-m", "shmenv.bench", "--trainer-threads", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--trainer-threads needs --contend" in done.stderr
