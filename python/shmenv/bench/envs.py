"""The Python envs the benchmarks host, by entry point (``shmenv.bench.envs:<name>``):

- :func:`make_atari`: ``ALE/<game>-v5`` with EnvPool's ``Pong-v5`` preprocessing as
  Gymnasium wrappers (``frameskip=1``, ``repeat_action_probability=0.0``,
  ``AtariPreprocessing(frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True)``,
  ``FrameStackObservation(4)``), as ``python -m shmenv.bench --workload`` runs it
  (:mod:`shmenv.bench.workloads` says what every engine runs);
- :func:`make_gymnasium`: a registered Gymnasium env (MuJoCo, classic control);
- :class:`BurnEnv`: a small env whose step burns a set CPU time, the Python twin of the
  native ``Burn-v0``.

The ROM folder and model files the native ALE and MuJoCo plugins take as config are
:mod:`shmenv.assets`'.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

#: EnvPool's Atari defaults that the other engines are given explicitly.
ATARI_FRAME_SKIP = 4
ATARI_NOOP_MAX = 30
ATARI_SCREEN = 84
ATARI_STACK = 4
ATARI_MAX_FRAMES = 108_000


def make_atari(game: str = "Pong") -> Any:
    """``ALE/<game>-v5`` with EnvPool's preprocessing, as Gymnasium wrappers (a factory
    shmenv's workers call by name, and the single-env and Gymnasium baselines use)."""
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make(
        f"ALE/{game}-v5",
        frameskip=1,
        repeat_action_probability=0.0,
        max_num_frames_per_episode=ATARI_MAX_FRAMES,
    )
    env = gym.wrappers.AtariPreprocessing(
        env,
        frame_skip=ATARI_FRAME_SKIP,
        noop_max=ATARI_NOOP_MAX,
        screen_size=ATARI_SCREEN,
        grayscale_obs=True,
    )
    return gym.wrappers.FrameStackObservation(env, ATARI_STACK)


def make_gymnasium(env_id: str = "HalfCheetah-v5") -> Any:
    """A registered Gymnasium env (MuJoCo and classic workloads)."""
    return gym.make(env_id)


class BurnEnv(gym.Env):
    """Each step burns ``step_us`` microseconds of CPU (a busy loop, like a physics step
    would); episodes last ``episode_len`` steps. The Python twin of the native ``Burn-v0``."""

    metadata = {"render_modes": []}

    def __init__(self, step_us: float = 50.0, episode_len: int = 100):
        self.step_s = float(step_us) * 1e-6
        self.episode_len = int(episode_len)
        self.observation_space = spaces.Box(-1e9, 1e9, (4,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0
        self._obs = np.zeros(4, dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._obs[:] = self.np_random.random(4)
        return self._obs, {}

    def step(self, action):
        end = time.perf_counter() + self.step_s
        while time.perf_counter() < end:
            pass
        self._t += 1
        self._obs[0] = self._t
        self._obs[1] = float(action)
        return self._obs, 1.0, False, self._t >= self.episode_len, {}
