"""Users' code as Stable-Baselines3, Gymnasium and CleanRL teach it, with shmenv swapped in
by one word: SB3's ``make_vec_env(..., vec_env_cls=ShmVecEnv)`` and ``SubprocVecEnv``'s
list of thunks, ``gymnasium.make_vec``'s keywords, thunks that ``gym.make`` ids the script
registered, infos as ``SyncVectorEnv``'s beside Gymnasium's wrappers, and CleanRL's
``ppo_atari_envpool.py`` loop on ``shmenv.envpool``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

import shmenv

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_script(source: str, timeout: float = 150) -> str:
    """Runs ``source`` as a user's script (its own ``__main__``) and returns its output."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE]))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, f"the script failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


# --- Stable-Baselines3 ----------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_sb3_make_vec_env_with_vec_env_cls_equals_dummy_vec_env(no_leaks):
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    from shmenv.sb3 import ShmVecEnv

    venv = make_vec_env("CartPole-v1", n_envs=4, seed=0, vec_env_cls=ShmVecEnv, vec_env_kwargs={"start_method": "fork"})
    ref = make_vec_env("CartPole-v1", n_envs=4, seed=0, vec_env_cls=DummyVecEnv)
    try:
        np.testing.assert_array_equal(venv.reset(), ref.reset())
        ended = 0
        for t in range(60):
            actions = np.array([t % 2, 1, 0, (t // 3) % 2], np.int64)
            obs, rewards, dones, infos = venv.step(actions)
            r_obs, r_rewards, r_dones, r_infos = ref.step(actions)
            np.testing.assert_array_equal(obs, r_obs)
            np.testing.assert_array_equal(dones, r_dones)
            for i in np.flatnonzero(dones):
                ended += 1
                assert set(infos[i]) == set(r_infos[i])
                assert infos[i]["episode"]["r"] == r_infos[i]["episode"]["r"]
                np.testing.assert_array_equal(infos[i]["terminal_observation"], r_infos[i]["terminal_observation"])
        assert ended > 0
        assert venv.env_is_wrapped(gym.Wrapper) == ref.env_is_wrapped(gym.Wrapper)
    finally:
        venv.close()
        ref.close()


def _make_env(env_id: str, rank: int, seed: int = 0):
    """SB3's documented helper for SubprocVecEnv."""

    def _init():
        env = gym.make(env_id)
        env.reset(seed=seed + rank)
        return env

    return _init


@pytest.mark.timeout(120)
def test_sb3_subproc_signature_takes_a_list_of_thunks(no_leaks):
    from shmenv.sb3 import ShmVecEnv

    venv = ShmVecEnv([_make_env("CartPole-v1", i) for i in range(4)], start_method=None, num_workers=2)
    try:
        assert venv.num_envs == 4
        obs = venv.reset()
        # Each thunk reset its env with seed + rank; the unseeded reset continues that stream.
        want = []
        for i in range(4):
            env = _make_env("CartPole-v1", i)()
            want.append(env.reset()[0])
        np.testing.assert_array_equal(obs, np.array(want))
        obs, rewards, dones, infos = venv.step(np.zeros(4, np.int64))
        assert obs.shape == (4, 4) and len(infos) == 4
    finally:
        venv.close()
    with pytest.raises(shmenv.errors.InvalidArgumentError, match="cannot find context for 'threads'"):
        ShmVecEnv([_make_env("CartPole-v1", 0)], start_method="threads")
    with pytest.raises(shmenv.errors.InvalidArgumentError, match="2 env thunks and num_envs=3"):
        ShmVecEnv([_make_env("CartPole-v1", 0)] * 2, 3)
    with pytest.raises(TypeError, match=r"^ShmVecEnv\(\) got an unexpected keyword argument 'num_worker'"):
        ShmVecEnv([_make_env("CartPole-v1", 0)], num_worker=2)


def test_agent_rows_vec_env_errors_name_it(no_leaks):
    pytest.importorskip("mpe2")
    from shmenv.multiagent.sb3 import AgentRowsVecEnv

    with pytest.raises(TypeError, match=r"^AgentRowsVecEnv\(\) got an unexpected keyword argument 'num_worker'"):
        AgentRowsVecEnv("mpe2.simple_spread_v3", 2, num_worker=2)
    with pytest.raises(shmenv.errors.InvalidArgumentError, match="cannot find context"):
        AgentRowsVecEnv("mpe2.simple_spread_v3", 2, start_method="nope")


# --- gymnasium.make_vec's signature ---------------------------------------------------------


@pytest.mark.timeout(120)
def test_gymnasium_make_vec_keywords_env_kwargs_and_wrappers(no_leaks):
    kwargs = dict(
        vectorization_mode="async",
        vector_kwargs={"copy": True, "shared_memory": True},
        wrappers=[gym.wrappers.ClipAction, lambda env: gym.wrappers.TransformReward(env, lambda r: 2 * r)],
        g=1.62,
    )
    ref = gym.make_vec("Pendulum-v1", 3, **dict(kwargs, vectorization_mode="sync", vector_kwargs={"copy": True}))
    shmenv.resolve._HOSTED_WARNED.discard("Pendulum-v1")  # said once per id and process
    with pytest.warns(UserWarning, match="runs Gymnasium's Pendulum-v1 in Python workers"):
        envs = shmenv.make_vec("Pendulum-v1", 3, **kwargs)
    try:
        assert envs.backend == "python"
        assert envs.get_attr("g") == (1.62,) * 3
        obs, _ = envs.reset(seed=5)
        np.testing.assert_allclose(obs, ref.reset(seed=5)[0], rtol=1e-6)
        for t in range(10):
            actions = np.full((3, 1), 5.0 if t % 2 else -5.0, np.float32)  # clipped to [-2, 2]
            got, want = envs.step(actions), ref.step(actions)
            for a, b in zip(got[:4], want[:4]):
                np.testing.assert_allclose(a, b, rtol=1e-5)
    finally:
        envs.close()
        ref.close()


def test_gymnasium_make_vec_refusals_say_what_to_use():
    with pytest.raises(TypeError, match="neither one of shmenv's options nor an argument of CartPoleEnv.*'num_workers'"):
        shmenv.make_vec("CartPole-v1", 2, num_worker=2)
    with pytest.raises(shmenv.errors.InvalidArgumentError, match="vectorization_mode='threads' is not one of"):
        shmenv.make_vec("CartPole-v1", 2, vectorization_mode="threads")
    with pytest.raises(shmenv.errors.InvalidArgumentError, match="vector_kwargs\\['worker'\\]"):
        shmenv.make_vec("CartPole-v1", 2, vector_kwargs={"worker": print})
    with pytest.raises(TypeError, match="unexpected keyword argument 'g'"):
        shmenv.make_vec(lambda: gym.make("Pendulum-v1"), 2, g=1.0)


@pytest.mark.timeout(120)
def test_infos_beside_gymnasiums_wrappers_are_sync_vector_envs(no_leaks):
    """RecordEpisodeStatistics in each env, and DictInfoToList over the vector env: the
    infos hold exactly SyncVectorEnv's keys (no shmenv key beside Gymnasium's episode)."""
    from gymnasium.wrappers.vector import DictInfoToList

    wrappers = [gym.wrappers.RecordEpisodeStatistics]
    envs = DictInfoToList(shmenv.make_vec("CartPole-v1", 3, vectorization_mode="async", wrappers=wrappers))
    ref = DictInfoToList(gym.make_vec("CartPole-v1", 3, vectorization_mode="sync", wrappers=wrappers))
    try:
        _, infos = envs.reset(seed=1)
        assert infos == ref.reset(seed=1)[1]
        ended = 0
        for t in range(80):
            actions = np.array([1, t % 2, 0])
            _, _, term, trunc, infos = envs.step(actions)
            _, _, _, _, r_infos = ref.step(actions)
            assert [sorted(i) for i in infos] == [sorted(i) for i in r_infos], t
            for i, info in enumerate(infos):
                if "episode" in info:
                    ended += 1
                    assert info["episode"]["r"] == r_infos[i]["episode"]["r"]
                    assert info["episode"]["l"] == r_infos[i]["episode"]["l"]
        assert ended > 0
    finally:
        envs.close()
        ref.close()
    with shmenv.make_vec("CartPole-v1", 2, seed=0) as native:  # nothing else reports episodes: opt in
        native.reset()
        for _ in range(40):
            assert "episode_stats" not in native.step(np.ones(2, np.int64))[4]


# --- thunks that gym.make ids the script registered ----------------------------------------

_REGISTERING_SCRIPT = """
import gymnasium as gym
import numpy as np
import shmenv
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

class ShortCartPole(CartPoleEnv):  # defined in the script: __main__
    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        return obs, reward * 10, term, trunc, info

gym.register("ShortCartPole-v0", entry_point=ShortCartPole, max_episode_steps=7)
gym.register("PlainCartPole-v9", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
envs = shmenv.from_fns([lambda: gym.make("ShortCartPole-v0")] * 2 + [lambda: gym.make("PlainCartPole-v9")] * 2,
                       num_workers=2)
envs.reset(seed=0)
for t in range(7):
    obs, rew, term, trunc, info = envs.step(np.ones(4, np.int64))
print("REWARDS", rew.tolist(), "TRUNC", trunc.tolist())
envs.close()
"""


@pytest.mark.timeout(180)
def test_thunks_make_ids_the_script_registered():
    out = _run_script(_REGISTERING_SCRIPT)
    # The script's class (its reward times 10, its 7-step limit) ran in the workers.
    assert "REWARDS [10.0, 10.0, 1.0, 1.0] TRUNC [True, True, False, False]" in out, out


_UNREPLAYABLE_SCRIPT = """
import threading
import gymnasium as gym
import shmenv
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

lock = threading.Lock()  # cannot be pickled

def locked_cartpole():
    with lock:
        return CartPoleEnv()

gym.register("LockedCartPole-v0", entry_point=locked_cartpole)
try:
    shmenv.from_fns([lambda: gym.make("LockedCartPole-v0")] * 2, num_workers=1)
except shmenv.errors.Error as e:
    print("ERROR", type(e).__name__, e)
"""


@pytest.mark.timeout(120)
def test_an_id_that_cannot_be_replayed_is_named_with_the_fix():
    out = _run_script(_UNREPLAYABLE_SCRIPT)
    assert "ERROR" in out, out
    assert "LockedCartPole-v0" in out and "fresh Python processes" in out and "Register the id" in out, out


@pytest.mark.timeout(180)
def test_ale_thunks_after_register_envs_as_sb3_atari_scripts_write_them(no_leaks):
    ale_py = pytest.importorskip("ale_py")
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.atari_wrappers import AtariWrapper

    from shmenv.sb3 import ShmVecEnv

    gym.register_envs(ale_py)
    venv = ShmVecEnv(lambda: AtariWrapper(gym.make("PongNoFrameskip-v4")), 2, num_workers=1)
    try:
        assert venv.reset().shape == (2, 84, 84, 1)
        obs, _, _, _ = venv.step(np.zeros(2, np.int64))
        assert obs.shape == (2, 84, 84, 1)
    finally:
        venv.close()


# --- CleanRL's ppo_atari_envpool.py ---------------------------------------------------------


class RecordEpisodeStatistics(gym.Wrapper):
    """CleanRL's wrapper in ppo_atari_envpool.py, with the Gymnasium 1.x edits
    docs/envpool.md lists (5-value step, reset's (obs, info))."""

    def __init__(self, env, deque_size=100):
        super().__init__(env)
        self.num_envs = getattr(env, "num_envs", 1)
        self.episode_returns = None
        self.episode_lengths = None

    def reset(self, **kwargs):
        observations = super().reset(**kwargs)
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
        self.lives = np.zeros(self.num_envs, dtype=np.int32)
        self.returned_episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.returned_episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
        return observations

    def step(self, action):
        observations, rewards, term, trunc, infos = super().step(action)
        self.episode_returns += infos["reward"]
        self.episode_lengths += 1
        self.returned_episode_returns[:] = self.episode_returns
        self.returned_episode_lengths[:] = self.episode_lengths
        self.episode_returns *= 1 - infos["terminated"]
        self.episode_lengths *= 1 - infos["terminated"]
        infos["r"] = self.returned_episode_returns
        infos["l"] = self.returned_episode_lengths
        return observations, rewards, term, trunc, infos


@pytest.mark.timeout(180)
def test_cleanrl_ppo_atari_envpool_loop_with_shmenv_envpool(no_leaks):
    pytest.importorskip("ale_py")
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.distributions.categorical import Categorical

    import shmenv.envpool as envpool  # the one line that differs from the EnvPool script

    num_envs, num_steps = 4, 8
    envs = envpool.make("Pong-v5", env_type="gym", num_envs=num_envs, episodic_life=True, reward_clip=True, seed=1)
    envs = RecordEpisodeStatistics(envs)
    envs.num_envs = num_envs
    envs.single_action_space = envs.action_space
    envs.single_observation_space = envs.observation_space
    assert isinstance(envs.action_space, gym.spaces.Discrete), "only discrete action space is supported"

    def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
        return layer

    class Agent(nn.Module):
        def __init__(self, envs):
            super().__init__()
            self.network = nn.Sequential(
                layer_init(nn.Conv2d(4, 32, 8, stride=4)),
                nn.ReLU(),
                layer_init(nn.Conv2d(32, 64, 4, stride=2)),
                nn.ReLU(),
                layer_init(nn.Conv2d(64, 64, 3, stride=1)),
                nn.ReLU(),
                nn.Flatten(),
                layer_init(nn.Linear(64 * 7 * 7, 512)),
                nn.ReLU(),
            )
            self.actor = layer_init(nn.Linear(512, envs.single_action_space.n), std=0.01)
            self.critic = layer_init(nn.Linear(512, 1), std=1)

        def get_action_and_value(self, x, action=None):
            hidden = self.network(x / 255.0)
            probs = Categorical(logits=self.actor(hidden))
            if action is None:
                action = probs.sample()
            return action, probs.log_prob(action), probs.entropy(), self.critic(hidden)

    try:
        agent = Agent(envs)
        obs = torch.zeros((num_steps, num_envs) + envs.single_observation_space.shape)
        next_obs = torch.Tensor(envs.reset()[0])
        next_done = torch.zeros(num_envs)
        for step in range(num_steps):
            obs[step] = next_obs
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            next_obs, reward, term, trunc, info = envs.step(action.cpu().numpy())
            next_done = np.logical_or(term, trunc)
            next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(next_done)
            assert info["r"].shape == (num_envs,) and info["l"].tolist() == [step + 1] * num_envs
        assert obs.shape == (num_steps, num_envs, 4, 84, 84) and next_done.shape == (num_envs,)
    finally:
        envs.close()
