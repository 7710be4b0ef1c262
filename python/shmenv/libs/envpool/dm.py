"""EnvPool's dm_env API (``make(..., env_type="dm")``) over a shmenv pool.

The results are EnvPool 1.2.5's: ``dm_env.TimeStep(step_type, reward, discount,
observation)`` with ``step_type`` int32 (0 FIRST, 1 MID, 2 LAST), ``reward`` and
``discount`` float32, and ``observation`` a namedtuple ``State(env_id, players(env_id),
obs, ...)`` plus ``lives``, ``reward`` and ``terminated`` for Atari. As in EnvPool, every
episode end (termination or time limit) has discount 0, and the row after it is the next
episode's FIRST step (reward 0, discount 1). This module imports ``dm_env``;
``shmenv.envpool.make_dm`` checks it is installed first.
"""

from __future__ import annotations

import collections
import keyword
import re
from typing import Any

import dm_env
import numpy as np
from dm_env import specs

from shmenv.errors import InvalidArgumentError
from shmenv.libs.envpool.env import EnvPoolEnv

FIRST, MID, LAST = 0, 1, 2

_INT32 = np.iinfo(np.int32)
#: EnvPool 1.2.5's specs of its State entries other than ``obs`` (Atari's ``ram`` is not reported).
_INFO_SPECS = {
    "lives": lambda: specs.BoundedArray((), np.int32, _INT32.min, _INT32.max, "lives"),
    # EnvPool's bounds for the raw reward: float32's smallest positive normal to its max.
    "reward": lambda: specs.BoundedArray((), np.float32, np.finfo(np.float32).tiny, np.finfo(np.float32).max, "reward"),
    "terminated": lambda: specs.DiscreteArray(2, np.int32, "terminated"),
}


def _field(key: str) -> str:
    """A namedtuple field name for ``key``, as EnvPool's ``to_namedtuple`` makes it."""
    field = re.sub(r"\W", "_", key)
    if not field or field[0].isdigit() or keyword.iskeyword(field):
        field = f"_{field}"
    return field


class _Tuples:
    """The namedtuple types of one env's observations, made once per key set."""

    def __init__(self) -> None:
        self._types: dict[tuple, type] = {}

    def make(self, name: str, entries: dict[str, Any]) -> tuple:
        keys = tuple(entries)
        cls = self._types.get((name, keys))
        if cls is None:
            cls = collections.namedtuple(_field(name), [_field(k) for k in keys])
            self._types[(name, keys)] = cls
        return cls(*(self.make(k, v) if isinstance(v, dict) else v for k, v in entries.items()))


# --- specs -------------------------------------------------------------------------------


def space_to_spec(space: Any, name: str, action: bool = False) -> Any:
    """A Gymnasium space as the dm_env spec EnvPool gives for it: ``Discrete`` from 0 is a
    ``DiscreteArray`` (int32 for actions), other spaces ``BoundedArray``; a ``Dict`` is a
    dict of specs."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {k: space_to_spec(s, k, action) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Discrete):
        start, n = int(space.start), int(space.n)
        dtype = np.int32 if action or not np.issubdtype(space.dtype, np.integer) else space.dtype
        if start == 0:
            return specs.DiscreteArray(n, dtype, name)
        return specs.BoundedArray((), dtype, start, start + n - 1, name)
    if isinstance(space, spaces.Box):
        return specs.BoundedArray(
            space.shape, space.dtype, _scalar_if_uniform(space.low), _scalar_if_uniform(space.high), name
        )
    if isinstance(space, spaces.MultiDiscrete):
        return specs.BoundedArray(space.shape, space.dtype, space.start, space.start + space.nvec - 1, name)
    if isinstance(space, spaces.MultiBinary):
        return specs.BoundedArray(space.shape, space.dtype, 0, 1, name)
    raise InvalidArgumentError(
        f"{name}: the dm_env API maps Box, Discrete, MultiDiscrete, MultiBinary and Dict spaces, got {space}; "
        "use env_type='gymnasium' for this env"
    )


def _scalar_if_uniform(bound: np.ndarray) -> Any:
    """A bound equal everywhere as one scalar (as EnvPool's specs give Atari's 0 and 255)."""
    flat = np.asarray(bound).reshape(-1)
    return flat[0] if flat.size and np.all(flat == flat[0]) else bound


def _obs_entries(space: Any, value: Any) -> dict[str, Any]:
    """``obs`` for a plain observation; a Dict observation's entries as State fields (EnvPool
    puts its ``obs:<key>`` entries at the top of State)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return dict(value)
    return {"obs": value}


def observation_spec(kind: str, obs_space: Any) -> tuple:
    """EnvPool's ``observation_spec()``: ``State(env_id, players(env_id), obs, ...)``."""
    env_id = specs.BoundedArray((), np.int32, _INT32.min, _INT32.max, "env_id")
    entries: dict[str, Any] = {
        "env_id": env_id,
        "players": {"env_id": specs.BoundedArray((), np.int32, _INT32.min, _INT32.max, "env_id")},
    }
    entries.update(_obs_entries(obs_space, space_to_spec(obs_space, "obs")))
    if kind == "atari":
        entries.update({key: make() for key, make in _INFO_SPECS.items()})
    return _Tuples().make("State", entries)


def action_spec(action_space: Any) -> Any:
    """EnvPool's ``action_spec()``: one spec named ``action``."""
    spec = space_to_spec(action_space, "action", action=True)
    return _Tuples().make("Action", spec) if isinstance(spec, dict) else spec


