"""The reference for shmenv.multiagent's tests: PettingZoo parallel envs stepped one after
another in the test process, each result turned into the documented arrays straight from
PettingZoo's own dicts (not through shmenv's adapter), with Gymnasium's next-step
autoreset: the step after an episode ended is the next episode's reset."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def stack(space_of: Callable, agents: list[str], values: dict) -> np.ndarray:
    """The agents' values (Box observations) stacked, zeros for missing agents."""
    shape, dtype = space_of(agents[0]).shape, space_of(agents[0]).dtype
    out = np.zeros((len(agents), *shape), dtype)
    for i, agent in enumerate(agents):
        if agent in values:
            out[i] = values[agent]
    return out


class Serial:
    """``n`` envs from ``make``, stepped serially; rows as ``MultiAgentVectorEnv`` gives them."""

    def __init__(self, make: Callable[[], Any], n: int):
        self.envs = [make() for _ in range(n)]
        self.agents = list(self.envs[0].possible_agents)
        self.over = [False] * n
        self.ended: list[dict[str, bool]] = [{} for _ in range(n)]
        self.returns = np.zeros(n)

    def _obs(self, env, observations: dict) -> np.ndarray:
        return stack(env.observation_space, self.agents, observations)

    def reset(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rows = [self._reset_one(i, seed + i) for i in range(len(self.envs))]
        return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])

    def _reset_one(self, i: int, seed: int | None) -> tuple[np.ndarray, np.ndarray]:
        env = self.envs[i]
        observations, _ = env.reset(seed=seed)
        self.over[i], self.ended[i], self.returns[i] = False, {}, 0.0
        return self._obs(env, observations), np.array([a in env.agents for a in self.agents])

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        """One step of every env with row ``i`` of ``actions`` ``[n, A]``; a dict of the
        expected arrays (obs, rewards, terms, truncs, active, env_term, env_trunc, returns)."""
        out: dict[str, list] = {k: [] for k in ("obs", "rewards", "terms", "truncs", "active", "env_term",
                                                "env_trunc", "returns", "reset_row")}
        for i, env in enumerate(self.envs):
            if self.over[i]:
                obs, active = self._reset_one(i, None)
                zeros = np.zeros(len(self.agents))
                row = (obs, zeros.astype(np.float32), zeros.astype(bool), zeros.astype(bool), active, False, False)
                out["reset_row"].append(True)
            else:
                row = self._step_one(i, env, actions[i])
                out["reset_row"].append(False)
            for key, value in zip(("obs", "rewards", "terms", "truncs", "active", "env_term", "env_trunc"), row):
                out[key].append(value)
            out["returns"].append(self.returns[i])
        return {k: np.array(v) for k, v in out.items()}

    def _step_one(self, i: int, env: Any, action: np.ndarray) -> tuple:
        live = list(env.agents)
        given = {a: np.int64(action[self.agents.index(a)]) for a in live}
        observations, rewards, terms, truncs, _ = env.step(given)
        for agent in self.agents:
            if (terms.get(agent) or truncs.get(agent)) and agent not in self.ended[i]:
                self.ended[i][agent] = bool(terms.get(agent))
        active = np.array([a in env.agents for a in self.agents])
        reward_row = np.array([rewards.get(a, 0.0) for a in self.agents], np.float32)
        self.returns[i] += sum(float(r) for r in rewards.values())
        over = not env.agents
        self.over[i] = over
        env_term = over and all(self.ended[i].values())
        return (self._obs(env, observations), reward_row, np.array([bool(terms.get(a, False)) for a in self.agents]),
                np.array([bool(truncs.get(a, False)) for a in self.agents]), active, env_term, over and not env_term)


def check_step(envs: Any, ref: Serial, actions: np.ndarray, where: str) -> tuple[dict, dict]:
    """Steps a MultiAgentVectorEnv and the reference with the same actions and checks
    every array; returns (the expected arrays, shmenv's infos)."""
    obs, rewards, terms, truncs, infos = envs.step(actions)
    want = ref.step(actions)
    np.testing.assert_array_equal(obs, want["obs"], err_msg=f"{where}: observations")
    np.testing.assert_array_equal(rewards, want["rewards"], err_msg=f"{where}: rewards")
    assert rewards.dtype == np.float32 and terms.dtype == np.bool_, where
    np.testing.assert_array_equal(terms, want["terms"], err_msg=f"{where}: terminations")
    np.testing.assert_array_equal(truncs, want["truncs"], err_msg=f"{where}: truncations")
    np.testing.assert_array_equal(infos["active"], want["active"], err_msg=f"{where}: active")
    np.testing.assert_array_equal(infos["env_terminated"], want["env_term"], err_msg=f"{where}: env_terminated")
    np.testing.assert_array_equal(infos["env_truncated"], want["env_trunc"], err_msg=f"{where}: env_truncated")
    np.testing.assert_array_equal(infos["elapsed_step"] == 0, want["reset_row"], err_msg=f"{where}: reset rows")
    return want, infos
