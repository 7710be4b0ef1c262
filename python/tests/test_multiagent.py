"""shmenv.multiagent: PettingZoo envs in shmenv workers, checked step for step against the
same PettingZoo envs stepped serially from the same seeds (tests/multiagent_serial.py), with
an MPE env (mpe2) and a fixture whose agents leave early; grouping, typed errors, async
mode and process cleanup.

Needs pettingzoo (skipped without); the MPE cases need mpe2."""

from __future__ import annotations

import functools

import numpy as np
import pytest

pytest.importorskip("pettingzoo", reason="pettingzoo is not installed: pip install pettingzoo")

import shmenv  # noqa: E402
import shmenv.multiagent as ma  # noqa: E402
from conftest import wait_gone  # noqa: E402
from multiagent_serial import Serial, check_step  # noqa: E402
from shmenv_fixtures.multiagent import Leaving  # noqa: E402

N = 3
LEAVING = "shmenv_fixtures.multiagent:leaving"


def _spread():
    spread = pytest.importorskip("mpe2.simple_spread_v3", reason="mpe2 is not installed: pip install mpe2")
    return functools.partial(spread.parallel_env, N=3, max_cycles=5)


@pytest.mark.timeout(120)
def test_mpe_trajectories_equal_serial_pettingzoo(no_leaks):
    make = _spread()
    ref = Serial(make, N)
    with ma.make_vec(make, N, num_workers=2, seed=11) as envs:
        assert envs.possible_agents == ["agent_0", "agent_1", "agent_2"] and envs.num_agents == 3
        assert envs.single_observation_space.shape == (3, 18) and envs.observation_space.shape == (N, 3, 18)
        obs, infos = envs.reset()
        want_obs, want_active = ref.reset(11)
        np.testing.assert_array_equal(obs, want_obs)
        np.testing.assert_array_equal(infos["active"], want_active)
        rng = np.random.default_rng(0)
        episodes = 0
        for t in range(14):  # 5-step episodes: each env ends twice and resets
            want, infos = check_step(envs, ref, rng.integers(0, 5, (N, 3)), f"step {t}")
            done = want["env_trunc"]
            if done.any():
                episodes += int(done.sum())
                np.testing.assert_allclose(infos["episode_stats"]["r"][done], want["returns"][done], rtol=1e-5)
        assert episodes == 2 * N


@pytest.mark.timeout(120)
def test_aec_env_runs_through_aec_to_parallel(no_leaks):
    spread = pytest.importorskip("mpe2.simple_spread_v3", reason="mpe2 is not installed: pip install mpe2")
    from pettingzoo.utils.conversions import aec_to_parallel

    make = functools.partial(spread.env, N=3, max_cycles=4)
    ref = Serial(lambda: aec_to_parallel(make()), 2)
    with ma.make_vec(make, 2, num_workers=1, seed=3) as envs:
        obs, _ = envs.reset()
        np.testing.assert_array_equal(obs, ref.reset(3)[0])
        rng = np.random.default_rng(1)
        for t in range(10):
            check_step(envs, ref, rng.integers(0, 5, (2, 3)), f"step {t}")


@pytest.mark.timeout(120)
def test_agents_leaving_early_active_mask_and_autoreset(no_leaks):
    ref = Serial(Leaving, 2)
    with ma.make_vec(LEAVING, 2, num_workers=2, seed=5) as envs:
        obs, infos = envs.reset()
        np.testing.assert_array_equal(obs, ref.reset(5)[0])
        rng = np.random.default_rng(2)
        for t in range(20):  # 8-step episodes (walker_0 leaves at 3, walker_1 at 5) and their resets
            # Inactive agents' rows are ignored: Leaving refuses any action for an agent that left.
            want, infos = check_step(envs, ref, rng.integers(0, 3, (2, 3)), f"step {t}")
            k = t % 9  # the step's index in its episode (8 steps, then the reset row)
            if k == 2:
                assert want["terms"][:, 0].all() and not want["active"][:, 0].any()
            if 3 <= k < 8:  # walker_0 has left: zeros (checked equal to shmenv's above)
                assert not want["obs"][:, 0].any() and not want["rewards"][:, 0].any()
            if k == 7:  # walker_1 was truncated: the episode counts as truncated
                assert infos["env_truncated"].all() and not infos["env_terminated"].any()
                assert not infos["active"].any()
        pids = envs.worker_pids
    assert wait_gone(pids) == []


