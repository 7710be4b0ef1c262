"""Each agent a row: a multi-agent pool as a Gymnasium ``VectorEnv`` of ``num_envs *
num_agents`` rows, for parameter-shared trainers (one policy for every agent) and, through
``shmenv.multiagent.sb3``, Stable-Baselines3. What SuperSuit's
``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), n)`` gives, with these
conventions (docs/multiagent.md compares them row by row):

- row ``r`` is agent ``r % num_agents`` (``possible_agents`` order) of env
  ``r // num_agents``, as in SuperSuit; ``infos["env_id"]`` and ``infos["agent_id"]`` say so
  (EnvPool's ``players`` layout);
- every agent needs the same spaces (one group), as SuperSuit requires;
- an agent that has left has zero observations and rewards until its env's episode ends
  (SuperSuit's ``black_death``), its actions are ignored and ``infos["active"]`` is False;
- a row's ``terminated``/``truncated`` is its agent's flag at the step it leaves, and, at
  the step its env's episode ends, how the agent ended (so every row of an ended env is
  done there and the next observation starts a new episode); an agent that leaves
  ``env.agents`` without a flag counts as terminated (docs/multiagent.md);
- autoreset as ``shmenv.make_vec``'s ``autoreset_mode`` (Gymnasium's next step by default;
  SuperSuit resets in the same step, which ``autoreset_mode="same_step"`` gives, with each
  row's last observation in ``infos["final_obs"]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space

from shmenv.errors import InvalidArgumentError
from shmenv.multiagent.vector import MultiAgentVectorEnv, make_vec
from shmenv.prechecks import check_open

__all__ = ["AgentRowsVectorEnv", "make_agent_vec"]


def _rows(value: Any, n: int, a: int) -> Any:
    """``[n, a, ...]`` arrays as ``[n * a, ...]``."""
    if isinstance(value, dict):
        return {k: _rows(v, n, a) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_rows(v, n, a) for v in value)
    array = np.asarray(value)
    return array.reshape(n * a, *array.shape[2:])


def _agents(value: Any, n: int, a: int) -> Any:
    """``[n * a, ...]`` arrays as ``[n, a, ...]``."""
    if isinstance(value, dict):
        return {k: _agents(v, n, a) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_agents(v, n, a) for v in value)
    array = np.asarray(value)
    if array.ndim == 0 or array.shape[0] != n * a:
        raise InvalidArgumentError(
            f"actions must have one row per agent of every env: shape ({n * a}, ...) for {n} env(s) x {a} agents "
            f"(row r = agent r % {a} of env r // {a}); got shape {array.shape}"
        )
    return array.reshape(n, a, *array.shape[1:])


class AgentRowsVectorEnv(VectorEnv):
    """A :class:`MultiAgentVectorEnv` (sync, one group) with each agent a row; see the
    module docstring. Made by :func:`make_agent_vec`."""

    def __init__(self, envs: MultiAgentVectorEnv):
        if envs.is_async:
            envs.close()
            raise InvalidArgumentError("each-agent-a-row envs step every env together: pass no batch_size")
        if len(envs.groups) != 1:
            groups = {g: len(m) for g, m in envs.groups.items()}
            envs.close()
            raise InvalidArgumentError(
                f"each agent a row needs one group of agents with the same spaces, got groups {groups}: pad the "
                "spaces in the env factory (SuperSuit's pad_observations_v0 / pad_action_space_v0), or use "
                "shmenv.multiagent.make_vec with group_map for per-group arrays"
            )
        self.envs = envs
        self.num_agents = envs.num_agents
        self.possible_agents = envs.possible_agents
        self.num_envs = envs.num_envs * envs.num_agents
        self.single_observation_space = envs.single_agent_observation_space
        self.single_action_space = envs.single_agent_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**envs.metadata, "autoreset_mode": envs.autoreset_mode}
        self.render_mode = envs.render_mode
        self.autoreset_mode = envs.autoreset_mode
        n, a = envs.num_envs, envs.num_agents
        self._env_id = np.repeat(np.arange(n, dtype=np.int32), a)
        self._agent_id = np.tile(np.arange(a, dtype=np.int32), n)
        self._left = np.zeros((n, a), np.int8)  # how each agent left this episode: 0 not yet, 1 term, 2 trunc
        self.closed = False

    def reset(self, *, seed: Any = None, options: dict | None = None):
        """Resets every env (``seed + i`` for env ``i``); ``(obs, infos)`` by row."""
        check_open(self.closed, "env")
        obs, infos = self.envs.reset(seed=seed, options=options)
        mask = (options or {}).get("reset_mask")
        self._left[slice(None) if mask is None else np.asarray(mask, bool)] = 0
        return _rows(obs, self.envs.num_envs, self.num_agents), self._row_infos(infos)

    def step(self, actions: Any):
        """Steps every env with one action per row; see the module docstring."""
        check_open(self.closed, "env")
        n, a = self.envs.num_envs, self.num_agents
        obs, rewards, terms, truncs, infos = self.envs.step(_agents(actions, n, a))
        terms, truncs = np.array(terms), np.array(truncs)
        self._left[(self._left == 0) & terms] = 1
        self._left[(self._left == 0) & truncs] = 2
        ended = np.logical_or(infos["env_terminated"], infos["env_truncated"])
        if ended.any():
            terms[ended] = self._left[ended] == 1
            truncs[ended] = self._left[ended] == 2
            self._left[ended] = 0
        out = self._row_infos(infos)
        if "final_obs" in infos:
            final = np.full(n * a, None, dtype=object)
            for i in np.flatnonzero(infos["_final_obs"]):
                for j in range(a):
                    final[i * a + j] = _pick(infos["final_obs"][i], j)
            out["final_obs"], out["_final_obs"] = final, np.repeat(infos["_final_obs"], a)
        return _rows(obs, n, a), rewards.reshape(-1), terms.reshape(-1), truncs.reshape(-1), out

    def _row_infos(self, infos: dict) -> dict:
        """The infos by row: ``env_id``, ``agent_id``, ``active`` and the env's episode
        statistics (its team return and length, on each of its rows)."""
        a = self.num_agents
        out: dict[str, Any] = {
            "env_id": self._env_id,
            "agent_id": self._agent_id,
            "active": np.asarray(infos["active"]).reshape(-1),
        }
        if "elapsed_step" in infos:
            out["elapsed_step"] = np.repeat(infos["elapsed_step"], a)
        for key, value in infos.items():
            if isinstance(value, dict) and "r" in value and "_" + key in infos:
                out[key] = {k: np.repeat(v, a) for k, v in value.items()}
                out["_" + key] = np.repeat(infos["_" + key], a)
        return out

    def __enter__(self) -> "AgentRowsVectorEnv":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def close_extras(self, **kwargs: Any) -> None:
        self.envs.close()

    def render(self) -> tuple:
        """Every env's frame (one per env, not per row)."""
        return self.envs.render()

    def __repr__(self) -> str:
        return f"AgentRowsVectorEnv({self.envs.env_id!r}, {self.envs.num_envs} envs x {self.num_agents} agents)"


def _pick(value: Any, row: int) -> Any:
    """Agent ``row`` of one env's stacked value (a copy)."""
    if isinstance(value, dict):
        return {k: _pick(v, row) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_pick(v, row) for v in value)
    return np.array(value[row])


def make_agent_vec(env: Any, num_envs: int, **kwargs: Any) -> AgentRowsVectorEnv:
    """``num_envs`` multi-agent envs with each agent a row (``num_envs * num_agents`` rows):
    every argument is :func:`shmenv.multiagent.make_vec`'s (sync mode, one group)."""
    if kwargs.get("batch_size") is not None:
        raise InvalidArgumentError("each-agent-a-row envs step every env together: pass no batch_size")
    return AgentRowsVectorEnv(make_vec(env, num_envs, **kwargs))
