"""The call side channel follows restarted workers (``max_restarts``): calls reach the
replacement's envs and hosted envs' infos still arrive."""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest

import shmenv
import shmenv.restarts

pytestmark = pytest.mark.timeout(60)


def _step_until_restart(envs, act, limit: int = 2000) -> dict:
    for _ in range(limit):
        *_, infos = envs.step(act)
        if infos.get("restarted_envs"):
            return infos
    raise AssertionError("the killed worker was never restarted")


def test_calls_reach_a_restarted_workers_envs(no_leaks):
    act = np.zeros(4, dtype=np.int64)
    with shmenv.make_vec(gym.spec("CartPole-v1"), 4, num_workers=2, max_restarts=3, seed=0) as envs:
        envs.reset()
        old = list(envs.worker_pids)
        envs.set_attr("marker", ["a", "b", "c", "d"])
        os.kill(old[0], signal.SIGKILL)
        infos = _step_until_restart(envs, act)
        assert infos["restarted_envs"] == [0, 1]
        assert envs.worker_pids[0] != old[0] and envs.worker_pids[1] == old[1]
        specs = envs.get_attr("spec")
        assert [s.id for s in specs] == ["CartPole-v1"] * 4
        assert envs.call("get_wrapper_attr", "spec")[0].id == "CartPole-v1"
        # The replacement's envs are new objects: the old marker is gone there only.
        assert envs.env_call("call", "get_wrapper_attr", [2, 3], args=("marker",)) == ["c", "d"]
        with pytest.raises(shmenv.WorkerError):
            envs.call("get_wrapper_attr", "marker")
        envs.set_attr("marker", ["w", "x", "y", "z"])
        assert envs.get_attr("marker") == ("w", "x", "y", "z")
        assert envs.call("get_wrapper_attr", "marker") == ("w", "x", "y", "z")
        envs.step(act)  # the pool keeps stepping


def test_a_call_after_a_restart_it_did_not_see_takes_the_new_connection(no_leaks, monkeypatch):
    """The step does not follow the restart here: the call finds the pid changed."""
    monkeypatch.setattr(shmenv.restarts.Restarts, "follow", lambda self, res: None)
    act = np.zeros(4, dtype=np.int64)
    with shmenv.make_vec(gym.spec("CartPole-v1"), 4, num_workers=2, max_restarts=3, seed=0) as envs:
        envs.reset()
        os.kill(envs.worker_pids[1], signal.SIGKILL)
        _step_until_restart(envs, act)
        assert [s.id for s in envs.get_attr("spec")] == ["CartPole-v1"] * 4
        envs.set_attr("marker", 7)
        assert envs.call("get_wrapper_attr", "marker") == (7, 7, 7, 7)


def test_a_call_that_finds_a_worker_dead_has_it_restarted(no_leaks):
    """As a step would: the call restarts the worker (within the budget) and carries on;
    the next step reports its envs restarted (more in test_chaos.py)."""
    with shmenv.make_vec(gym.spec("CartPole-v1"), 4, num_workers=2, max_restarts=3, seed=0) as envs:
        envs.reset()
        pid = envs.worker_pids[0]
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)  # dead, not yet noticed by the pool (no step)
        assert [s.id for s in envs.get_attr("spec")] == ["CartPole-v1"] * 4
        assert envs.restarts == [1, 0] and envs.worker_pids[0] != pid
        *_, trunc, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert infos["restarted_envs"] == [0, 1] and trunc[[0, 1]].all()


def test_hosted_env_infos_arrive_after_a_restart(no_leaks):
    act = np.zeros(4, dtype=np.int64)
    with shmenv.make_vec("shmenv_fixtures.infos:InfoEnv", 4, num_workers=2, max_restarts=3, seed=0) as envs:
        envs.reset()
        os.kill(envs.worker_pids[0], signal.SIGKILL)
        infos = _step_until_restart(envs, act)
        # The replacement's envs were reset: their reset infos come with the restart batch.
        assert infos["_start"][[0, 1]].all()
        seen = np.zeros(4, dtype=bool)
        for _ in range(6):
            *_, infos = envs.step(act)
            assert "_lives" in infos
            seen |= infos["_lives"]
            assert infos["t"][infos["_t"]].min() >= 1
        assert seen.all()  # step infos of the restarted worker's envs (0, 1) too
        assert [s is None or s.id for s in envs.get_attr("spec")]
