"""``shmenv.multiagent.make_vec``: multi-agent envs (PettingZoo ``ParallelEnv``s, and
``AECEnv``s through PettingZoo's converters) stepped in shmenv's worker processes, as a
Gymnasium-style vector env whose arrays have an agent axis: ``[num_envs, num_agents, ...]``.

Each env runs inside a worker as a :class:`shmenv.multiagent.adapter.ParallelAdapter`, an
ordinary hosted Gymnasium env built there from the factory or entry point: per-agent
observations, rewards, terminations, truncations and the ``active`` mask are observation
arrays in shared memory (nothing per agent is pickled on the step path). docs/multiagent.md
describes the API and the conventions.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import types
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from gymnasium.vector.vector_env import AutoresetMode

import shmenv
from shmenv.errors import BuildError, InvalidArgumentError, WorkerError
from shmenv.multiagent.adapter import ParallelAdapter
from shmenv.multiagent.layout import (
    FIELDS,
    GROUPINGS,
    AgentDataError,
    DuplicateAgentsError,
    SpaceMismatchError,
    check_group_names,
    stack_space,
)

__all__ = ["MultiAgentVectorEnv", "make_vec", "from_fns"]


def _target(env: Any) -> str | Callable[..., Any]:
    """What the adapter builds the env from, checked in the trainer: an entry point
    ``"package.module:function"`` or env module name (``"mpe2.simple_spread_v3"``), an env
    module, or a callable (a factory, a class, ``functools.partial``) sent with cloudpickle."""
    if isinstance(env, types.ModuleType):
        return env.__name__
    if isinstance(env, str):
        module = env.partition(":")[0]
        try:
            found = importlib.util.find_spec(module) if module else None
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise InvalidArgumentError(
                f"cannot find the module {module!r} of {env!r} (is its package installed in this Python?): pass "
                "'package.module:function' (a function or class building a PettingZoo env), an env module's name "
                "('mpe2.simple_spread_v3'), or a factory"
            )
        return env
    if callable(env):
        return env
    if hasattr(env, "possible_agents"):
        raise InvalidArgumentError(
            f"make_vec got a multi-agent env instance ({type(env).__name__}): each worker builds its own envs, so "
            "pass what builds one: a factory (lambda: pistonball_v6.parallel_env(...)), the env module "
            "(pistonball_v6) or an entry point 'package.module:function' with config={...}"
        )
    raise InvalidArgumentError(
        f"shmenv.multiagent.make_vec cannot run {env!r}: pass a factory returning a PettingZoo ParallelEnv or "
        "AECEnv, a PettingZoo env module, or an entry point 'package.module:function'"
    )


def _adapter_factory(env: Any, config: Mapping | None, adapter_options: dict) -> functools.partial:
    """The zero-argument callable shmenv sends to the workers: builds the adapter there."""
    group_map = adapter_options.get("group_map")
    if group_map is not None and group_map not in GROUPINGS and not isinstance(group_map, Mapping):
        raise InvalidArgumentError(
            f"group_map must be None, one of {list(GROUPINGS)} or a dict of group name -> list of agents; "
            f"got {group_map!r}"
        )
    if isinstance(group_map, Mapping):
        check_group_names(group_map)
    if config is not None and not isinstance(config, Mapping):
        raise InvalidArgumentError(f"config must be a dict of keyword arguments for the env, got {config!r}")
    return functools.partial(ParallelAdapter, _target(env), dict(config or {}), **adapter_options)


def _unwrap(by_group: dict, one_group: str | None) -> Any:
    return by_group[one_group] if one_group is not None else by_group


@contextlib.contextmanager
def _typed_agent_errors() -> Iterator[None]:
    """An :class:`AgentDataError` raised by an env's adapter in its worker reaches the
    trainer as a :class:`shmenv.WorkerError`: raises it as the :class:`AgentDataError`."""
    try:
        yield
    except WorkerError as e:
        typed = None if isinstance(e, AgentDataError) else AgentDataError.from_worker(e)
        if typed is None:
            raise
        raise typed from e


class MultiAgentVectorEnv:
    """Multi-agent envs in shmenv workers, Gymnasium-vector style with an agent axis. Made
    by :func:`make_vec` (or :func:`from_fns`), whose docstring lists the arguments.

    With one group of agents (the default: every agent, in ``possible_agents`` order) the
    arrays are ``obs [num_envs, num_agents, ...]``, ``rewards`` float32 and
    ``terminations``/``truncations`` bool ``[num_envs, num_agents]``, actions
    ``[num_envs, num_agents, ...]``; with several groups each of them is a dict keyed by
    group. ``infos["active"]`` says which agents are in the env after the step (they act
    next; the others' action rows are ignored), ``infos["env_terminated"]`` and
    ``infos["env_truncated"]`` ``[num_envs]`` when an env's episode ended (every agent
    done); shmenv's ``env_id``, ``elapsed_step`` and episode statistics (the team return:
    the sum of every agent's rewards) are there too. With ``autoreset_mode="same_step"``
    an ended env's row holds its next episode's first observation and ``active`` flags,
    its rewards and flags are the ended step's, and ``infos["final_obs"]`` and
    ``infos["final_active"]`` hold the ended step's observations and ``active`` flags."""

    def __init__(self, pool: Any, layout: dict, label: str = ""):
        self.pool = pool
        self.env_id = label or pool.env_id
        self.groups: dict[str, list[str]] = layout["groups"]
        self.group_map = self.groups
        self._one = next(iter(self.groups)) if len(self.groups) == 1 else None
        self.possible_agents = [agent for members in self.groups.values() for agent in members]
        self.num_agents = len(self.possible_agents)
        self.num_envs = pool.num_envs
        self.batch_size = pool.batch_size
        self.is_async = pool.is_async
        self.autoreset_mode = pool.autoreset_mode
        self.agent_observation_spaces: dict[str, spaces.Space] = layout["observation_spaces"]
        self.agent_action_spaces: dict[str, spaces.Space] = layout["action_spaces"]
        stacked = {g: stack_space(self.agent_observation_spaces[g], len(m)) for g, m in self.groups.items()}
        self.single_agent_observation_space = _unwrap(self.agent_observation_spaces, self._one)
        self.single_agent_action_space = _unwrap(self.agent_action_spaces, self._one)
        self.single_observation_space = _unwrap(stacked, self._one) if self._one else spaces.Dict(stacked)
        self.observation_space = batch_space(self.single_observation_space, self.batch_size)
        self.single_action_space = pool.single_action_space
        self.action_space = pool.action_space
        self.metadata = pool.metadata
        self.render_mode = pool.render_mode
        self.closed = False

    # --- Gymnasium-style API ---------------------------------------------------------

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None):
        """Resets the envs (``seed``, ``options`` as ``shmenv.make_vec``'s ``reset``: env
        ``i`` gets ``seed + i``; ``options={"reset_mask": mask}`` resets some). Returns
        ``(obs, infos)`` with ``infos["active"]``."""
        with _typed_agent_errors():
            obs, infos = self.pool.reset(seed=seed, options=options)
        return self._unpack(obs, None, None, None, infos)[0], infos

    def step(self, actions: Any, env_ids: Any = None):
        """Steps every env with ``actions`` ``[num_envs, num_agents, ...]`` (a dict by group
        with several groups): ``(obs, rewards, terminations, truncations, infos)``, each with
        the agent axis. Async pools (``batch_size``) send to ``env_ids`` and return the next
        batch, as ``shmenv.make_vec``'s ``step``."""
        with _typed_agent_errors():
            results = self.pool.step(actions, env_ids)
        return self._unpack(*results)

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Async mode: hands ``actions`` to the envs ``env_ids`` (EnvPool's ``send``)."""
        self.pool.send(actions, env_ids)

    def recv(self):
        """Async mode: the next ``batch_size`` envs to finish, as :meth:`step` returns them
        (``infos["env_id"]`` says which)."""
        with _typed_agent_errors():
            results = self.pool.recv()
        return self._unpack(*results)

    def async_reset(self) -> None:
        """Async mode: starts a reset of every env; :meth:`recv` returns the results."""
        self.pool.async_reset()

    def close(self) -> None:
        """Stops the workers (each env's ``close()`` runs in its worker)."""
        if not self.closed:
            self.closed = True
            self.pool.close()

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Calls ``name`` on every env's adapter in its worker (``"state"``, ``"render"``;
        the PettingZoo env itself is the adapter's ``par_env``)."""
        return self.pool.call(name, *args, **kwargs)

    def get_attr(self, name: str) -> tuple:
        """Attribute ``name`` of every env's adapter."""
        return self.pool.get_attr(name)

    def render(self) -> tuple:
        """Every env's ``render()`` (build the envs with ``render_mode``)."""
        return self.pool.render()

    def stats(self) -> dict:
        """The pool's live statistics (``shmenv.ShmVectorEnv.stats``)."""
        return self.pool.stats()

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the worker processes."""
        return self.pool.worker_pids

    def __enter__(self) -> "MultiAgentVectorEnv":
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return f"MultiAgentVectorEnv({self.env_id!r}, num_envs={self.num_envs}, agents={self.possible_agents})"

    # --- internals -------------------------------------------------------------------

    def _unpack(self, obs: dict, env_rewards: Any, env_terms: Any, env_truncs: Any, infos: dict):
        """The pool's results (the adapter's observation dict) as agent-axis arrays."""
        fields = {f: {g: obs[g][f] for g in self.groups} for f in FIELDS}
        if "final_obs" in infos:  # same_step: the ended envs' step results are in their final observation
            self._take_final(fields, infos)
        infos["active"] = _unwrap(fields["active"], self._one)
        if env_terms is not None:
            infos["env_terminated"], infos["env_truncated"] = env_terms, env_truncs
        out = tuple(_unwrap(fields[f], self._one) for f in ("observation", "reward", "terminated", "truncated"))
        return (*out, infos)

    def _take_final(self, fields: dict, infos: dict) -> None:
        """Same-step autoreset: an ended env's row holds its next episode's first
        observation and ``active`` flags; its step's rewards and flags come from the final
        observation, ``infos["final_obs"]`` keeps only the agents' observations, and
        ``infos["final_active"]`` the agents' ``active`` flags after the step (every env's
        row: an ended env's from its final observation, the others' as ``infos["active"]``)."""
        final = infos["final_obs"]
        final_active = {g: np.array(fields["active"][g]) for g in self.groups}
        for i in np.flatnonzero(infos["_final_obs"]):
            last = final[i]
            for g in self.groups:
                for f in ("reward", "terminated", "truncated"):
                    fields[f][g][i] = last[g][f]
                final_active[g][i] = last[g]["active"]
            final[i] = _unwrap({g: last[g]["observation"] for g in self.groups}, self._one)
        infos["final_active"] = _unwrap(final_active, self._one)


def make_vec(
    env: Any,
    num_envs: int,
    *,
    config: Mapping[str, Any] | None = None,
    group_map: str | Mapping[str, list[str]] | None = None,
    done_on_any: bool = False,
    max_episode_steps: int | None = None,
    agent_infos: bool = False,
    render_mode: str | None = None,
    **pool_options: Any,
) -> MultiAgentVectorEnv:
    """Starts ``num_envs`` multi-agent envs in worker processes (:class:`MultiAgentVectorEnv`).

    - ``env``: what builds one env in a worker: a factory (``lambda:
      simple_spread_v3.parallel_env(N=3)``, any picklable callable, sent with cloudpickle:
      it may build unpicklable objects, since it runs in the worker), a PettingZoo env module
      (``pistonball_v6``) or its name (``"mpe2.simple_spread_v3"``, whose ``parallel_env``
      is called), or an entry point ``"package.module:function"``. It returns a PettingZoo
      ``ParallelEnv``, or an ``AECEnv`` (converted with ``aec_to_parallel``, or
      ``turn_based_aec_to_parallel`` for turn-based games).
    - ``config``: keyword arguments for that callable (``{"N": 3, "max_cycles": 25}``).
    - ``group_map``: which agents share an agent axis: None/"all" (one group, every agent
      in ``possible_agents`` order: arrays), "by_name" (TorchRL's grouping by name prefix),
      "one_per_agent", or ``{group: [agents]}`` (several groups: dicts of arrays). A group's
      agents must have equal spaces (:class:`SpaceMismatchError` otherwise).
    - ``done_on_any``: end the episode when any agent is done (TorchRL's parallel default)
      instead of when all are.
    - ``max_episode_steps``: truncates every active agent after that many steps.
    - ``agent_infos``: return the agents' infos (``infos[agent]``, pickled over the side
      channel: a round trip per batch); off by default.
    - ``render_mode``: passed to the env's constructor (``render()`` returns the frames).
    - every other keyword is ``shmenv.make_vec``'s (``num_workers``, ``seed``,
      ``autoreset_mode``, ``batch_size``, ``copy``, ``step_timeout``, ...).
    """
    options = dict(
        group_map=group_map,
        done_on_any=bool(done_on_any),
        max_episode_steps=max_episode_steps,
        agent_infos=bool(agent_infos),
    )
    if render_mode is not None:
        config = {**dict(config or {}), "render_mode": render_mode}
    return _start(shmenv.make_vec, _adapter_factory(env, config, options), num_envs, pool_options)


def from_fns(env_fns: Sequence[Callable[[], Any]], **kwargs: Any) -> MultiAgentVectorEnv:
    """One factory per env (``AsyncVectorEnv(env_fns)``'s shape); every keyword of
    :func:`make_vec` but ``num_envs`` and ``config``. All envs must have the same agents and
    spaces."""
    if isinstance(env_fns, (str, bytes)) or not isinstance(env_fns, Sequence) or not env_fns:
        raise InvalidArgumentError(f"from_fns takes a non-empty list of env factories, got {env_fns!r}")
    adapter_keys = ("group_map", "done_on_any", "max_episode_steps", "agent_infos")
    options = {k: kwargs.pop(k) for k in adapter_keys if k in kwargs}
    options.setdefault("done_on_any", False)
    options.setdefault("agent_infos", False)
    factories = [_adapter_factory(fn, None, options) for fn in env_fns]
    if all(fn is env_fns[0] for fn in env_fns):
        factories = [factories[0]] * len(factories)
    return _start(lambda fns, _n, **kw: shmenv.from_fns(fns, **kw), factories, len(env_fns), kwargs)


def _label(target: Any) -> str:
    """A name for messages and ``repr``: the entry point, or the factory's name."""
    built = target[0] if isinstance(target, list) else target
    inner = built.args[0]
    name = inner if isinstance(inner, str) else getattr(inner, "__qualname__", None) or type(inner).__name__
    return name if not isinstance(target, list) or len(set(map(id, target))) == 1 else f"{len(target)} factories"


def _start(build: Callable, target: Any, num_envs: int, pool_options: dict) -> MultiAgentVectorEnv:
    """Builds the pool and asks env 0's adapter for the agents and their spaces."""
    label = _label(target)
    autoreset = pool_options.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    pool_options = dict(pool_options, autoreset_mode=autoreset)
    pool_options.setdefault("pool_infos", True)  # env_id and elapsed_step in every result
    # The team's episode return and length: nothing else reports multi-agent episodes.
    pool_options.setdefault("episode_stats_key", "episode_stats")
    try:
        pool = build(target, num_envs, **pool_options)
    except BuildError as e:
        # These errors raised in a worker reach the trainer as the worker's message.
        text = str(e)
        for cls in (SpaceMismatchError, DuplicateAgentsError):
            marker = f"{cls.__name__}: "
            if marker in text:
                raise cls(text[text.rindex(marker) + len(marker) :].strip()) from e
        raise
    try:
        layout = pool.env_call("get", "agent_layout", [0])[0]
        # The env's own metadata (its "name", ...), as Gymnasium's vector envs give env 0's.
        env_metadata = pool.env_call("get", "metadata", [0])[0]
    except BaseException:
        pool.close()
        raise
    envs = MultiAgentVectorEnv(pool, layout, label)
    envs.metadata = {**env_metadata, **envs.metadata}
    return envs
