"""What ``make_vec``'s arguments become before any worker starts (:mod:`shmenv.engine_args`):
arguments that must agree with each other, over real pools."""

from __future__ import annotations

import pytest

import shmenv

@pytest.mark.timeout(60)
def test_num_workers_and_envs_per_worker_together(no_leaks):
    with shmenv.make_vec("CartPole-v1", 4, num_workers=4, envs_per_worker=1) as envs:
        assert envs.num_workers == 4 and len(envs.worker_pids) == 4
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (4, 4)
    with pytest.raises(shmenv.InvalidArgumentError) as e:
        shmenv.make_vec("CartPole-v1", 4, num_workers=2, envs_per_worker=1)
    assert "num_workers=2" in str(e.value) and "envs_per_worker=1" in str(e.value)
