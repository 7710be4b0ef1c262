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

