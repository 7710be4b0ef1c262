"""Each agent a row: shmenv.multiagent.make_agent_vec against SuperSuit's
``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), n)`` step for step (same seeds,
same actions) and the row conventions for agents that leave early. The Stable-Baselines3
``VecEnv`` over those rows (``AgentRowsVecEnv``) is tested in ``test_sb3_multiagent.py``.

Needs pettingzoo; the SuperSuit comparison needs supersuit and mpe2 (skipped without)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is not installed: pip install pettingzoo")

import shmenv  # noqa: E402
import shmenv.multiagent as ma  # noqa: E402
from multiagent_serial import Serial  # noqa: E402
from shmenv_fixtures.multiagent import Leaving  # noqa: E402

LEAVING = "shmenv_fixtures.multiagent:leaving"


@pytest.mark.timeout(120)
def test_rows_equal_supersuit_concat_vec_envs(no_leaks):
    supersuit = pytest.importorskip("supersuit", reason="supersuit is not installed: pip install supersuit")
    spread = pytest.importorskip("mpe2.simple_spread_v3", reason="mpe2 is not installed: pip install mpe2")
    make = functools.partial(spread.parallel_env, N=3, max_cycles=5)
    theirs = supersuit.concat_vec_envs_v1(supersuit.pettingzoo_env_to_vec_env_v1(make()), 2, num_cpus=0)
    with ma.make_agent_vec(make, 2, num_workers=2, autoreset_mode="same_step") as ours:
        assert ours.num_envs == theirs.num_envs == 6
        assert ours.single_observation_space == theirs.observation_space
        obs, infos = ours.reset(seed=4)
        their_obs, _ = theirs.reset(seed=4)
        np.testing.assert_array_equal(obs, their_obs)
        np.testing.assert_array_equal(infos["env_id"], [0, 0, 0, 1, 1, 1])
        np.testing.assert_array_equal(infos["agent_id"], [0, 1, 2, 0, 1, 2])
        rng = np.random.default_rng(3)
        ends = 0
        for t in range(12):
            actions = rng.integers(0, 5, 6)
            obs, rewards, terms, truncs, infos = ours.step(actions)
            t_obs, t_rewards, t_terms, t_truncs, t_infos = theirs.step(actions)
            np.testing.assert_array_equal(obs, t_obs, err_msg=f"step {t}")
            np.testing.assert_array_equal(rewards, t_rewards, err_msg=f"step {t}")
            np.testing.assert_array_equal(terms, t_terms.astype(bool), err_msg=f"step {t}")
            np.testing.assert_array_equal(truncs, t_truncs.astype(bool), err_msg=f"step {t}")
            for r in range(6):
                if "terminal_observation" in t_infos[r]:
                    ends += 1
                    np.testing.assert_array_equal(infos["final_obs"][r], t_infos[r]["terminal_observation"])
                else:
                    assert infos.get("final_obs") is None or infos["final_obs"][r] is None
        assert ends == 12  # 5-step episodes: every row ended twice
    theirs.close()


@pytest.mark.timeout(120)
def test_rows_of_agents_that_left(no_leaks):
    ref = Serial(Leaving, 2)
    with ma.make_agent_vec(LEAVING, 2, num_workers=1, seed=6) as rows:
        assert rows.single_action_space == Leaving().action_space("walker_0") and rows.num_envs == 6
        rows.reset()
        ref.reset(6)
        actions = np.ones(6, np.int64)
        for t in range(9):
            obs, rewards, terms, truncs, infos = rows.step(actions)
            want = ref.step(actions.reshape(2, 3))
            np.testing.assert_array_equal(obs, want["obs"].reshape(6, 3), err_msg=f"step {t}")
            np.testing.assert_array_equal(rewards, want["rewards"].reshape(-1), err_msg=f"step {t}")
            np.testing.assert_array_equal(infos["active"], want["active"].reshape(-1), err_msg=f"step {t}")
            if t == 2:  # walker_0 leaves (terminated) in both envs: rows 0 and 3
                np.testing.assert_array_equal(terms, [True, False, False, True, False, False])
            elif t == 4:  # walker_1 is truncated
                np.testing.assert_array_equal(truncs, [False, True, False, False, True, False])
            elif t == 7:  # the episode ends: every row is done, each with how its agent ended
                np.testing.assert_array_equal(terms, [True, False, True] * 2)
                np.testing.assert_array_equal(truncs, [False, True, False] * 2)
            else:
                assert not terms.any() and not truncs.any(), f"step {t}"


@pytest.mark.timeout(60)
def test_rows_need_one_group(no_leaks):
    with pytest.raises(shmenv.InvalidArgumentError, match="one group"):
        ma.make_agent_vec("shmenv_fixtures.multiagent:mixed", 1, num_workers=1,
                          group_map={"a": ["walker_0", "walker_1"], "b": ["walker_2"]})
