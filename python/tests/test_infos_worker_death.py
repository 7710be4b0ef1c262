"""A worker that dies while it sends the trainer a batch's pickled infos: the batch that
lost them raises ``WorkerDiedError`` naming the worker and its envs (default policy: the
pool is closed), never returns as if the envs had no infos."""

from __future__ import annotations

import numpy as np
import pytest

import shmenv

pytestmark = pytest.mark.timeout(90)

ENV = "shmenv_fixtures.dying_infos:DyingInfosEnv"


def test_the_batch_whose_infos_died_with_their_worker_raises(no_leaks):
    # Only env 2's env (worker 1's shard) dies: its `at` is 3, the others never reach theirs.
    with shmenv.make_vec(ENV, 4, num_workers=2, seed=0, config={"at": 3}) as envs:
        envs.reset()
        envs.set_attr("at", [99, 99, 3, 99])
        act = np.zeros(4, np.int64)
        for _ in range(2):
            _, _, _, _, infos = envs.step(act)
            assert list(infos["label"]) == ["ok"] * 4
        with pytest.raises(shmenv.WorkerDiedError) as caught:
            envs.step(act)
        assert caught.value.worker == 1 and caught.value.env_ids == [2, 3], caught.value
        assert "infos" in str(caught.value)
        assert envs.closed


def test_under_a_restart_policy_the_batch_returns_and_the_envs_come_back_restarted(no_leaks):
    with shmenv.make_vec(ENV, 4, num_workers=2, seed=0, max_restarts=2) as envs:
        envs.reset()
        envs.set_attr("at", [99, 99, 3, 99])
        act = np.zeros(4, np.int64)
        for _ in range(3):
            envs.step(act)
        restarted = []
        for _ in range(50):
            _, _, _, _, infos = envs.step(act)
            restarted += infos.get("restarted_envs", [])
            if restarted:
                break
        assert restarted == [2, 3] and envs.restarts == [0, 1]
