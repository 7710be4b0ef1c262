"""``shmenv.envpool.make``: EnvPool 1.2.5's ``make`` over shmenv's worker processes.

An EnvPool-style training loop (as CleanRL's ``ppo_atari_envpool.py`` drives EnvPool: a
``gym.Wrapper`` recording episode returns from ``info["reward"]`` / ``info["lives"]``,
``step`` in sync mode, ``recv``/``send`` in async mode) runs on CartPole-v1 and, where
ale-py or the native ALE plugin is available, Pong-v5. Where EnvPool is installed the
results are compared with EnvPool's: spaces, config keys, info keys and dtypes, and for
CartPole-v1 the shapes and dtypes of everything returned. Bad arguments raise typed
errors."""

from __future__ import annotations

import os
import warnings

import gymnasium as gym
import numpy as np
import pytest

import shmenv.libs.envpool as envpool
from shmenv.errors import ConfigError, InvalidArgumentError, UnknownEnvError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN = os.path.join(ROOT, "target", "plugins", "libale_atari.so")


def has(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def real_envpool():
    return pytest.importorskip("envpool", reason="EnvPool is not installed (pip install envpool)")


def atari_backends() -> list:
    out = []
    if os.path.exists(PLUGIN) and has("ale_py"):
        out.append(pytest.param({"plugin": PLUGIN}, id="plugin"))
    else:
        out.append(pytest.param(None, id="plugin", marks=pytest.mark.skip(
            reason=f"the native ALE plugin is not built ({PLUGIN}; tests/run builds it) or ale-py is missing")))
    if has("ale_py"):
        out.append(pytest.param({}, id="hosted"))
    else:
        out.append(pytest.param(None, id="hosted", marks=pytest.mark.skip(reason="ale-py is not installed")))
    return out


class RecordEpisodeStatistics(gym.Wrapper):
    """CleanRL's wrapper for EnvPool (ppo_atari_envpool.py), for the Gymnasium 5-tuple:
    returns are summed from ``info["reward"]`` (before reward clipping) and an episode ends
    when the game is over (``info["terminated"]``) or truncated."""

    def __init__(self, env):
        super().__init__(env)
        self.num_envs = getattr(env, "num_envs", 1)
        self.finished: list[tuple[float, int]] = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
        self.lives = np.zeros(self.num_envs, dtype=np.int32)
        return obs, info

    def _record(self, rewards, term, trunc, info):
        stepped = info["elapsed_step"] > 0  # rows of auto-resets (next step) start episodes
        info = {k: (v[stepped] if isinstance(v, np.ndarray) else v) for k, v in info.items()}
        rewards, term, trunc = rewards[stepped], term[stepped], trunc[stepped]
        ids = info["env_id"]
        self.episode_returns[ids] += info["reward"] if "reward" in info else rewards
        self.episode_lengths[ids] += 1
        if "lives" in info:
            self.lives[ids] = info["lives"]
        over = (info["terminated"].astype(bool) if "terminated" in info else term) | trunc
        for k in np.flatnonzero(over):
            self.finished.append((float(self.episode_returns[ids[k]]), int(self.episode_lengths[ids[k]])))
        self.episode_returns[ids[over]] = 0
        self.episode_lengths[ids[over]] = 0

    def step(self, action):
        obs, rewards, term, trunc, info = self.env.step(action)
        self._record(rewards, term, trunc, info)
        return obs, rewards, term, trunc, info

    # the async calls, as CleanRL's async EnvPool scripts forward them
    def async_reset(self):
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
        self.lives = np.zeros(self.num_envs, dtype=np.int32)
        self.env.async_reset()

    def send(self, action, env_id):
        self.env.send(action, env_id)

    def recv(self):
        obs, rewards, term, trunc, info = self.env.recv()
        # the first batch after a reset comes from resets: nothing to record
        fresh = info["elapsed_step"] == 0
        if not fresh.all():
            sub = {k: (v[~fresh] if isinstance(v, np.ndarray) else v) for k, v in info.items()}
            self._record(rewards[~fresh], term[~fresh], trunc[~fresh], sub)
        return obs, rewards, term, trunc, info


def ppo_like_sync(envs, steps: int, rng: np.random.Generator):
    """A PPO rollout's shape: a linear policy, stored obs/actions/rewards/dones, GAE."""
    n = envs.num_envs
    obs_dim = int(np.prod(envs.observation_space.shape))
    n_act = envs.action_space.n
    w = rng.normal(size=(obs_dim, n_act)).astype(np.float32) * 1e-3
    obs_buf = np.zeros((steps, n, *envs.observation_space.shape), envs.observation_space.dtype)
    rew_buf = np.zeros((steps, n), np.float32)
    done_buf = np.zeros((steps, n), np.float32)
    next_obs, _ = envs.reset()
    next_done = np.zeros(n, np.float32)
    for t in range(steps):
        obs_buf[t], done_buf[t] = next_obs, next_done
        logits = next_obs.reshape(n, -1).astype(np.float32) @ w
        probs = np.exp(logits - logits.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        action = np.array([rng.choice(n_act, p=p) for p in probs])
        next_obs, reward, term, trunc, info = envs.step(action)
        rew_buf[t] = reward
        next_done = np.logical_or(term, trunc).astype(np.float32)
        assert next_obs.shape == (n, *envs.observation_space.shape)
        np.testing.assert_array_equal(info["env_id"], np.arange(n))
    adv = np.zeros_like(rew_buf)  # GAE with zero values: what the buffers feed
    last = np.zeros(n, np.float32)
    for t in reversed(range(steps)):
        nonterminal = 1.0 - (next_done if t == steps - 1 else done_buf[t + 1])
        last = rew_buf[t] + 0.99 * 0.95 * nonterminal * last
        adv[t] = last
    assert np.isfinite(adv).all()
    return obs_buf, rew_buf


@pytest.mark.timeout(120)
def test_cartpole_sync_loop_records_episodes():
    envs = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=8, seed=1, num_threads=2)
    assert isinstance(envs, gym.Env) and not envs.is_async
    envs.num_envs = 8  # CleanRL assigns these; they stay the single env's
    envs.single_action_space = envs.action_space
    envs.observation_space = envs.observation_space
    envs = RecordEpisodeStatistics(envs)
    assert isinstance(envs.action_space, gym.spaces.Discrete)
    ppo_like_sync(envs, 300, np.random.default_rng(0))
    assert len(envs.finished) >= 8, "a near-random CartPole policy ends episodes within 300 steps"
    for ret, length in envs.finished:
        assert 1 <= length <= 500 and ret == length  # reward 1 per step
    envs.close()


@pytest.mark.timeout(120)
def test_cartpole_async_loop_serves_every_env():
    envs = RecordEpisodeStatistics(envpool.make("CartPole-v1", num_envs=8, batch_size=4, seed=3, num_threads=2))
    assert envs.unwrapped.is_async
    envs.async_reset()
    seen = np.zeros(8, np.int64)
    for _ in range(400):
        obs, rew, term, trunc, info = envs.recv()
        assert obs.shape == (4, 4) and rew.shape == (4,) and info["env_id"].shape == (4,)
        np.testing.assert_array_equal(info["players"]["env_id"], info["env_id"])
        seen[info["env_id"]] += 1
        envs.send(np.random.randint(0, 2, size=4), info["env_id"])
    assert seen.min() > 150, seen
    assert envs.finished and all(ret == length for ret, length in envs.finished)
    # step(action, env_id) is send then recv, as EnvPool's
    obs, _, _, _, info = envs.recv()
    obs, _, _, _, info = envs.unwrapped.step(np.zeros(4, np.int32), info["env_id"])
    assert obs.shape == (4, 4)
    envs.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", atari_backends())
def test_pong_loop_with_episodic_life_and_reward_clip(backend):
    envs = envpool.make("Pong-v5", env_type="gymnasium", num_envs=4, episodic_life=True, reward_clip=True,
                        seed=0, num_threads=2, **backend)
    assert envs.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert envs.action_space == gym.spaces.Discrete(6)
    envs = RecordEpisodeStatistics(envs)
    rng = np.random.default_rng(1)
    obs, info = envs.reset()
    assert set(info) == {"env_id", "players", "lives", "reward", "terminated", "elapsed_step"}
    raw_nonzero = 0
    for _ in range(600):
        obs, rew, term, trunc, info = envs.step(rng.integers(0, 6, size=4))
        assert set(np.unique(rew)) <= {-1.0, 0.0, 1.0}
        np.testing.assert_array_equal(rew, np.sign(info["reward"]))
        raw_nonzero += int((info["reward"] != 0).sum())
    assert raw_nonzero > 0, "random Pong play concedes points within 600 steps"
    # async: send/recv through the wrapper
    envs.close()
    envs = RecordEpisodeStatistics(envpool.make("Pong-v5", num_envs=4, batch_size=2, seed=0, num_threads=2, **backend))
    envs.async_reset()
    for _ in range(50):
        obs, rew, term, trunc, info = envs.recv()
        assert obs.shape == (2, 4, 84, 84) and info["lives"].dtype == np.int32
        envs.send(rng.integers(0, 6, size=2), info["env_id"])
    envs.close()


def _structure(x):
    """Types, dtypes and shapes of a result, recursively (values left out)."""
    if isinstance(x, dict):
        return {k: _structure(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [_structure(v) for v in x]
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape)
    return type(x).__name__


@pytest.mark.timeout(120)
def test_cartpole_returns_what_envpool_returns():
    real = real_envpool()
    kw = dict(num_envs=4, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = real.make("CartPole-v1", env_type="gymnasium", **kw)
    ours = envpool.make("CartPole-v1", env_type="gymnasium", **kw)
    try:
        assert isinstance(ours, gym.Env) and isinstance(ours, gym.vector.VectorEnv)
        assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
        assert ours.single_observation_space == ref.single_observation_space
        assert list(ours.config) == list(ref.config)
        for key in ("num_envs", "batch_size", "num_threads", "seed", "max_episode_steps", "reward_threshold"):
            assert ours.config[key] == ref.config[key], key
        assert ours.is_async == ref.is_async and ours.num_envs == ref.num_envs == len(ours)
        np.testing.assert_array_equal(ours.all_env_ids, ref.all_env_ids)
        assert ours.all_env_ids.dtype == ref.all_env_ids.dtype
        assert list(ours.spec.config._fields) == list(ref.spec.config._fields)
        assert ours.spec.reward_threshold == ref.spec.reward_threshold
        assert _structure(ours.reset()) == _structure(ref.reset())
        for t in range(200):  # through episode ends and auto-resets
            a = np.random.randint(0, 2, size=4)
            assert _structure(ours.step(a)) == _structure(ref.step(a)), t
        assert _structure(ours.reset(np.array([0, 2]))) == _structure(ref.reset(np.array([0, 2])))
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(120)
def test_cartpole_async_calls_return_what_envpool_returns():
    real = real_envpool()
    kw = dict(num_envs=4, batch_size=2, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = real.make("CartPole-v1", env_type="gymnasium", **kw)
    ours = envpool.make("CartPole-v1", env_type="gymnasium", **kw)
    try:
        ours.async_reset(), ref.async_reset()
        for _ in range(30):
            got, want = ours.recv(), ref.recv()
            assert _structure(got) == _structure(want)
            a = np.random.randint(0, 2, size=2)
            ours.send(a, got[4]["env_id"]), ref.send(a, want[4]["env_id"])
        a = np.random.randint(0, 2, size=2)
        got, want = ours.recv(), ref.recv()
        assert _structure(ours.step(a, got[4]["env_id"])) == _structure(ref.step(a, want[4]["env_id"]))
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", atari_backends())
def test_pong_keys_spaces_and_dtypes_equal_envpool(backend):
    real = real_envpool()
    kw = dict(num_envs=2, seed=3, episodic_life=True, reward_clip=True, stack_num=4, img_height=84, img_width=84)
    ref = real.make("Pong-v5", env_type="gymnasium", **kw)
    ours = envpool.make("Pong-v5", env_type="gymnasium", **kw, **backend)
    try:
        assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
        assert list(ours.config) == list(ref.config)
        for key in ("max_episode_steps", "stack_num", "frame_skip", "noop_max", "episodic_life", "reward_clip",
                    "use_fire_reset", "task", "repeat_action_probability", "full_action_space"):
            assert ours.config[key] == ref.config[key], key
        got, want = ours.reset(), ref.reset()
        want_info = {k: v for k, v in want[1].items() if k != "ram"}  # not reported (docs/envpool.md)
        assert _structure(got) == _structure([want[0], want_info])
        a = np.zeros(2, np.int32)
        got, want = ours.step(a), ref.step(a)
        want = [*want[:4], {k: v for k, v in want[4].items() if k != "ram"}]
        assert _structure(got) == _structure(want)
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(300)
def test_plugin_atari_infos_equal_envpool_across_lost_lives():
    """With the native plugin the frames equal EnvPool's (test_ale_plugin.py), so its infos
    must too: ``lives`` and ``reward`` as reported, ``terminated`` (game over) as derived."""
    real = real_envpool()
    if not (os.path.exists(PLUGIN) and has("ale_py")):
        pytest.skip(f"the native ALE plugin is not built ({PLUGIN}) or ale-py is missing")
    kw = dict(num_envs=2, seed=5, episodic_life=True, reward_clip=True)
    ref = real.make("Breakout-v5", env_type="gymnasium", **kw)
    ours = envpool.make("Breakout-v5", env_type="gymnasium", plugin=PLUGIN, num_threads=1, **kw)
    try:
        ours.reset(), ref.reset()
        actions = np.random.default_rng(0).integers(0, 4, (1500, 2))
        ends = game_overs = 0
        for t, a in enumerate(actions):
            got, want = ours.step(a), ref.step(a)
            for k, name in enumerate(("obs", "reward", "terminated", "truncated")):
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name} at step {t}")
            for key in ("env_id", "lives", "reward", "terminated", "elapsed_step"):
                np.testing.assert_array_equal(got[4][key], want[4][key], err_msg=f"info[{key!r}] at step {t}")
                assert got[4][key].dtype == want[4][key].dtype, key
            ends += int(got[2].sum())
            game_overs += int(got[4]["terminated"].sum())
        assert ends > game_overs > 0, (ends, game_overs)
    finally:
        ours.close()
        ref.close()


@pytest.mark.timeout(120)
def test_sync_partial_reset_returns_those_rows_and_seed_is_fixed():
    envs = envpool.make("CartPole-v1", num_envs=4, seed=0)
    envs.reset()
    obs, info = envs.reset(np.array([1, 3]))
    assert obs.shape == (2, 4)
    np.testing.assert_array_equal(info["env_id"], [1, 3])
    np.testing.assert_array_equal(info["elapsed_step"], [0, 0])
    with pytest.warns(UserWarning, match="seeds are fixed"):
        envs.reset(seed=3)
    envs.close()


@pytest.mark.timeout(120)
def test_seeds_are_seed_plus_i():
    a = envpool.make("CartPole-v1", num_envs=3, seed=10)
    b = envpool.make("CartPole-v1", num_envs=1, seed=12)
    c = envpool.make("CartPole-v1", num_envs=2, env_seed=[12, 99])
    try:
        oa, ob, oc = a.reset()[0], b.reset()[0], c.reset()[0]
        np.testing.assert_array_equal(oa[2], ob[0])
        np.testing.assert_array_equal(oc[0], ob[0])
    finally:
        a.close(), b.close(), c.close()


@pytest.mark.timeout(120)
def test_hosted_classic_control_and_spec():
    envs = envpool.make_gym("MountainCar-v0", num_envs=2, seed=0, max_episode_steps=5)
    obs, _ = envs.reset()
    assert obs.shape == (2, 2) and envs.config["max_episode_steps"] == 5
    for t in range(5):
        _, _, term, trunc, info = envs.step(np.zeros(2, np.int64))
    assert trunc.all() and not term.any()
    envs.close()
    spec = envpool.make_spec("CartPole-v1", num_envs=2)
    assert spec.config.num_envs == 2 and spec.config.max_episode_steps == 500
    assert spec.observation_space.shape == (4,) and spec.action_space.n == 2
    assert "CartPole-v1" in envpool.list_all_envs()


@pytest.mark.timeout(120)
def test_bad_arguments_raise_typed_errors():
    with pytest.raises(ConfigError, match="'foo'.*valid ones:.*num_envs"):
        envpool.make("CartPole-v1", num_envs=2, foo=1)
    with pytest.raises(ConfigError, match="'episodic_life'"):
        envpool.make("CartPole-v1", episodic_life=True)  # an Atari kwarg
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        envpool.make("CartPole-v1", num_envs=2, batch_size=3)
    with pytest.raises(InvalidArgumentError, match="num_envs"):
        envpool.make("CartPole-v1", num_envs=0)
    with pytest.raises(InvalidArgumentError, match="int32"):
        envpool.make("CartPole-v1", seed=2**31)
    with pytest.raises(InvalidArgumentError, match="env_type"):
        envpool.make("CartPole-v1", env_type="gym2")
    with pytest.raises(InvalidArgumentError, match="gym_reset_return_info"):
        envpool.make("CartPole-v1", gym_reset_return_info=False)
    with pytest.raises(UnknownEnvError, match="list_all_envs"):
        envpool.make("NoSuchEnv-v0")
    if has("ale_py"):
        with pytest.raises(ConfigError, match="gray_scale"):
            envpool.make("Pong-v5", gray_scale=False)
        with pytest.raises(ConfigError, match="'frameskip'.*frame_skip"):
            envpool.make("Pong-v5", frameskip=4)
