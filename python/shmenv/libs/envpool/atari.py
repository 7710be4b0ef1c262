"""Atari ``*-v5`` tasks hosted from Gymnasium (no native ALE plugin): EnvPool's
preprocessing and life/reward semantics as Gymnasium wrappers, built in the workers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def _hosted_atari(
    game: str,
    stack_num: int = 4,
    frame_skip: int = 4,
    noop_max: int = 30,
    img_height: int = 84,
    img_width: int = 84,
    episodic_life: bool = False,
    reward_clip: bool = False,
    use_fire_reset: bool = True,
    full_action_space: bool = False,
    repeat_action_probability: float = 0.0,
    mode: int = -1,
    difficulty: int = -1,
    max_episode_steps: int = 27000,
):
    """Atari with EnvPool's preprocessing as Gymnasium wrappers (what the workers build
    without the native plugin)."""
    import ale_py

    gym.register_envs(ale_py)
    name = "".join(g.capitalize() for g in game.split("_"))
    kw: dict[str, Any] = {}
    if mode >= 0:
        kw["mode"] = mode
    if difficulty >= 0:
        kw["difficulty"] = difficulty
    env = gym.make(
        f"ALE/{name}-v5",
        frameskip=1,
        repeat_action_probability=repeat_action_probability,
        full_action_space=full_action_space,
        max_num_frames_per_episode=(max_episode_steps + 2) * frame_skip + noop_max,
        **kw,
    )
    env = gym.wrappers.AtariPreprocessing(
        env, frame_skip=frame_skip, noop_max=noop_max, screen_size=(img_width, img_height), grayscale_obs=True
    )
    env = _AtariSemantics(env, episodic_life, reward_clip, use_fire_reset, max_episode_steps)
    return gym.wrappers.FrameStackObservation(env, stack_num)


class _AtariSemantics(gym.Wrapper):
    """EnvPool's episodic life, reward clipping, fire reset, time limit and infos (``lives``,
    ``reward`` before clipping, ``terminated``: the game is over). The time limit counts the
    agent's steps over the whole game, as EnvPool's: the no-ops and the FIRE press of a
    reset are not steps."""

    def __init__(self, env, episodic_life: bool, reward_clip: bool, use_fire_reset: bool, max_episode_steps: int):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        self._fire = meanings.index("FIRE") if use_fire_reset and "FIRE" in meanings else None
        self._episodic, self._clip = episodic_life, reward_clip
        self._max_steps, self._steps = max_episode_steps, 0
        self._game_over, self._lives = True, 0

    def reset(self, *, seed=None, options=None):
        if self._game_over or not self._episodic or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
            self._steps = 0
        else:  # a life was lost: the game goes on
            obs, _, term, trunc, info = self.env.step(0)
            if term or trunc:
                obs, info = self.env.reset()
                self._steps = 0
        if self._fire is not None:
            obs, _, term, trunc, info = self.env.step(self._fire)
            if term or trunc:
                obs, info = self.env.reset()
                self._steps = 0
        self._game_over, self._lives = False, int(info.get("lives", 0))
        return obs, {"lives": self._lives, "reward": 0.0, "terminated": 0}

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        self._steps += 1
        trunc = bool(trunc or (self._steps >= self._max_steps and not term))
        lives = int(info.get("lives", 0))
        self._game_over = bool(term or trunc)
        game_over = bool(term)
        if self._episodic and lives < self._lives:
            term = True
        self._lives = lives
        clipped = float(np.sign(float(reward))) if self._clip else reward
        return obs, clipped, term, trunc, {"lives": lives, "reward": float(reward), "terminated": int(game_over)}
