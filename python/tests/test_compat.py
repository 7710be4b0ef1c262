"""Issue 20, hosting what Gymnasium's vector envs host: image observations whose bounds
must travel compactly, hosted envs closed at ``close()``, Gymnasium's error types and
seeding, and sub-env infos. Every test runs real worker processes and compares with
``SyncVectorEnv`` where Gymnasium defines the behaviour."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import shmenv

pytestmark = pytest.mark.timeout(60)


def assert_steps_like_sync(entry_point: str, env_cls, n: int, steps: int, seed: int, **kwargs) -> int:
    """Steps a shmenv pool of ``entry_point`` and a ``SyncVectorEnv`` of ``env_cls`` with
    the same seeds and actions; returns how many episodes ended."""
    ref = gym.vector.SyncVectorEnv([lambda: env_cls(**kwargs) for _ in range(n)])
    ends = 0
    with shmenv.make_vec(entry_point, n, num_workers=2, config=kwargs) as envs:
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.observation_space == ref.observation_space
        obs, _ = envs.reset(seed=seed)
        r_obs, _ = ref.reset(seed=seed)
        np.testing.assert_array_equal(obs, r_obs)
        rng = np.random.default_rng(seed)
        for t in range(steps):
            actions = rng.integers(0, envs.single_action_space.n, size=n)
            obs, rew, term, trunc, _ = envs.step(actions)
            r_obs, r_rew, r_term, r_trunc, _ = ref.step(actions)
            np.testing.assert_array_equal(obs, r_obs, err_msg=f"step {t}")
            np.testing.assert_array_equal(rew, r_rew.astype(np.float32))
            np.testing.assert_array_equal(term, r_term)
            np.testing.assert_array_equal(trunc, r_trunc)
            ends += int(np.sum(term | trunc))
    ref.close()
    return ends


# --- 1. bounds that scale -----------------------------------------------------------------


def test_atari_like_frame_stack_starts_and_steps_like_sync(no_leaks):
    from shmenv_fixtures.images import FrameStackEnv

    ends = assert_steps_like_sync("shmenv_fixtures.images:FrameStackEnv", FrameStackEnv, 3, 40, seed=5)
    assert ends >= 2


def test_96x96x3_image_env_starts_and_steps_like_sync(no_leaks):
    from shmenv_fixtures.images import ImageEnv

    ends = assert_steps_like_sync(
        "shmenv_fixtures.images:ImageEnv", ImageEnv, 3, 30, seed=2, shape=[96, 96, 3], length=8
    )
    assert ends >= 2


def test_small_box_with_varying_bounds_keeps_every_bound(no_leaks):
    from shmenv_fixtures.images import VaryingBoundsImageEnv

    ends = assert_steps_like_sync(
        "shmenv_fixtures.images:VaryingBoundsImageEnv", VaryingBoundsImageEnv, 2, 20, seed=1, shape=[8, 8, 3]
    )
    assert ends >= 1


def test_large_box_with_varying_bounds_is_refused_naming_the_space(no_leaks):
    with pytest.raises(shmenv.BuildError) as e:
        shmenv.make_vec("shmenv_fixtures.images:VaryingBoundsImageEnv", 2, num_workers=1)
    message = str(e.value)
    assert "observation \"obs\"" in message and "[96,96,3]" in message, message
    assert "uniform bounds" in message and "65536" in message, message


# --- 2. closing -------------------------------------------------------------------------


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


def test_a_failing_close_does_not_stop_the_others(tmp_path, no_leaks):
    config = {"directory": str(tmp_path), "fail_close": True}
    with shmenv.make_vec("shmenv_fixtures.closing:ClosingEnv", 4, num_workers=2, config=config) as envs:
        envs.reset(seed=0)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert sum(n.startswith("failed-") for n in names) == 2, names  # the first env of each worker
    assert sum(n.startswith("closed-") for n in names) == 2, names


def test_a_close_that_hangs_is_cut_short_and_the_worker_killed(tmp_path, no_leaks):
    import time

    config = {"directory": str(tmp_path), "close_delay": 30.0}
    envs = shmenv.make_vec("shmenv_fixtures.closing:ClosingEnv", 2, num_workers=2, config=config)
    envs.reset(seed=0)
    start = time.monotonic()
    envs.close()
    assert time.monotonic() - start < 5.0
    assert list(tmp_path.iterdir()) == []
