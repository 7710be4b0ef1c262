"""The MeltingPot-shaped case: a dmlab2d game (``commons_harvest``, per-player RGB views,
rewards and discrete actions) whose ``dmlab2d.Lab2d`` does not pickle, built inside each
worker by a factory and run as N parallel multi-agent envs, checked step for step against
the same games stepped serially from the same seeds.

Needs dmlab2d (``pip install dmlab2d``) and pettingzoo; skipped with a message without."""

from __future__ import annotations

import functools
import pickle

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is not installed: pip install pettingzoo")
dmlab2d = pytest.importorskip("dmlab2d", reason="dmlab2d is not installed (pip install dmlab2d): the "
                              "MeltingPot-shaped tests are skipped")

import shmenv.multiagent as ma  # noqa: E402
from conftest import wait_gone  # noqa: E402
from shmenv.multiagent.lab2d import Lab2dParallelEnv  # noqa: E402

N = 3
PLAYERS = 2


def _serial_row(env, observations: dict, rewards: dict | None) -> tuple[np.ndarray, np.ndarray]:
    rgb = np.stack([observations[a]["RGB"] for a in env.possible_agents])
    rew = np.array([(rewards or {}).get(a, 0.0) for a in env.possible_agents], np.float32)
    return rgb, rew


@pytest.mark.timeout(180)
def test_unpicklable_lab2d_runs_as_parallel_envs(no_leaks):
    make = functools.partial(Lab2dParallelEnv, "commons_harvest", num_players=PLAYERS,
                             settings={"episodeLengthFrames": 6})
    serial = [make() for _ in range(N)]
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(serial[0]._lab)  # why it cannot be sent to a worker: each worker builds its own
    with ma.make_vec(make, N, num_workers=2, seed=21) as envs:
        assert envs.possible_agents == ["player_0", "player_1"]
        assert envs.single_observation_space["RGB"].shape == (PLAYERS, 88, 88, 3)
        assert envs.single_action_space.shape == (PLAYERS, 3)  # move, turn, zap per player
        obs, _ = envs.reset()
        for i, env in enumerate(serial):
            np.testing.assert_array_equal(obs["RGB"][i], _serial_row(env, env.reset(seed=21 + i)[0], None)[0])
        space = envs.single_agent_action_space
        space.seed(0)
        ended = 0
        for t in range(15):  # 6-frame episodes, autoreset twice
            actions = np.stack([[space.sample() for _ in range(PLAYERS)] for _ in range(N)])
            obs, rewards, terms, truncs, infos = envs.step(actions)
            for i, env in enumerate(serial):
                if not env.agents:
                    want_obs, want_rew = _serial_row(env, env.reset()[0], None)
                else:
                    step = env.step({a: actions[i, k] for k, a in enumerate(env.possible_agents)})
                    want_obs, want_rew = _serial_row(env, step[0], step[1])
                    ended += int(not env.agents)
                np.testing.assert_array_equal(obs["RGB"][i], want_obs, err_msg=f"env {i} step {t}")
                np.testing.assert_array_equal(rewards[i], want_rew, err_msg=f"env {i} step {t}")
                assert infos["env_terminated"][i] == (not env.agents), f"env {i} step {t}"
        assert ended == 2 * N
        pids = envs.worker_pids
    assert wait_gone(pids) == []
