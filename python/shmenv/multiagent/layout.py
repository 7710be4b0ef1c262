"""How a multi-agent env's agents become fixed-size arrays: agents in groups (each group's
agents in a fixed order), each group's per-agent spaces stacked along an agent axis, and
the conversions between per-agent dicts and stacked arrays.

A group's agents must have equal observation spaces and equal action spaces (they are
rows of one array); :class:`SpaceMismatchError` names the agents and spaces otherwise.
Each agent is listed once in ``possible_agents`` (:class:`DuplicateAgentsError`), and each
agent's value must have its space's shape exactly (:class:`AgentDataError`: a scalar is
not broadcast into a ``(4,)`` row).
A group's stacked space of a per-agent space of shape ``S`` has shape ``[A, *S]``:

=====================  ===========================================================
per agent              stacked over ``A`` agents
=====================  ===========================================================
``Box(shape S)``       ``Box(shape [A, *S])``, the same bounds for every agent row
``Discrete(n, start)`` ``MultiDiscrete([n] * A, start=[start] * A)``
``MultiDiscrete(nvec)`` ``MultiDiscrete`` of shape ``[A, *nvec.shape]``
``MultiBinary(S)``     ``MultiBinary([A, *S])``
``Dict``/``Tuple``     the same ``Dict``/``Tuple`` of stacked leaves
=====================  ===========================================================
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
from gymnasium import spaces

from shmenv.errors import BuildError, InvalidArgumentError, WorkerError

GroupMap = dict[str, list[str]]
"""Group name -> the group's agents, in their order along the group's agent axis."""

GROUPINGS = ("all", "by_name", "one_per_agent")
"""The group maps made from the agents alone: ``"all"`` (one group ``"agents"``, every
agent in ``possible_agents`` order: the default), ``"by_name"`` (TorchRL's default for
PettingZoo's parallel envs: ``"adversary_0"`` and ``"adversary_1"`` in group
``"adversary"``, a name without a ``_<int>`` suffix a group of its own),
``"one_per_agent"``."""


class SpaceMismatchError(BuildError, ValueError):
    """Agents put in one group (stacked along one agent axis) have different observation or
    action spaces. ``group``, ``agents`` and ``spaces`` (agent -> space) say which."""

    group: str
    agents: list
    spaces: dict


class DuplicateAgentsError(BuildError, ValueError):
    """The env's ``possible_agents`` names an agent more than once (each agent is one row
    along its group's agent axis and one key of the step's dicts). The message names the
    duplicates."""


class AgentDataError(WorkerError, ValueError):
    """A multi-agent env returned per-agent data that does not fit its agents: an agent
    that is not in ``possible_agents`` (in ``env.agents`` after ``reset``/``step``, or a key
    of the step's rewards, terminations or truncations), or an agent's observation whose
    shape is not its space's. Raised in the worker; the trainer gets it as this class, a
    :class:`shmenv.WorkerError` (``env_id``, ``worker``, ``traceback``), and, as after any
    env failure in a step, the pool is closed. The message names the agent."""

    @classmethod
    def from_worker(cls, err: WorkerError) -> "AgentDataError | None":
        """The error an :class:`AgentDataError` raised in a worker reaches the trainer as
        (a :class:`shmenv.WorkerError` whose traceback ends with it), retyped; None for
        any other worker error."""
        text = getattr(err, "traceback", None) or str(err)
        marker = f"{cls.__name__}: "
        if marker not in text:
            return None
        message = text[text.rindex(marker) + len(marker) :].strip()
        env_id = getattr(err, "env_id", None)
        typed = cls(f"env {env_id}: {message}" if env_id is not None else message)
        typed.env_id, typed.worker = env_id, getattr(err, "worker", None)
        typed.traceback = getattr(err, "traceback", None)
        return typed


def check_possible_agents(agents: Sequence[str]) -> None:
    """Refuses ``possible_agents`` that name an agent more than once."""
    seen: set = set()
    duplicates = [a for a in agents if a in seen or seen.add(a)]
    if duplicates:
        raise DuplicateAgentsError(
            f"the env's possible_agents {list(agents)} name {sorted(set(duplicates), key=str)} more than once: each "
            "agent is one row along the agent axis and one key of the step's dicts, so list every agent once "
            "(fix possible_agents in the env)"
        )


def check_group_names(spec: Mapping) -> None:
    """Refuses a ``group_map`` dict with two keys that are one group name as strings
    (``1`` and ``"1"``): group names are strings (the arrays are keyed by them)."""
    seen: dict[str, Any] = {}
    for name in spec:
        if str(name) in seen:
            raise InvalidArgumentError(
                f"group_map has the keys {seen[str(name)]!r} and {name!r}, which are the same group name "
                f"{str(name)!r} (group names are strings: the arrays are keyed by them); merge the two groups or "
                "rename one"
            )
        seen[str(name)] = name


def by_name(agents: Sequence[str]) -> GroupMap:
    """TorchRL's default grouping of a PettingZoo parallel env's agents (its
    ``PettingZooWrapper._get_default_group_map``): ``"name_<int>"`` goes to group
    ``"name"``, any other name is a group of its own."""
    groups: GroupMap = {}
    for agent in agents:
        head, sep, tail = agent.rpartition("_")
        try:
            int(tail)
            numbered = bool(sep)
        except ValueError:
            numbered = False
        groups.setdefault(head if numbered else agent, []).append(agent)
    return groups


def group_map_of(spec: str | Mapping[str, Sequence[str]] | None, agents: Sequence[str]) -> GroupMap:
    """The group map ``spec`` names: None or one of :data:`GROUPINGS`, or a dict of group
    name -> agents, checked (every agent of ``possible_agents`` in exactly one group)."""
    agents = list(agents)
    if spec is None or spec == "all":
        return {"agents": agents}
    if spec == "by_name":
        return by_name(agents)
    if spec == "one_per_agent":
        return {agent: [agent] for agent in agents}
    if isinstance(spec, str) or not isinstance(spec, Mapping):
        raise ValueError(
            f"group_map must be None, one of {list(GROUPINGS)} or a dict of group name -> list of agents; got {spec!r}"
        )
    check_group_names(spec)
    groups = {str(name): list(members) for name, members in spec.items()}
    seen: dict[str, str] = {}
    for name, members in groups.items():
        if not name or "/" in name or not members:
            raise ValueError(
                f"group_map: group {name!r} must have a non-empty name without '/' and at least one agent; "
                f"got {members!r}"
            )
        for agent in members:
            if agent not in agents:
                raise ValueError(
                    f"group_map: group {name!r} names {agent!r}, which is not one of the env's possible_agents {agents}"
                )
            if agent in seen:
                raise ValueError(
                    f"group_map: {agent!r} is in groups {seen[agent]!r} and {name!r}; each agent "
                    "must be in exactly one group"
                )
            seen[agent] = name
    missing = [a for a in agents if a not in seen]
    if missing:
        raise ValueError(
            f"group_map: the agents {missing} are in no group; every one of possible_agents {agents} "
            "must be in exactly one"
        )
    return groups


def check_group_spaces(groups: GroupMap, observation_space: Callable, action_space: Callable) -> None:
    """Refuses a group whose agents' observation spaces, or action spaces, differ."""
    for name, members in groups.items():
        for what, space_of in (("observation", observation_space), ("action", action_space)):
            found = {agent: space_of(agent) for agent in members}
            first = found[members[0]]
            odd = [agent for agent in members if found[agent] != first]
            if odd:
                listed = "; ".join(f"{agent}: {found[agent]}" for agent in members)
                err = SpaceMismatchError(
                    f"the agents of group {name!r} must have equal {what} spaces to be stacked along one agent "
                    f"axis, but {odd[0]!r} has {found[odd[0]]} where {members[0]!r} has {first} ({listed}). "
                    "Pass group_map='by_name' or a dict {group: [agents]} of agents with equal spaces (the "
                    "arrays are then keyed by group), or pad the spaces inside the env factory (SuperSuit's "
                    "pad_observations_v0 / pad_action_space_v0)"
                )
                err.group, err.agents, err.spaces = name, list(members), found
                raise err


def stack_space(space: spaces.Space, n: int) -> spaces.Space:
    """``space`` stacked ``n`` times along a leading agent axis (see the module's table)."""
    if isinstance(space, spaces.Box):
        low = np.broadcast_to(space.low, (n, *space.shape)).copy()
        high = np.broadcast_to(space.high, (n, *space.shape)).copy()
        return spaces.Box(low=low, high=high, dtype=space.dtype)
    if isinstance(space, spaces.Discrete):
        return spaces.MultiDiscrete(np.full(n, space.n, np.int64), start=np.full(n, space.start, np.int64))
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.broadcast_to(space.nvec, (n, *space.nvec.shape)).copy()
        start = np.broadcast_to(space.start, (n, *space.nvec.shape)).copy()
        return spaces.MultiDiscrete(nvec, dtype=space.dtype, start=start)
    if isinstance(space, spaces.MultiBinary):
        return spaces.MultiBinary([n, *space.shape])
    if isinstance(space, spaces.Dict):
        return spaces.Dict({key: stack_space(sub, n) for key, sub in space.spaces.items()})
    if isinstance(space, spaces.Tuple):
        return spaces.Tuple(tuple(stack_space(sub, n) for sub in space.spaces))
    raise TypeError(
        f"{space} cannot be stacked along an agent axis: shmenv's workers write fixed-size arrays, so per-agent "
        "spaces must be Box, Discrete, MultiDiscrete, MultiBinary, or Dict/Tuple of those"
    )


def _leaf_dtype(space: spaces.Space) -> np.dtype:
    return np.dtype(np.int64) if isinstance(space, spaces.Discrete) else np.dtype(space.dtype)


def stack_values(
    space: spaces.Space, agents: Sequence[str], values: Mapping[str, Any], what: str = "observation"
) -> Any:
    """The agents' values of per-agent ``space`` as arrays of the stacked space, rows in
    ``agents`` order: zeros for an agent with no value; keys of ``values`` that are not in
    ``agents`` are ignored (PettingZoo lets observations hold other keys, ``"common"``).
    Raises :class:`AgentDataError` for a value whose shape is not the space's (``what``
    names the value in the message)."""
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        subs: dict[Any, spaces.Space] = (
            dict(space.spaces) if isinstance(space, spaces.Dict) else dict(enumerate(space.spaces))
        )
        keys = list(subs)
        parts = {key: {a: _part(values[a], key, a, what) for a in agents if a in values} for key in keys}
        stacked = [stack_values(subs[key], agents, parts[key], f"{what}[{key!r}]") for key in keys]
        return dict(zip(keys, stacked)) if isinstance(space, spaces.Dict) else tuple(stacked)
    dtype, shape = _leaf_dtype(space), tuple(space.shape or ())
    out = np.zeros((len(agents), *shape), dtype=dtype)
    for i, agent in enumerate(agents):
        if agent in values:
            value = np.asarray(values[agent], dtype=dtype)
            if value.shape != shape:
                raise AgentDataError(
                    f"the {what} of agent {agent!r} has shape {value.shape}, but its space {space} has shape {shape}: "
                    f"return a value of shape {shape} for each agent (shmenv does not broadcast or reshape it)"
                )
            out[i] = value
    return out


def _part(value: Any, key: Any, agent: str, what: str) -> Any:
    """Part ``key`` of an agent's ``Dict``/``Tuple`` value."""
    try:
        return value[key]
    except (KeyError, IndexError, TypeError) as e:
        raise AgentDataError(
            f"the {what} of agent {agent!r} has no part {key!r} ({type(value).__name__} {value!r:.200}): return "
            "a value with every part of the agent's space"
        ) from e


def agent_value(space: spaces.Space, stacked: Any, row: int) -> Any:
    """Row ``row`` of a stacked value of per-agent ``space``, as the agent takes it
    (a Discrete value as ``np.int64``, as Gymnasium's vector envs hand them out)."""
    if isinstance(space, spaces.Dict):
        return {key: agent_value(sub, stacked[key], row) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(agent_value(sub, stacked[i], row) for i, sub in enumerate(space.spaces))
    value = stacked[row]
    return np.int64(value) if isinstance(space, spaces.Discrete) else value


FIELDS = ("observation", "reward", "terminated", "truncated", "active")
"""The arrays of each group in the adapter's observation, in this order."""


def group_observation_space(agent_space: spaces.Space, n: int) -> spaces.Dict:
    """A group's part of the adapter's observation: the stacked observations and the
    per-agent reward (float32), terminated, truncated and active (bool) columns."""
    return spaces.Dict(
        {
            "observation": stack_space(agent_space, n),
            "reward": spaces.Box(-np.inf, np.inf, (n,), np.float32),
            "terminated": _flags(n),
            "truncated": _flags(n),
            "active": _flags(n),
        }
    )


def _flags(n: int) -> spaces.Box:
    """A column of ``n`` bools."""
    # Gymnasium's Box takes a bool dtype (its own flag spaces use one), but its annotations
    # list only integer and float scalar types: the stub is narrower than the class.
    return spaces.Box(0, 1, (n,), np.bool_)  # pyright: ignore[reportArgumentType, reportCallIssue]


def describe(groups: GroupMap, observation_space: Callable, action_space: Callable) -> dict:
    """What the trainer needs to know of the agents, as plain picklable values: the groups,
    and each group's per-agent observation and action space."""
    return {
        "groups": {name: list(members) for name, members in groups.items()},
        "observation_spaces": {name: observation_space(members[0]) for name, members in groups.items()},
        "action_spaces": {name: action_space(members[0]) for name, members in groups.items()},
    }
