"""shmenv as a drop-in for what trainers do with SyncVectorEnv, EnvPool and SB3 VecEnvs:
in-place writes into returned arrays, zero-copy lifetimes, the CleanRL EnvPool-async loop,
fair async scheduling, one-key Dict observations, argument checks, spec/metadata/get_attr,
action shape checks and partial resets."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import shmenv
from conftest import step_alike
from shmenv.libs.sb3 import HAVE_SB3, ShmVecEnv

pytestmark = pytest.mark.timeout(60)


def keep_up(obs: np.ndarray) -> np.ndarray:
    """A CartPole controller that keeps the pole up past the 500-step limit."""
    x, x_dot, theta, theta_dot = obs.T
    return (theta * 10 + theta_dot * 2 + x * 0.1 + x_dot * 0.5 > 0).astype(np.int64)


# --- SB3's in-place writes, without SB3 ------------------------------------------------


def test_sb3_rollout_in_place_writes_do_not_reach_the_envs_or_other_results(no_leaks):
    """What SB3's on-policy rollout does to the arrays a VecEnv returns: ``rewards[idx] +=
    gamma * value`` for time-limit truncations, writes into ``infos[idx]["terminal_observation"]``,
    and (wrappers, normalisation) writes into ``obs``. Every write must land in an array
    the caller owns: the envs step on unaffected (checked against an untouched twin pool),
    and no array handed out earlier changes later."""
    gamma, n, steps = 0.99, 8, 1200
    rng = np.random.default_rng(0)
    a = ShmVecEnv("CartPole-v1", n, num_workers=2, seed=0)
    b = ShmVecEnv("CartPole-v1", n, num_workers=2, seed=0)  # the untouched twin
    try:
        obs, r_obs = a.reset(), b.reset()
        np.testing.assert_array_equal(obs, r_obs)
        kept = [(obs, obs.copy())]
        truncations = terminations = 0
        for t in range(steps):
            actions = keep_up(r_obs)
            actions[n - 1] = rng.integers(0, 2)  # the last env falls often: terminations too
            obs, rewards, dones, infos = a.step(actions)
            r_obs, r_rewards, r_dones, r_infos = b.step(actions)
            np.testing.assert_array_equal(obs, r_obs, err_msg=f"step {t}: a write reached the envs")
            np.testing.assert_array_equal(rewards, r_rewards)
            np.testing.assert_array_equal(dones, r_dones)
            for arr in (obs, rewards, dones):
                assert arr.flags.writeable, f"step {t}: {arr.dtype} result is read-only"
            for idx in np.flatnonzero(dones):
                info, r_info = infos[idx], r_infos[idx]
                np.testing.assert_array_equal(info["terminal_observation"], r_info["terminal_observation"])
                assert info["TimeLimit.truncated"] == r_info["TimeLimit.truncated"]
                if info["TimeLimit.truncated"]:
                    truncations += 1
                    assert info["episode"]["l"] == 500
                    value = float(np.abs(info["terminal_observation"]).sum())
                    before = float(rewards[idx])
                    rewards[idx] += gamma * value  # SB3: bootstrap the value of the cut episode
                    assert rewards[idx] == np.float32(before + np.float32(gamma * value))
                else:
                    terminations += 1
                # SB3 turns it into a tensor; anything may write into it: it must not be
                # the row of obs (the first observation of the next episode) or shared.
                row_before = obs[idx].copy()
                info["terminal_observation"][...] = -123.0
                np.testing.assert_array_equal(obs[idx], row_before)
                kept.append((info["terminal_observation"], info["terminal_observation"].copy()))
            # Observation writes (a normalising wrapper working in place).
            obs[...] = np.clip(obs, -2.0, 2.0) * 0.5
            kept.append((obs, obs.copy()))
            kept.append((rewards, rewards.copy()))
        assert truncations >= 8 and terminations >= 8, (truncations, terminations)
        for k, (arr, snap) in enumerate(kept):
            np.testing.assert_array_equal(arr, snap, err_msg=f"kept array {k} changed afterwards (aliasing)")
    finally:
        a.close()
        b.close()


@pytest.mark.skipif(not HAVE_SB3, reason="stable-baselines3 (and torch) are not installed")
@pytest.mark.timeout(180)
def test_sb3_ppo_trains_through_truncations_on_vecmonitor():  # pragma: no cover - needs torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor

    # max_episode_steps=40: many time-limit truncations (the bootstrap path) in few steps.
    venv = VecMonitor(ShmVecEnv("CartPole-v1", 8, num_workers=2, seed=0, max_episode_steps=40))
    try:
        model = PPO("MlpPolicy", venv, n_steps=64, batch_size=128, n_epochs=2, seed=0, device="cpu", verbose=0)
        model.learn(total_timesteps=8 * 64 * 6)
        lengths = [ep["l"] for ep in model.ep_info_buffer]
        assert lengths and max(lengths) <= 40
        assert 40 in lengths, "no episode reached the time limit: the truncation path was not taken"
        assert np.isfinite(model.rollout_buffer.rewards).all()
    finally:
        venv.close()


# --- zero-copy lifetimes and default ownership -----------------------------------------


def _pause():
    """~0.3 ms during which the workers may run ahead (async) and overwrite what they may."""
    end = time.perf_counter() + 0.0003
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize("trainer_shard", [False, True], ids=["workers", "trainer-shard"])
def test_zero_copy_sync_previous_observation_survives_the_next_step(trainer_shard, no_leaks):
    """With a trainer shard too: its rows are written into the same alternating blocks."""
    rng = np.random.default_rng(1)
    with shmenv.make_vec(
        "CartPole-v1", 8, num_workers=2, seed=0, copy=False, trainer_shard=trainer_shard
    ) as envs:
        obs, _ = envs.reset()
        assert not obs.flags.writeable
        for t in range(3000):
            prev, snap = obs, obs.copy()
            obs, rew, term, trunc, infos = envs.step(rng.integers(0, 2, 8))
            _pause()
            assert not obs.flags.writeable
            np.testing.assert_array_equal(prev, snap, err_msg=f"step {t}: the previous batch changed")


def test_zero_copy_async_previous_batch_survives_the_next_recv(no_leaks):
    """Async, copy=False: a batch stays intact until the second ``recv`` after it begins,
    i.e. the previous batch is intact next to the current one while workers run ahead."""
    rng = np.random.default_rng(2)
    with shmenv.make_vec("CartPole-v1", 8, num_workers=2, batch_size=4, seed=0, copy=False) as envs:
        envs.async_reset()
        obs, rew, term, trunc, info = envs.recv()
        for t in range(3000):
            prev, snap = obs, obs.copy()
            ids = info["env_id"]
            envs.send(rng.integers(0, 2, len(ids)), ids)
            obs, rew, term, trunc, info = envs.recv()
            cur = obs.copy()
            _pause()  # the envs just sent to step meanwhile, into a third block
            np.testing.assert_array_equal(prev, snap, err_msg=f"recv {t}: the previous batch changed")
            np.testing.assert_array_equal(obs, cur, err_msg=f"recv {t}: the current batch changed")


@pytest.mark.parametrize("batch_size", [None, 4], ids=["sync", "async"])
def test_default_arrays_are_owned_writable_and_never_reused(batch_size, no_leaks):
    rng = np.random.default_rng(3)
    with shmenv.make_vec("CartPole-v1", 8, num_workers=2, batch_size=batch_size, seed=0, pool_infos=True) as envs:
        start, end = envs.mapping_range
        kept = []
        if envs.is_async:
            envs.async_reset()
            obs, rew, term, trunc, info = envs.recv()
        else:
            obs, info = envs.reset()
            rew = np.zeros(8, np.float32)
        for t in range(3000):
            for arr in (obs, rew, info["env_id"], info["elapsed_step"]):
                assert arr.flags.writeable and not start <= arr.ctypes.data < end
            kept.append((obs, obs.copy()))
            ids = info["env_id"]
            actions = rng.integers(0, 2, len(ids))
            if envs.is_async:
                envs.send(actions, ids)
                obs, rew, term, trunc, info = envs.recv()
            else:
                obs, rew, term, trunc, info = envs.step(actions)
            if t % 100 == 0:
                _pause()
        for k, (arr, snap) in enumerate(kept):
            np.testing.assert_array_equal(arr, snap, err_msg=f"observation {k} changed afterwards (aliasing)")


# --- the CleanRL EnvPool-async loop ----------------------------------------------------


def test_cleanrl_envpool_async_loop_matches_sync_per_env_trajectories(no_leaks):
    n, iters = 8, 2000
    rng = np.random.default_rng(4)
    rows: list[list[tuple]] = [[] for _ in range(n)]  # per env: (obs, rew, term, trunc, elapsed)
    sent: list[list[int]] = [[] for _ in range(n)]  # per env: the actions it was sent, in order
    envs = shmenv.make_vec("CartPole-v1", n, num_workers=2, batch_size=4, seed=0)
    try:
        envs.async_reset()
        elapsed = np.full(n, -1)  # -1: the next row of that env is a reset row
        for it in range(iters):
            result = envs.recv()
            assert len(result) == 5
            obs, rew, term, trunc, info = result
            env_id = info["env_id"]
            assert env_id.dtype == np.int32 and info["elapsed_step"].dtype == np.int32
            assert obs.shape == (4, 4) and len(set(env_id.tolist())) == 4
            action = rng.integers(0, 2, len(env_id))  # the policy
            envs.send(action, env_id)
            for k, i in enumerate(env_id):
                e = int(info["elapsed_step"][k])
                want = 0 if elapsed[i] < 0 else elapsed[i] + 1
                assert e == want, f"recv {it}: env {i} elapsed_step {e}, expected {want}"
                elapsed[i] = -1 if (term[k] or trunc[k]) else e
                rows[i].append((obs[k].copy(), rew[k], term[k], trunc[k], e))
                sent[i].append(int(action[k]))
    finally:
        envs.close()
    assert all(len(r) > 100 for r in rows)
    assert sum(1 for r in rows for x in r if x[4] == 0) > n + 20, "too few episode ends"

    # The reference: a sync pool of the same seed, env i given env i's action sequence.
    depth = max(len(r) for r in rows)
    with shmenv.make_vec("CartPole-v1", n, num_workers=2, seed=0, pool_infos=True) as ref:
        obs, info = ref.reset()
        steps = [(obs, np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool), info["elapsed_step"])]
        for k in range(depth - 1):
            actions = np.array([sent[i][k] if k < len(sent[i]) else 0 for i in range(n)])
            o, r, te, tr, inf = ref.step(actions)
            steps.append((o, r, te, tr, inf["elapsed_step"]))
    for i in range(n):
        for k, (o, r, te, tr, e) in enumerate(rows[i]):
            ro, rr, rte, rtr, re = (x[i] for x in steps[k])
            np.testing.assert_array_equal(o, ro, err_msg=f"env {i} row {k}")
            assert (r, te, tr, e) == (rr, rte, rtr, re), f"env {i} row {k}: {(r, te, tr, e)} vs {(rr, rte, rtr, re)}"


# --- fair scheduling --------------------------------------------------------------------


@pytest.mark.parametrize("num_envs,batch_size,num_workers", [(8, 4, 2), (16, 5, 3)])
def test_async_scheduling_is_fair(num_envs, batch_size, num_workers, no_leaks):
    iters = 20_000
    rng = np.random.default_rng(5)
    counts = np.zeros(num_envs, dtype=np.int64)
    last_seen = np.zeros(num_envs, dtype=np.int64)
    longest_absence = np.zeros(num_envs, dtype=np.int64)
    with shmenv.make_vec(
        "CartPole-v1", num_envs, num_workers=num_workers, batch_size=batch_size, seed=0
    ) as envs:
        envs.async_reset()
        for k in range(1, iters + 1):
            _, _, _, _, info = envs.recv()
            ids = info["env_id"]
            counts[ids] += 1
            longest_absence[ids] = np.maximum(longest_absence[ids], k - last_seen[ids])
            last_seen[ids] = k
            envs.send(rng.integers(0, 2, len(ids)), ids)
    longest_absence = np.maximum(longest_absence, iters + 1 - last_seen)
    mean = counts.mean()
    assert counts.sum() == iters * batch_size
    assert np.all(np.abs(counts - mean) <= 0.1 * mean), f"counts {counts.tolist()} (mean {mean})"
    bound = 6 * num_envs / batch_size + 2
    assert longest_absence.max() <= bound, f"longest absences {longest_absence.tolist()} > {bound} recv calls"


# --- one-key Dict observations ----------------------------------------------------------


def test_one_key_dict_observations_stay_dicts(no_leaks):
    from shmenv_fixtures.images import OneKeyDictEnv

    n = 3
    ref = gym.vector.SyncVectorEnv([OneKeyDictEnv for _ in range(n)], autoreset_mode="SameStep")
    with shmenv.make_vec("shmenv_fixtures.images:OneKeyDictEnv", n, num_workers=2, autoreset_mode="same_step") as envs:
        assert isinstance(envs.single_observation_space, spaces.Dict)
        assert list(envs.single_observation_space.spaces) == ["image"]
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.observation_space == ref.observation_space
        obs, _ = envs.reset(seed=9)
        r_obs, _ = ref.reset(seed=9)
        assert isinstance(obs, dict) and list(obs) == ["image"] and obs["image"].shape == (n, 6, 6, 3)
        np.testing.assert_array_equal(obs["image"], r_obs["image"])
        ends = 0
        for t in range(40):
            actions = np.arange(n) % 2
            obs, rew, term, trunc, infos = envs.step(actions)
            r_obs, r_rew, r_term, r_trunc, r_infos = ref.step(actions)
            assert isinstance(obs, dict) and list(obs) == ["image"]
            np.testing.assert_array_equal(obs["image"], r_obs["image"], err_msg=f"step {t}")
            np.testing.assert_array_equal(term, r_term)
            np.testing.assert_array_equal(trunc, r_trunc)
            for i in np.flatnonzero(term | trunc):
                final = infos["final_obs"][i]
                assert isinstance(final, dict) and list(final) == ["image"]
                np.testing.assert_array_equal(final["image"], r_infos["final_obs"][i]["image"])
                ends += 1
        assert ends >= 2
    ref.close()


# --- arguments ---------------------------------------------------------------------------


def test_num_workers_and_envs_per_worker_together(no_leaks):
    with shmenv.make_vec("CartPole-v1", 4, num_workers=4, envs_per_worker=1) as envs:
        assert envs.num_workers == 4 and len(envs.worker_pids) == 4
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (4, 4)
    with pytest.raises(shmenv.InvalidArgumentError) as e:
        shmenv.make_vec("CartPole-v1", 4, num_workers=2, envs_per_worker=1)
    assert "num_workers=2" in str(e.value) and "envs_per_worker=1" in str(e.value)


# --- spec, metadata, get_attr/call ------------------------------------------------------


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


@pytest.mark.skipif(not HAVE_SB3, reason="stable-baselines3 is not installed")
def test_sb3_env_is_wrapped_monitor(no_leaks):  # pragma: no cover - needs SB3
    from stable_baselines3.common.monitor import Monitor

    with ShmVecEnv("CartPole-v1", 2, num_workers=1) as venv:
        assert venv.env_is_wrapped(Monitor) == [True, True]


# --- action shapes ------------------------------------------------------------------------


def test_wrong_action_shapes_are_refused_naming_the_expected_shape(no_leaks):
    with shmenv.make_vec("Pendulum-v1", 1, num_workers=1, seed=0) as envs:
        envs.reset()
        for bad in (np.zeros(4, np.float32), np.zeros(1, np.float32)):
            with pytest.raises(shmenv.ActionError, match=r"\(1, 1\)"):
                envs.step(bad)
        obs, *_ = envs.step(np.zeros((1, 1), np.float32))
        assert obs.shape == (1, 3)
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=0) as envs:
        envs.reset()
        with pytest.raises(shmenv.ActionError, match=r"\(4,\)"):
            envs.step(np.zeros((2, 2), np.int64))
        obs, *_ = envs.step(np.zeros(4, np.int64))
        assert obs.shape == (4, 4)


# --- partial resets -------------------------------------------------------------------------


def test_reset_mask_resets_only_the_masked_envs_like_sync_vector_env(no_leaks):
    n = 4
    rng = np.random.default_rng(6)
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])
    with shmenv.make_vec("CartPole-v1", n, num_workers=2, pool_infos=True) as envs:
        obs, _ = envs.reset(seed=11)
        r_obs, _ = ref.reset(seed=11)
        np.testing.assert_array_equal(obs, r_obs)
        partial = 0
        for t in range(200):
            if t % 7 == 3:
                mask = rng.random(n) < 0.5
                mask[rng.integers(n)] = True
                before = obs.copy()
                obs, infos = envs.reset(options={"reset_mask": mask})
                r_obs, _ = ref.reset(options={"reset_mask": mask.copy()})
                np.testing.assert_array_equal(obs, r_obs, err_msg=f"partial reset at step {t}, mask {mask}")
                np.testing.assert_array_equal(obs[~mask], before[~mask])
                assert (infos["elapsed_step"][mask] == 0).all()
                partial += 1
                continue
            actions = rng.integers(0, 2, n)
            obs, *_ = step_alike(envs, ref, actions, f"step {t}")
        assert partial > 20
        with pytest.raises(shmenv.InvalidArgumentError, match=r"shape `\(4,\)`"):
            envs.reset(options={"reset_mask": np.ones(3, bool)})
        with pytest.raises(shmenv.InvalidArgumentError, match="bool"):
            envs.reset(options={"reset_mask": np.ones(n, np.int64)})
        envs.step(np.zeros(n, np.int64))  # still usable
    ref.close()
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, batch_size=2) as envs:
        envs.reset()
        with pytest.raises(shmenv.UsageError, match="sync mode"):
            envs.reset(options={"reset_mask": np.array([True, False, False, False])})
