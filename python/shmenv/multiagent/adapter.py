"""``ParallelAdapter``: one multi-agent env as the single Gymnasium env shmenv's workers
host. It is built inside the worker (so the multi-agent env, and any unpicklable object it
holds, never leaves that process) and turns the env's per-agent dicts into fixed-size
arrays that go through shared memory like any observation.

**The encoding** (the engine knows one reward and two flags per env; everything per agent
is an observation array). The adapter's observation is a ``Dict`` with one entry per group
of agents (:mod:`shmenv.multiagent.layout`; one group ``"agents"`` by default), each a
``Dict`` of:

- ``observation``: the agents' observations stacked ``[A, ...]`` (zeros for an agent that
  is not in the env at this step);
- ``reward`` ``[A]`` float32, ``terminated`` and ``truncated`` ``[A]`` bool: what the step
  returned for each agent (0 and False for agents the step did not return, and on reset);
- ``active`` ``[A]`` bool: the agent is in the env after this step (it acts at the next
  step): in ``env.agents`` and neither terminated nor truncated.

**What the env must return** (checked at every reset and step, :class:`AgentDataError`
otherwise, naming the agent): ``env.agents`` and the keys of the step's rewards,
terminations and truncations are agents of ``possible_agents`` (observations and infos
may hold other keys, such as ``"common"``, which PettingZoo allows: they are ignored);
each agent's observation has its space's shape. An agent that was active and leaves
``env.agents`` at a step without a termination or truncation flag is *terminated* at
that step (the parallel API's agent removed from ``env.agents`` is done; terminated, as it
has no next observation to bootstrap from).

The env-level values the engine sees: reward = the sum of the agents' rewards (the team
reward, which the engine's episode statistics add up); the episode ends when no agent is
active any more (with ``done_on_any=True``: when any agent terminates or truncates, as
TorchRL's ``PettingZooWrapper`` does for parallel envs); it then counts as *terminated*
when every agent's episode ended by termination, else as *truncated*. The engine then
auto-resets the whole env, as for any env.

Actions: the group's per-agent actions stacked ``[A, ...]`` (one group: that array is
the action; several groups: a ``Dict`` of them, which shmenv packs into one row). Only the
active agents' rows are passed to the env; the other rows are ignored (but must still be
valid values of the space, which the trainer checks).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from shmenv.multiagent.layout import (
    AgentDataError,
    GroupMap,
    agent_value,
    check_group_spaces,
    check_possible_agents,
    describe,
    group_map_of,
    group_observation_space,
    stack_space,
    stack_values,
)

__all__ = ["ParallelAdapter", "build_parallel_env"]


def _load(target: str) -> Any:
    """``"package.module:attr"`` -> the attribute; ``"package.module"`` -> the module's
    ``parallel_env`` (PettingZoo's env modules: ``pettingzoo.butterfly.pistonball_v6``)."""
    module_name, sep, attr = target.partition(":")
    module = importlib.import_module(module_name)
    if not sep:
        if not hasattr(module, "parallel_env"):
            raise TypeError(
                f"module {module_name!r} has no parallel_env: pass 'package.module:function' naming what builds the env"
            )
        return module.parallel_env
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def build_parallel_env(target: str | Callable[..., Any], kwargs: Mapping[str, Any] | None = None) -> Any:
    """Builds the multi-agent env: ``target`` (an entry point, a module name, or a callable)
    called with ``kwargs``. A PettingZoo ``AECEnv`` is converted with PettingZoo's
    ``aec_to_parallel`` (``turn_based_aec_to_parallel`` when its metadata does not say
    ``is_parallelizable``: turn-based games, where one agent acts at a time)."""
    make = _load(target) if isinstance(target, str) else target
    env = make(**dict(kwargs or {}))
    try:
        from pettingzoo.utils.env import AECEnv
    except ImportError:  # a PettingZoo-shaped env without PettingZoo installed
        AECEnv = ()  # noqa: N806
    if AECEnv and isinstance(env, AECEnv):
        from pettingzoo.utils.conversions import aec_to_parallel, turn_based_aec_to_parallel

        env = aec_to_parallel(env) if env.metadata.get("is_parallelizable", False) else turn_based_aec_to_parallel(env)
    missing = [
        name
        for name in ("possible_agents", "reset", "step", "observation_space", "action_space")
        if not hasattr(env, name)
    ]
    if missing or not callable(env.observation_space):
        raise TypeError(
            f"{target!r} built {type(env).__module__}.{type(env).__qualname__}, which is not a PettingZoo ParallelEnv "
            f"or AECEnv (it lacks {missing or ['a callable observation_space(agent)']}); shmenv.multiagent hosts "
            "multi-agent envs (for a single-agent Gymnasium env use shmenv.make_vec)"
        )
    return env


class ParallelAdapter(gym.Env):
    """A PettingZoo parallel env as one Gymnasium env (see the module docstring for the
    encoding). ``target``/``kwargs`` build the env (:func:`build_parallel_env`);
    ``group_map`` groups its agents (:func:`shmenv.multiagent.layout.group_map_of`);
    ``max_episode_steps`` truncates every active agent after that many steps;
    ``agent_infos`` returns the agents' infos as the step's info (``{agent: info}``: they
    then travel pickled over shmenv's side channel, so they cost a round trip per batch)."""

    def __init__(
        self,
        target: str | Callable[..., Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        group_map: str | Mapping[str, list[str]] | None = None,
        done_on_any: bool = False,
        max_episode_steps: int | None = None,
        agent_infos: bool = False,
    ):
        self.par_env = build_parallel_env(target, kwargs)
        env = self.par_env
        self.possible_agents = list(env.possible_agents)
        check_possible_agents(self.possible_agents)
        self._possible = frozenset(self.possible_agents)
        self.groups: GroupMap = group_map_of(group_map, self.possible_agents)
        check_group_spaces(self.groups, env.observation_space, env.action_space)
        self.agent_layout = describe(self.groups, env.observation_space, env.action_space)
        self._obs_spaces = self.agent_layout["observation_spaces"]
        self._act_spaces = self.agent_layout["action_spaces"]
        self.observation_space = spaces.Dict(
            {g: group_observation_space(self._obs_spaces[g], len(m)) for g, m in self.groups.items()}
        )
        stacked = {g: stack_space(self._act_spaces[g], len(m)) for g, m in self.groups.items()}
        self._one_group = next(iter(self.groups)) if len(self.groups) == 1 else None
        self.action_space = stacked[self._one_group] if self._one_group is not None else spaces.Dict(stacked)
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self.done_on_any = bool(done_on_any)
        self.max_episode_steps = max_episode_steps
        self.agent_infos = bool(agent_infos)
        self._steps = 0
        self._ended: dict[str, bool] = {}  # agent -> ended by termination (this episode)
        self._agents: list[str] = []  # env.agents after the last reset or step (checked)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Resets the multi-agent env (``seed`` and ``options`` passed on)."""
        super().reset(seed=seed)
        observations, infos = self.par_env.reset(seed=seed, options=options)
        self._steps = 0
        self._ended = {}
        self._agents = self._current_agents("reset()")
        return self._observation(observations, {}, {}, {}, set(self._agents)), self._infos(infos)

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        """Steps the active agents with their rows of ``action``; see the module docstring
        for what is returned."""
        live = [a for a in self._agents if a not in self._ended]
        observations, rewards, terminations, truncations, infos = self.par_env.step(self._agent_actions(action, live))
        self._steps += 1
        for what, values in (("rewards", rewards), ("terminations", terminations), ("truncations", truncations)):
            self._check_keys(what, values)
        self._agents = self._current_agents("step()")
        terminations, truncations = dict(terminations), dict(truncations)
        now = set(self._agents)
        for agent in live:  # left env.agents without a flag: terminated (see the module docstring)
            if agent not in now and not (terminations.get(agent, False) or truncations.get(agent, False)):
                terminations[agent] = True
        ended_now = [
            a
            for a in self.possible_agents
            if (terminations.get(a, False) or truncations.get(a, False)) and a not in self._ended
        ]
        active = {a for a in self._agents if a not in self._ended and a not in ended_now}
        if self.max_episode_steps is not None and self._steps >= self.max_episode_steps and active:
            for agent in active:
                truncations[agent] = True
            ended_now.extend(active)
            active = set()
        for agent in ended_now:
            self._ended.setdefault(agent, bool(terminations.get(agent, False)))
        over = bool(ended_now) if self.done_on_any else not active
        if over:
            active = set()
        terminated = over and (
            any(terminations.get(a, False) for a in ended_now) if self.done_on_any else all(self._ended.values())
        )
        reward = float(sum(float(r) for r in rewards.values()))  # keys checked: possible agents only
        obs = self._observation(observations, rewards, terminations, truncations, active)
        return obs, reward, terminated, over and not terminated, self._infos(infos)

    def _current_agents(self, after: str) -> list[str]:
        """``env.agents``, checked: every one an agent of ``possible_agents``."""
        agents = list(self.par_env.agents)
        self._check_keys("env.agents", agents, after)
        return agents

    def _check_keys(self, what: str, agents: Any, after: str = "step()") -> None:
        """Refuses agents (``env.agents``, or the keys of one of the step's dicts) that are
        not in ``possible_agents``: their values would have no row (and an unknown agent in
        ``env.agents`` would keep the episode going with no row active)."""
        strangers = [a for a in agents if a not in self._possible]
        if strangers:
            names = ", ".join(map(repr, strangers))
            where = (
                f"env.agents after {after} holds {names}"
                if what == "env.agents"
                else f"the {what} returned by step() have the key {names}"
            )
            raise AgentDataError(
                f"{where}, which is not one of the env's possible_agents "
                f"{self.possible_agents}: every agent in env.agents and every key of the step's rewards, terminations "
                "and truncations must be in possible_agents (fix the env, or list the agent in possible_agents)"
            )

    def _agent_actions(self, action: Any, live: list[str]) -> dict[str, Any]:
        """The live agents' actions, from their rows of the stacked action."""
        live_set = set(live)
        out: dict[str, Any] = {}
        for group, members in self.groups.items():
            stacked = action if self._one_group is not None else action[group]
            space = self._act_spaces[group]
            for row, agent in enumerate(members):
                if agent in live_set:
                    out[agent] = agent_value(space, stacked, row)
        return out

    def _observation(
        self, observations: Mapping, rewards: Mapping, terminations: Mapping, truncations: Mapping, active: set
    ) -> dict:
        out = {}
        for group, members in self.groups.items():
            out[group] = {
                "observation": stack_values(self._obs_spaces[group], members, observations),
                "reward": np.array([rewards.get(a, 0.0) for a in members], np.float32),
                "terminated": np.array([bool(terminations.get(a, False)) for a in members], np.bool_),
                "truncated": np.array([bool(truncations.get(a, False)) for a in members], np.bool_),
                "active": np.array([a in active for a in members], np.bool_),
            }
        return out

    def _infos(self, infos: Mapping) -> dict:
        return {agent: dict(info) for agent, info in infos.items() if info} if self.agent_infos else {}

    def state(self) -> np.ndarray:
        """The env's global state (``env.state()``), for envs that have one."""
        return self.par_env.state()

    def render(self) -> Any:
        """The multi-agent env's ``render()``."""
        return self.par_env.render()

    def close(self) -> None:
        """Closes the multi-agent env."""
        self.par_env.close()
