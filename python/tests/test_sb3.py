"""shmenv.sb3.ShmVecEnv: the Stable-Baselines3 VecEnv protocol, checked by hand (no SB3
needed), and for real with SB3 when it is installed."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import keep_up
from shmenv.libs.sb3 import HAVE_SB3, ShmVecEnv


def test_vecenv_protocol(no_leaks):
    venv = ShmVecEnv("CartPole-v1", 4, num_workers=2, max_episode_steps=5)
    try:
        assert venv.num_envs == 4
        assert venv.observation_space.shape == (4,) and venv.action_space.n == 2
        assert venv.get_attr("render_mode") == [None] * 4
        assert venv.get_attr("action_space", indices=[0]) == [venv.action_space]
        assert venv.env_is_wrapped(object) == [False] * 4
        with pytest.raises(AttributeError, match="native shmenv env"):
            venv.get_attr("gravity")
        with pytest.raises(AttributeError, match="config"):
            venv.set_attr("gravity", 1.0)
        with pytest.raises(AttributeError, match="no Python methods"):
            venv.env_method("render")
        assert venv.seed(7) == [7, 8, 9, 10]
        obs = venv.reset()
        assert obs.shape == (4, 4)
        first = obs.copy()
        venv.seed(7)
        np.testing.assert_array_equal(venv.reset(), first)
        saw_done = False
        for t in range(12):
            venv.step_async(np.zeros(4, dtype=np.int64))
            obs, rewards, dones, infos = venv.step_wait()
            assert obs.shape == (4, 4) and rewards.shape == (4,) and dones.dtype == np.bool_
            assert isinstance(infos, list) and len(infos) == 4
            for i, info in enumerate(infos):
                if dones[i]:
                    saw_done = True
                    term_obs = info["terminal_observation"]
                    assert term_obs.shape == (4,)
                    # Auto-reset in the same step: the returned obs starts a new episode.
                    assert np.all(np.abs(obs[i]) < 0.05)
                    assert info["episode"]["l"] <= 5 and info["episode"]["r"] == info["episode"]["l"]
                    assert info["TimeLimit.truncated"] == (info["episode"]["l"] == 5)
                else:
                    assert info == {}
        assert saw_done
        obs, rewards, dones, infos = venv.step(np.ones(4, dtype=np.int64))
        assert obs.shape == (4, 4)
    finally:
        venv.close()


@pytest.mark.skipif(not HAVE_SB3, reason="stable-baselines3 is not installed")
def test_sb3_trains_on_shmenv():  # pragma: no cover - needs torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    venv = VecNormalize(VecMonitor(ShmVecEnv("CartPole-v1", 8, num_workers=2, seed=0)))
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, verbose=0)
    model.learn(total_timesteps=2048)
    assert len(model.ep_info_buffer) > 0
    venv.close()


def _paint_frames(seed: int, n: int) -> list[np.ndarray]:
    """What SB3's DummyVecEnv's ``get_images`` gives for ``n`` PaintEnvs reset with
    ``seed + i``: each env's ``render()``."""
    from shmenv_fixtures.rendering import PaintEnv

    frames = []
    for i in range(n):
        env = PaintEnv(render_mode="rgb_array")
        env.reset(seed=seed + i)
        frames.append(env.render())
    return frames


def test_render_mode_get_images_and_tiled_render_as_sb3_vec_envs_give_them(no_leaks):
    with ShmVecEnv("shmenv_fixtures.rendering:PaintEnv", 3, num_workers=2, render_mode="rgb_array") as venv:
        assert venv.render_mode == "rgb_array"
        assert venv.metadata["render_modes"] == ["human", "rgb_array"]
        venv.seed(11)
        venv.reset()
        want = _paint_frames(11, 3)
        images = venv.get_images()
        assert len(images) == 3
        for got, expected in zip(images, want):
            np.testing.assert_array_equal(got, expected)
        tiled = venv.render()
        h, w, c = want[0].shape
        assert tiled.shape == (2 * h, 2 * w, c) and tiled.dtype == want[0].dtype  # 2x2 grid, one cell black
        np.testing.assert_array_equal(tiled[:h, :w], want[0])
        np.testing.assert_array_equal(tiled[:h, w:], want[1])
        np.testing.assert_array_equal(tiled[h:, :w], want[2])
        assert not tiled[h:, w:].any()
        np.testing.assert_array_equal(venv.render("rgb_array"), tiled)
        with pytest.warns(UserWarning, match="render mode"):
            assert venv.render("depth_array") is None


def test_without_a_render_mode_images_are_none_with_sb3s_warnings(no_leaks):
    with ShmVecEnv("shmenv_fixtures.rendering:PaintEnv", 2, num_workers=1) as venv:
        assert venv.render_mode is None and venv.metadata["render_modes"] == []
        with pytest.warns(UserWarning, match="rgb_array"):
            assert venv.get_images() == [None, None]
        with pytest.warns(UserWarning, match="render_mode"):
            assert venv.render() is None


@pytest.mark.timeout(60)
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


@pytest.mark.timeout(60)
@pytest.mark.skipif(not HAVE_SB3, reason="stable-baselines3 is not installed")
def test_sb3_env_is_wrapped_monitor(no_leaks):  # pragma: no cover - needs SB3
    from stable_baselines3.common.monitor import Monitor

    with ShmVecEnv("CartPole-v1", 2, num_workers=1) as venv:
        assert venv.env_is_wrapped(Monitor) == [True, True]
