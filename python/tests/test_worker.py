"""The worker program (:mod:`shmenv.worker`): at ``close()`` it closes every hosted env, goes
on past one whose ``close`` fails, and is cut short (then killed) when one hangs."""

from __future__ import annotations

import time

import numpy as np
import pytest

import shmenv

@pytest.mark.timeout(60)
def test_close_closes_every_hosted_env(tmp_path, no_leaks):
    envs = shmenv.make_vec("shmenv_fixtures.closing:ClosingEnv", 5, num_workers=2, config={"directory": str(tmp_path)})
    pids = envs.worker_pids
    envs.reset(seed=0)
    for _ in range(3):
        envs.step(np.zeros(5, dtype=np.int64))
    envs.close()
    closed = sorted(p.name for p in tmp_path.iterdir())
    assert len(closed) == 5, closed
    assert {int(name.split("-")[1]) for name in closed} == set(pids)
    assert all((tmp_path / name).read_text() == "3" for name in closed)


@pytest.mark.timeout(60)
def test_a_failing_close_does_not_stop_the_others(tmp_path, no_leaks):
    config = {"directory": str(tmp_path), "fail_close": True}
    with shmenv.make_vec("shmenv_fixtures.closing:ClosingEnv", 4, num_workers=2, config=config) as envs:
        envs.reset(seed=0)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert sum(n.startswith("failed-") for n in names) == 2, names  # the first env of each worker
    assert sum(n.startswith("closed-") for n in names) == 2, names


@pytest.mark.timeout(60)
def test_a_close_that_hangs_is_cut_short_and_the_worker_killed(tmp_path, no_leaks):
    config = {"directory": str(tmp_path), "close_delay": 30.0}
    envs = shmenv.make_vec("shmenv_fixtures.closing:ClosingEnv", 2, num_workers=2, config=config)
    envs.reset(seed=0)
    start = time.monotonic()
    envs.close()
    took = time.monotonic() - start
    # Cut short: the pool did not wait for the env's 30 s close (and the env never finished it).
    assert took < config["close_delay"], f"close took {took:.1f} s, the env's whole close_delay"
    assert list(tmp_path.iterdir()) == []