@pytest.mark.timeout(120)
def test_all_agents_terminated_is_env_terminated(no_leaks):
    ref = Serial(lambda: Leaving(lifetimes=(2, 2, 2), truncated=None), 2)
    config = {"lifetimes": [2, 2, 2], "truncated": None}
    with ma.make_vec(LEAVING, 2, num_workers=1, seed=0, config=config) as envs:
        envs.reset()
        ref.reset(0)
        actions = np.ones((2, 3), np.int64)
        check_step(envs, ref, actions, "step 0")
        want, infos = check_step(envs, ref, actions, "step 1")
        assert infos["env_terminated"].all() and not infos["env_truncated"].any()
        assert infos["_episode_stats"].all() and (infos["episode_stats"]["l"] == 2).all()
        want, infos = check_step(envs, ref, actions, "step 2 (reset row)")
        assert infos["active"].all() and (infos["elapsed_step"] == 0).all()


@pytest.mark.timeout(120)
def test_same_step_autoreset_keeps_the_last_step_results(no_leaks):
    ref = Serial(Leaving, 2)
    with ma.make_vec(LEAVING, 2, num_workers=1, seed=9, autoreset_mode="same_step") as envs:
        envs.reset()
        ref.reset(9)
        actions = np.full((2, 3), 2, np.int64)
        for t in range(7):
            ref.step(actions)
            envs.step(actions)
        last = ref.step(actions)  # the episode's end
        first = ref.step(actions)  # the reference's reset row: the next episode's first observation
        obs, rewards, terms, truncs, infos = envs.step(actions)
        np.testing.assert_array_equal(obs, first["obs"])
        np.testing.assert_array_equal(infos["active"], first["active"])
        np.testing.assert_array_equal(rewards, last["rewards"])
        np.testing.assert_array_equal(terms, last["terms"])
        np.testing.assert_array_equal(truncs, last["truncs"])
        assert infos["_final_obs"].all()
        for i in range(2):
            np.testing.assert_array_equal(infos["final_obs"][i], last["obs"][i])


@pytest.mark.timeout(120)
def test_mismatched_spaces_raise_a_typed_error_naming_agents_and_spaces(no_leaks):
    with pytest.raises(ma.SpaceMismatchError) as caught:
        ma.make_vec("shmenv_fixtures.multiagent:mixed", 2, num_workers=1)
    err = caught.value
    assert isinstance(err, shmenv.BuildError) and isinstance(err, ValueError)
    text = str(err)
    assert "walker_2" in text and "(4,)" in text and "(3,)" in text and "group_map" in text, text


@pytest.mark.timeout(120)
def test_group_map_stacks_each_group_of_equal_spaces(no_leaks):
    groups = {"short": ["walker_0", "walker_1"], "long": ["walker_2"]}
    with ma.make_vec("shmenv_fixtures.multiagent:mixed", 2, num_workers=1, seed=1, group_map=groups) as envs:
        assert envs.groups == groups
        obs, infos = envs.reset()
        assert obs["short"].shape == (2, 2, 3) and obs["long"].shape == (2, 1, 4)
        actions = {"short": np.ones((2, 2), np.int64), "long": np.ones((2, 1), np.int64)}
        obs, rewards, terms, truncs, infos = envs.step(actions)
        assert rewards["short"].shape == (2, 2) and rewards["long"].shape == (2, 1)
        np.testing.assert_array_equal(obs["long"][:, 0, 3], 1.0)  # walker_2's fourth number
        assert infos["active"]["short"].all()
    with pytest.raises(shmenv.BuildError, match="are in no group"):
        ma.make_vec(LEAVING, 1, num_workers=1, group_map={"some": ["walker_0"]})


