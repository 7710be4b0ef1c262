"""Small Python envs for benchmarks and tests of Python-hosted envs."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


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