# --- the env -----------------------------------------------------------------------------


class DMEnvPoolEnv(dm_env.Environment):
    """EnvPool's ``DMEnvPool`` over a shmenv pool: ``reset(env_id=None)``,
    ``step(action, env_id=None)``, ``async_reset()``, ``send(action, env_id=None)`` and
    ``recv()`` return ``dm_env.TimeStep`` batches; ``observation_spec()``,
    ``action_spec()``, ``config``, ``spec``, ``all_env_ids``, ``is_async``, ``close()``.

    It drives an :class:`EnvPoolEnv` (the Gymnasium-type env, which has the pool, the
    seeds, the async calls and the infos) and turns its results into time steps."""

    def __init__(self, env: EnvPoolEnv):
        self._env = env
        n = env.num_envs
        self._kind = env._kind
        self._zero_on_life_loss = self._kind == "atari" and bool(env.config["zero_discount_on_life_loss"])
        self._ended = np.zeros(n, np.bool_)  # the env's next row starts an episode (FIRST)
        self._lives = np.zeros(n, np.int64)
        self._tuples = _Tuples()
        self._obs_space = env.single_observation_space
        self._observation_spec = observation_spec(self._kind, self._obs_space)
        self._action_spec = action_spec(env.single_action_space)

    # EnvPool's attributes
    task_id = property(lambda self: self._env.task_id)
    config = property(lambda self: self._env.config)
    spec = property(lambda self: self._env.spec)
    all_env_ids = property(lambda self: self._env.all_env_ids)
    is_async = property(lambda self: self._env.is_async)
    closed = property(lambda self: self._env.closed)

    def __len__(self) -> int:
        return self._env.num_envs

    def observation_spec(self) -> tuple:
        """``State`` (a namedtuple) of dm_env specs, as EnvPool's."""
        return self._observation_spec

    def action_spec(self) -> Any:
        """The action's dm_env spec (``DiscreteArray`` for a discrete action), as EnvPool's."""
        return self._action_spec

    # results
    def _observation(self, obs: Any, info: dict) -> tuple:
        entries: dict[str, Any] = {"env_id": info["env_id"], "players": info["players"]}
        entries.update(_obs_entries(self._obs_space, obs))
        if self._kind == "atari":
            entries.update({key: info[key] for key in _INFO_SPECS if key in info})
        return self._tuples.make("State", entries)

    def _first(self, obs: Any, info: dict) -> dm_env.TimeStep:
        ids = info["env_id"]
        n = len(ids)
        self._ended[ids] = False
        if "lives" in info:
            self._lives[ids] = info["lives"]
        return dm_env.TimeStep(
            step_type=np.full(n, FIRST, np.int32),
            reward=np.zeros(n, np.float32),
            discount=np.ones(n, np.float32),
            observation=self._observation(obs, info),
        )

    def _timestep(self, result: tuple) -> dm_env.TimeStep:
        obs, reward, terminated, truncated, info = result
        ids = info["env_id"]
        first = self._ended[ids]
        end = (terminated | truncated) & ~first
        step_type = np.where(first, FIRST, np.where(end, LAST, MID)).astype(np.int32)
        discount = (~end).astype(np.float32)  # EnvPool: 0 at every episode end, time limits too
        if "lives" in info:
            lives = info["lives"]
            if self._zero_on_life_loss:
                discount[(lives < self._lives[ids]) & ~first] = 0.0
            self._lives[ids] = lives
        self._ended[ids] = end
        reward = np.asarray(reward, np.float32)  # 0 on FIRST rows (the pool's auto-reset rows)
        return dm_env.TimeStep(step_type, reward, discount, self._observation(obs, info))

    # EnvPool's calls
    def reset(self, env_id: np.ndarray | None = None) -> dm_env.TimeStep:
        """Resets every env (or, in sync mode, those in ``env_id``, whose rows only are
        returned): a FIRST time step."""
        if env_id is not None and not self._env._has_reset:
            self.reset()  # the first reset is of every env, as EnvPoolEnv's
        obs, info = self._env.reset(env_id)
        return self._first(obs, info)

    def step(self, action: Any, env_id: np.ndarray | None = None) -> dm_env.TimeStep:
        """Steps the envs in ``env_id`` (all if None); an env whose previous step was LAST
        starts its next episode (a FIRST row, reward 0, discount 1)."""
        return self._timestep(self._env.step(action, env_id))

    def async_reset(self) -> None:
        """Starts a reset of every env; ``recv()`` returns FIRST rows."""
        self._ended[:] = True
        self._env.async_reset()

    def send(self, action: Any, env_id: np.ndarray | None = None) -> None:
        """Hands actions to the envs in ``env_id`` (all if None)."""
        self._env.send(action, env_id)

    def recv(self, reset: bool = False, return_info: bool = True) -> dm_env.TimeStep:
        """The next batch as a ``TimeStep``."""
        return self._timestep(self._env.recv())

    def seed(self, seed: Any = None) -> None:
        self._env.seed(seed)

    def render(self, *args: Any, **kwargs: Any):
        return self._env.render(*args, **kwargs)

    def xla(self):
        return self._env.xla()

    def close(self) -> None:
        """Stops the workers."""
        self._env.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self.config.items()) + ")"

    __str__ = __repr__
