"""shmenv's CartPole-v1 steps exactly like Gymnasium's CartPole-v1 under SyncVectorEnv
from the same seeds and actions, auto-resets included."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import shmenv


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_cartpole_matches_gymnasium_step_for_step(mode, no_leaks):
    n, seed = 8, 2024
    gmode = {"next_step": gym.vector.AutoresetMode.NEXT_STEP, "same_step": gym.vector.AutoresetMode.SAME_STEP}[mode]
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)], autoreset_mode=gmode)
    rng = np.random.default_rng(0)
    with shmenv.make_vec("CartPole-v1", n, num_workers=3, autoreset_mode=mode) as envs:
        obs, _ = envs.reset(seed=seed)
        ref_obs, _ = ref.reset(seed=seed)
        np.testing.assert_array_equal(obs, ref_obs)
        ended = 0
        for t in range(600):
            actions = rng.integers(0, 2, size=n)
            obs, rew, term, trunc, infos = envs.step(actions)
            r_obs, r_rew, r_term, r_trunc, r_infos = ref.step(actions)
            np.testing.assert_allclose(obs, r_obs, rtol=0, atol=1e-6, err_msg=f"step {t}")
            np.testing.assert_array_equal(rew, r_rew.astype(np.float32), err_msg=f"step {t}")
            np.testing.assert_array_equal(term, r_term, err_msg=f"step {t}")
            np.testing.assert_array_equal(trunc, r_trunc, err_msg=f"step {t}")
            if mode == "same_step" and (term | trunc).any():
                for i in np.flatnonzero(term | trunc):
                    np.testing.assert_allclose(infos["final_obs"][i], r_infos["final_obs"][i], atol=1e-6)
            ended += int((term | trunc).sum())
        assert ended > 50
    ref.close()
