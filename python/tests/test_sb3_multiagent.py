"""Multi-agent envs as a Stable-Baselines3 ``VecEnv``, each agent a row
(:mod:`shmenv.libs.sb3_multiagent`, ``from shmenv.multiagent.sb3 import AgentRowsVecEnv``):
the ``VecEnv`` protocol against a serial reference, with agents that leave early, and PPO
learning on the rows.

Needs pettingzoo; the PPO test needs stable-baselines3 and mpe2 (skipped without)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is not installed: pip install pettingzoo")

import shmenv  # noqa: E402
from multiagent_serial import Serial  # noqa: E402
from shmenv.libs.sb3_multiagent import AgentRowsVecEnv  # noqa: E402
from shmenv_fixtures.multiagent import Leaving  # noqa: E402

LEAVING = "shmenv_fixtures.multiagent:leaving"


@pytest.mark.timeout(120)
def test_sb3_vecenv_rows(no_leaks):
    ref = Serial(Leaving, 2)
    venv = AgentRowsVecEnv(LEAVING, 2, num_workers=1)
    try:
        venv.seed(8)
        obs = venv.reset()
        np.testing.assert_array_equal(obs, ref.reset(8)[0].reshape(6, 3))
        assert venv.get_attr("possible_agents", [4]) == [["walker_0", "walker_1", "walker_2"]]
        actions = np.full(6, 2, np.int64)
        returns = np.zeros(6)
        for t in range(9):
            venv.step_async(actions)
            obs, rewards, dones, infos = venv.step_wait()
            want = ref.step(actions.reshape(2, 3))
            returns += rewards
            assert isinstance(infos, list) and len(infos) == 6
            for r in np.flatnonzero(dones):
                last = want["obs"].reshape(6, 3)[r]
                np.testing.assert_array_equal(infos[r]["terminal_observation"], last)
                assert infos[r]["episode"]["r"] == pytest.approx(returns[r], rel=1e-6)
                assert infos[r]["TimeLimit.truncated"] == (r % 3 == 1)  # walker_1 rows were truncated
                returns[r] = 0
            if t == 2:
                assert list(np.flatnonzero(dones)) == [0, 3]
                assert not obs[[0, 3]].any()  # walker_0 has left: its rows continue with zeros
            if t == 7:
                assert dones.all()
                want_next = ref.step(actions.reshape(2, 3))  # the reference's reset row
                np.testing.assert_array_equal(obs, want_next["obs"].reshape(6, 3))
                break
    finally:
        venv.close()
    with pytest.raises(shmenv.ClosedError):
        venv.rows.step(actions)


@pytest.mark.timeout(180)
def test_sb3_ppo_learns_on_agent_rows(no_leaks):
    sb3 = pytest.importorskip("stable_baselines3", reason="stable-baselines3 (and torch) not installed")
    pytest.importorskip("mpe2.simple_spread_v3", reason="mpe2 is not installed: pip install mpe2")
    from stable_baselines3.common.vec_env import VecEnv

    venv = AgentRowsVecEnv("mpe2.simple_spread_v3", 2, num_workers=2, seed=0, config={"N": 3, "max_cycles": 10})
    try:
        assert isinstance(venv, VecEnv) and venv.num_envs == 6
        model = sb3.PPO("MlpPolicy", venv, n_steps=32, batch_size=48, n_epochs=1, seed=0)
        model.learn(192)
        assert model.num_timesteps == 192
        episodes = list(model.ep_info_buffer)  # from the rows' "episode" infos: 10-step episodes
        assert len(episodes) == 18 and all(e["l"] == 10 for e in episodes)
    finally:
        venv.close()
