"""``shmenv.make_vec`` called as ``gymnasium.make_vec`` is: ``id=`` as a keyword, and the
warning said when a native id is hosted for env keywords points at the user's line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import shmenv
import shmenv.resolve
from shmenv.errors import InvalidArgumentTypeError


@pytest.mark.timeout(120)
def test_make_vec_takes_id_as_gymnasium_make_vec_does(no_leaks):
    kwargs = dict(id="Acrobot-v1", num_envs=3, vectorization_mode="sync")
    envs = shmenv.make_vec(**kwargs)
    ref = gym.make_vec(**kwargs)
    try:
        assert envs.num_envs == ref.num_envs == 3
        assert envs.single_observation_space == ref.single_observation_space
        obs, _ = envs.reset(seed=5)
        r_obs, _ = ref.reset(seed=5)
        np.testing.assert_array_equal(obs, r_obs)
        for t in range(20):
            actions = np.array([t % 3, 1, 2])
            np.testing.assert_array_equal(envs.step(actions)[0], ref.step(actions)[0])
    finally:
        envs.close()
        ref.close()


@pytest.mark.timeout(60)
def test_make_vec_id_keyword_with_a_native_id(no_leaks):
    with shmenv.make_vec(id="CartPole-v1", num_envs=2, seed=0) as envs:
        assert envs.env_id == "CartPole-v1" and envs.backend == "native"
        assert envs.reset()[0].shape == (2, 4)


def test_make_vec_refuses_env_and_id_together_and_neither():
    with pytest.raises(InvalidArgumentTypeError, match=r"both env='CartPole-v1' and id='Acrobot-v1'.*pass one"):
        shmenv.make_vec("CartPole-v1", 2, id="Acrobot-v1")
    with pytest.raises(InvalidArgumentTypeError, match=r"got neither env nor id.*id='CartPole-v1'"):
        shmenv.make_vec(num_envs=2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["make_vec", "make_vec id=", "ShmVectorEnv", "ShmVecEnv"])
def test_hosted_native_id_warning_points_at_the_users_line(how, no_leaks):
    if how == "ShmVecEnv":
        pytest.importorskip("stable_baselines3")
    # The warning is said once per id and process: forget that it was said.
    shmenv.resolve._HOSTED_WARNED.discard("Pendulum-v1")
    with pytest.warns(UserWarning, match="Pendulum-v1 is a native shmenv env") as record:
        if how == "make_vec":
            envs = shmenv.make_vec("Pendulum-v1", 2, g=9.81)
        elif how == "make_vec id=":
            envs = shmenv.make_vec(id="Pendulum-v1", num_envs=2, g=9.81)
        elif how == "ShmVectorEnv":
            envs = shmenv.ShmVectorEnv("Pendulum-v1", 2, g=9.81)
        else:
            from shmenv.sb3 import ShmVecEnv

            envs = ShmVecEnv("Pendulum-v1", 2, g=9.81)
    envs.close()
    hosted = [w for w in record if "is a native shmenv env" in str(w.message)]
    assert len(hosted) == 1
    assert hosted[0].filename == __file__, f"the warning points at {hosted[0].filename}:{hosted[0].lineno}"