@pytest.mark.timeout(120)
def test_by_name_groups_as_torchrl(no_leaks):
    tag = pytest.importorskip("mpe2.simple_tag_v3", reason="mpe2 is not installed: pip install mpe2")
    with pytest.raises(ma.SpaceMismatchError, match="agent_0"):
        ma.make_vec(tag, 1, num_workers=1)
    with ma.make_vec(tag, 2, num_workers=1, seed=0, group_map="by_name") as envs:
        assert envs.groups == {"adversary": ["adversary_0", "adversary_1", "adversary_2"], "agent": ["agent_0"]}
        obs, _ = envs.reset()
        assert obs["adversary"].shape == (2, 3, 16) and obs["agent"].shape == (2, 1, 14)
        _, rewards, _, _, _ = envs.step({"adversary": np.zeros((2, 3), np.int64), "agent": np.zeros((2, 1), np.int64)})
        assert set(rewards) == {"adversary", "agent"}


@pytest.mark.timeout(120)
def test_async_batches_carry_env_ids(no_leaks):
    with ma.make_vec(LEAVING, 4, num_workers=2, batch_size=2, seed=0) as envs:
        envs.async_reset()
        seen = set()
        for _ in range(12):
            obs, rewards, terms, truncs, infos = envs.recv()
            assert obs.shape == (2, 3, 3) and rewards.shape == (2, 3) and infos["active"].shape == (2, 3)
            seen.update(int(i) for i in infos["env_id"])
            envs.send(np.ones((2, 3), np.int64), infos["env_id"])
        assert seen == {0, 1, 2, 3}


@pytest.mark.timeout(60)
def test_what_cannot_be_hosted_is_refused():
    with pytest.raises(shmenv.InvalidArgumentError, match="instance"):
        ma.make_vec(Leaving(), 2)
    with pytest.raises(shmenv.InvalidArgumentError, match="no_such_module"):
        ma.make_vec("no_such_module:parallel_env", 2)
    with pytest.raises(shmenv.BuildError, match="not a PettingZoo ParallelEnv"):
        ma.make_vec(lambda: __import__("gymnasium").make("CartPole-v1"), 1, num_workers=1)


@pytest.mark.timeout(120)
def test_from_fns_and_agent_infos(no_leaks):
    fns = [Leaving, functools.partial(Leaving, lifetimes=(2, 2, 2))]
    with ma.from_fns(fns, num_workers=2, seed=1, agent_infos=True) as envs:
        assert envs.num_envs == 2
        obs, infos = envs.reset()
        ref = [Leaving(), Leaving(lifetimes=(2, 2, 2))]
        for i, env in enumerate(ref):
            _, ref_infos = env.reset(seed=1 + i)
            for agent in env.possible_agents:
                assert infos[agent]["start"][i] == ref_infos[agent]["start"]  # the agents' infos, per env
        envs.step(np.ones((2, 3), np.int64))
        _, _, _, truncs, infos = envs.step(np.ones((2, 3), np.int64))
        assert infos["env_truncated"].tolist() == [False, True]  # env 1's agents all left at step 2
        assert truncs[1].tolist() == [False, True, False]


@pytest.mark.timeout(60)
def test_max_episode_steps_truncates_every_active_agent(no_leaks):
    with ma.make_vec(LEAVING, 1, num_workers=1, seed=0, max_episode_steps=4) as envs:
        envs.reset()
        for _ in range(3):
            _, _, terms, truncs, infos = envs.step(np.ones((1, 3), np.int64))
        assert terms.tolist() == [[True, False, False]] and not infos["env_truncated"].any()  # walker_0 left
        _, _, terms, truncs, infos = envs.step(np.ones((1, 3), np.int64))
        assert truncs.tolist() == [[False, True, True]] and infos["env_truncated"].all()
        assert infos["episode_stats"]["l"].tolist() == [4]
