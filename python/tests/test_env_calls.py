"""What runs on the envs' Python objects over the call channel (:mod:`shmenv.env_calls` and
the vector env's call API): env 0's spec, metadata and render fps, the attributes native envs
answer, and reset options reaching the envs' ``reset`` as ``SyncVectorEnv`` passes them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import shmenv
from conftest import keep_up

@pytest.mark.timeout(60)
def test_hosted_gymnasium_spec_limits_and_render_fps(no_leaks):
    with shmenv.make_vec(gym.spec("CartPole-v1"), 2, num_workers=1, seed=0) as envs:
        assert envs.spec is not None and envs.spec.id == "CartPole-v1"
        assert envs.spec.max_episode_steps == 500 and envs.max_episode_steps == 500
        assert envs.metadata["render_fps"] == gym.make("CartPole-v1").metadata["render_fps"]
        # The time limit is the spec's: an upright pole is truncated at step 500.
        obs, _ = envs.reset()
        for t in range(1, 501):
            obs, _, term, trunc, info = envs.step(keep_up(obs))
            assert not term.any()
            assert trunc.all() == (t == 500), t


@pytest.mark.timeout(60)
def test_native_env_answers_get_attr_and_call(no_leaks):
    with shmenv.make_vec("CartPole-v1", 3, num_workers=1) as envs:
        assert envs.get_attr("spec") == (envs.spec,) * 3
        assert envs.call("render") == (None, None, None)
        assert envs.get_attr("render_mode") == (None, None, None)
        assert envs.get_attr("observation_space") == (envs.single_observation_space,) * 3
        assert envs.get_attr("action_space") == (spaces.Discrete(2),) * 3
        assert all("render_modes" in m for m in envs.get_attr("metadata"))
        with pytest.raises(AttributeError, match="native"):
            envs.get_attr("gravity")
        assert envs.max_episode_steps == 500


@pytest.mark.timeout(60)
def test_reset_options_reach_the_envs_reset_as_sync_does(no_leaks):
    from shmenv_fixtures.counter import CounterEnv

    n = 4
    ref = gym.vector.SyncVectorEnv([CounterEnv for _ in range(n)])
    with shmenv.make_vec("shmenv_fixtures.counter:CounterEnv", n, num_workers=2) as envs:
        for seed, options in [(1, {"start": 42}), (None, None), (None, {"start": 7, "reset_mask": [1, 0, 1, 0]})]:
            if options is not None and "reset_mask" in options:
                options["reset_mask"] = np.array(options["reset_mask"], dtype=bool)
            obs, _ = envs.reset(seed=seed, options=None if options is None else dict(options))
            want, _ = ref.reset(seed=seed, options=None if options is None else dict(options))
            np.testing.assert_array_equal(obs, want)
            envs.step(np.ones(n, dtype=np.int64))
            ref.step(np.ones(n, dtype=np.int64))
        assert list(obs[:, 2]) == [7, want[1, 2], 7, want[3, 2]]  # the masked envs took the option
    ref.close()
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1) as native:
        with pytest.raises(shmenv.InvalidArgumentError, match="native shmenv env.*no options"):
            native.reset(options={"start": 1})
