"""Seeds as Gymnasium's vector envs give them (:mod:`shmenv.seeding`), compared with
``SyncVectorEnv``: an unseeded reset continues each env's stream, any list of seeds seeds each
env, and native envs report their seeds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import shmenv


def image_pair(n: int):
    """A shmenv pool of the small image env and its SyncVectorEnv twin."""
    from shmenv_fixtures.images import ImageEnv

    envs = shmenv.make_vec("shmenv_fixtures.images:ImageEnv", n, num_workers=2)
    return envs, gym.vector.SyncVectorEnv([ImageEnv for _ in range(n)])


def assert_resets_alike(envs, ref, **kwargs) -> None:
    obs, _ = envs.reset(**kwargs)
    r_obs, _ = ref.reset(**kwargs)
    np.testing.assert_array_equal(obs, r_obs, err_msg=str(kwargs))
    actions = np.arange(envs.num_envs) % 2
    np.testing.assert_array_equal(envs.step(actions)[0], ref.step(actions)[0], err_msg=str(kwargs))
    assert envs.np_random_seed == ref.np_random_seed, kwargs


@pytest.mark.timeout(60)
def test_reset_without_seed_continues_each_envs_stream(no_leaks):
    envs, ref = image_pair(3)
    with envs:
        assert_resets_alike(envs, ref, seed=3)
        for _ in range(2):
            assert_resets_alike(envs, ref)  # seed=None: every env continues its own stream
    ref.close()


@pytest.mark.timeout(60)
def test_any_list_of_seeds_seeds_each_env_as_sync_does(no_leaks):
    envs, ref = image_pair(4)
    with envs:
        assert_resets_alike(envs, ref, seed=[1, 0, 7, 7])  # the first reset, not consecutive
        assert_resets_alike(envs, ref, seed=[9, None, 2**64 - 1, 5])
        mask = np.array([True, False, True, True])
        assert_resets_alike(envs, ref, seed=[4, 100, None, 3], options={"reset_mask": mask})
        assert_resets_alike(envs, ref, seed=11)
    ref.close()


@pytest.mark.timeout(60)
def test_native_envs_report_their_seeds(no_leaks):
    with shmenv.make_vec("CartPole-v1", 3, num_workers=1, seed=10) as envs:
        assert envs.np_random_seed == (None, None, None)
        envs.reset()
        assert envs.np_random_seed == (10, 11, 12)
        envs.reset(seed=[4, 1, 8])
        assert envs.np_random_seed == (4, 1, 8)
        envs.reset()
        assert envs.np_random_seed == (4, 1, 8)
        envs.reset(seed=5, options={"reset_mask": np.array([False, True, False])})
        assert envs.np_random_seed == (4, 6, 8)
