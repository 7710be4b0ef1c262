"""Env code that forks, the child carrying on into shmenv (a hosted Python env calling
``os.fork()`` in ``step``; a C plugin forking inside ``step_batch`` of the trainer's own
shard): the copy is stopped before it touches the pool, the parent's observations come
back in order, and no copy is left running."""

from __future__ import annotations

import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import alive, children, wait_gone
from test_plugins import compile_plugin

import shmenv

pytestmark = pytest.mark.timeout(120)

#: The exit code of a stopped copy (``shmenv_engine::launch::fork::FORKED_COPY_EXIT``).
FORKED_COPY_EXIT = 5


def recorded(pid_dir: Path) -> list[int]:
    """The pids of the forked copies, as the envs recorded them."""
    return sorted(int(p.name) for p in pid_dir.iterdir())


def steps_count_up(envs, n: int, infos_count: bool = False) -> None:
    """Resets, then steps 8 times: every env's observation (and with ``infos_count`` its
    info ``t``, nothing else) is its step count, in order."""
    obs, _ = envs.reset(seed=0)
    np.testing.assert_array_equal(obs.reshape(n), np.zeros(n))
    for t in range(1, 9):
        obs, _, term, trunc, infos = envs.step(np.zeros(n, dtype=np.int64))
        np.testing.assert_array_equal(obs.reshape(n), np.full(n, t), err_msg=f"step {t}")
        assert not (term.any() or trunc.any()), f"step {t}"
        if infos_count:
            assert set(infos) <= {"t", "_t", "episode_stats", "_episode_stats"}, f"step {t}: {infos}"
            np.testing.assert_array_equal(infos["t"], np.full(n, t), err_msg=f"step {t}: {infos}")


def reap(pid: int, timeout: float = 20.0) -> int:
    """Waits for this process's child `pid` to end; returns its wait status."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status
        assert time.monotonic() < deadline, f"forked copy {pid} still running after {timeout} s"
        time.sleep(0.01)


def test_a_hosted_env_forking_in_step_keeps_the_pool_in_order(tmp_path, capfd, no_leaks):
    gym.register("FixtureForking-v0", entry_point="shmenv_fixtures.forking:ForkingEnv")
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    try:
        config = {"pid_dir": str(pid_dir), "fork_at": 2}
        with shmenv.make_vec("FixtureForking-v0", 2, num_workers=1, config=config, step_timeout=20) as envs:
            workers = list(envs.worker_pids)
            steps_count_up(envs, 2, infos_count=True)
            copies = recorded(pid_dir)
            assert len(copies) == 2, f"one copy per env: {copies}"
            # Stopped at once (zombies of their worker until it ends), not serving commands.
            assert not wait_gone(copies, timeout=20), f"copies still running: {copies}"
            assert all(p not in children() for p in copies), "copies of the worker, not of the trainer"
            # The copies ran their env code to its end before they were stopped: what they
            # wrote went to private pages, not to the infos the trainer reads.
            for t in (9, 10):
                obs, _, _, _, infos = envs.step(np.zeros(2, dtype=np.int64))
                assert "ghost" not in infos and list(infos["t"]) == [t, t], f"step {t}: {infos}"
            assert set(workers) == set(envs.worker_pids), "no worker was replaced"
        assert not [p for p in copies if alive(p)], f"copies running after close: {copies}"
        err = capfd.readouterr().err
        assert err.count("is a copy of process") == 2 and "of shmenv worker 0" in err, err
    finally:
        gym.registry.pop("FixtureForking-v0", None)


def test_a_plugin_forking_in_the_trainers_shard_stops_its_copy(tmp_path, no_leaks):
    lib = compile_plugin("tests/plugins/forks.c", tmp_path)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    config = {"pid_dir": str(pid_dir), "fork_at": 2}
    with shmenv.make_vec(
        "ForkInStep-v0", 4, num_workers=1, trainer_shard=True, plugin=lib, config=config, step_timeout=3
    ) as envs:
        steps_count_up(envs, 4)
        copies = recorded(pid_dir)
        assert len(copies) == 2, f"one copy per shard (the trainer's, the worker's): {copies}"
        ours = [p for p in copies if p in children()]
        assert len(ours) == 1, f"one copy of this process among {copies}"
        status = reap(ours[0])
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == FORKED_COPY_EXIT, hex(status)
        assert not wait_gone(copies, timeout=20), f"copies still running: {copies}"
    assert not [p for p in copies if alive(p)], f"copies running after close: {copies}"
