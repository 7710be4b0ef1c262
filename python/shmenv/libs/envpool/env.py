"""The env ``shmenv.envpool.make`` returns (EnvPool's ``GymnasiumEnvPool`` over a shmenv pool)
and its ``spec``."""

from __future__ import annotations

import collections
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from shmenv.errors import InvalidArgumentError, InvalidArgumentTypeError, UsageError
from shmenv.libs.envpool.tasks import _ATARI_INFO
from shmenv.prechecks import check_open, reset_request


class EnvSpec:
    """EnvPool's ``EnvSpec`` in short: ``config`` (a namedtuple), ``reward_threshold``, one
    env's ``observation_space`` / ``action_space`` (also as ``gymnasium_*``), and the
    dm_env specs ``observation_spec()`` / ``action_spec()`` (these need ``dm-env``)."""

    def __init__(self, task_id: str, config: dict, spaces: tuple | None = None, make_kwargs: dict | None = None):
        self.task_id = task_id
        self._config = dict(config)
        self._spaces = spaces
        self._make_kwargs = make_kwargs

    @property
    def config(self):
        return collections.namedtuple("Config", list(self._config))(**self._config)

    @property
    def reward_threshold(self) -> float | None:
        return self._config.get("reward_threshold")

    def _space(self, k: int):
        if self._spaces is None:  # make_spec: one env tells its spaces
            from shmenv.libs.envpool import make

            with make(self.task_id, "gymnasium", **{**(self._make_kwargs or {}), "num_envs": 1, "batch_size": 0}) as e:
                self._spaces = (e.observation_space, e.action_space)
        return self._spaces[k]

    observation_space = property(lambda self: self._space(0))
    action_space = property(lambda self: self._space(1))
    gymnasium_observation_space = observation_space
    gymnasium_action_space = action_space

    def observation_spec(self) -> tuple:
        """EnvPool's dm_env observation spec: ``State(env_id, players(env_id), obs, ...)``."""
        from shmenv.libs.envpool import _import_dm
        from shmenv.libs.envpool.tasks import _kind

        return _import_dm().observation_spec(_kind(self.task_id)[0], self.observation_space)

    def action_spec(self):
        """EnvPool's dm_env action spec (``DiscreteArray`` named ``action`` for a discrete action)."""
        from shmenv.libs.envpool import _import_dm

        return _import_dm().action_spec(self.action_space)

    def __repr__(self) -> str:
        return f"EnvSpec({self.task_id!r}, " + ", ".join(f"{k}={v!r}" for k, v in self._config.items()) + ")"


# --- the env -----------------------------------------------------------------------------


class EnvPoolEnv(VectorEnv, gym.Env):
    """EnvPool's ``GymnasiumEnvPool`` over a :class:`shmenv.ShmVectorEnv`."""

    spec: EnvSpec  # EnvPool's spec (above), in place of Gymnasium's ``EnvSpec | None``
    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, task_id: str, pool, config: dict, kind: str, seeds: Any):
        self._pool = pool
        self._config = config
        self._kind = kind
        self._seed_list = seeds if isinstance(seeds, list) else None
        self._has_reset = False
        self._pending: tuple | None = None  # sync mode send()/async_reset(), for recv()
        self._no_rows: tuple | None = None  # a reset's (obs, info) with no rows: reset(env_id=[])
        self.task_id = task_id
        self.num_envs = pool.num_envs
        self.observation_space = self.single_observation_space = pool.single_observation_space
        self.action_space = self.single_action_space = pool.single_action_space
        self.spec = EnvSpec(task_id, config, (self.observation_space, self.action_space))
        self.render_mode = None
        self.closed = False
        self._all_env_ids = np.arange(self.num_envs, dtype=np.int32)
        self._life_offset = None
        if kind == "atari" and config["episodic_life"]:
            self._life_offset = np.zeros(self.num_envs, np.int64)
            self._last_elapsed = np.zeros(self.num_envs, np.int64)
            self._life_lost = np.zeros(self.num_envs, np.bool_)

    # EnvPool's properties
    @property
    def config(self) -> dict[str, Any]:
        return dict(self._config)

    @property
    def all_env_ids(self) -> np.ndarray:
        return self._all_env_ids

    @property
    def is_async(self) -> bool:
        return self._pool.is_async

    @property
    def is_vector_env(self) -> bool:
        return True

    @property
    def unwrapped(self):
        return self

    def __len__(self) -> int:
        return self.num_envs

    # results, as EnvPool shapes them
    def _info(self, raw: dict, terminated: np.ndarray) -> dict[str, Any]:
        env_id = np.asarray(raw["env_id"], np.int32)
        info: dict[str, Any] = {"env_id": env_id, "players": {"env_id": env_id.copy()}}
        if self._kind == "atari":
            for key, dtype in _ATARI_INFO:
                if key in raw:
                    values = np.asarray(raw[key])
                    mask = raw.get("_" + key)
                    if mask is not None and not np.all(mask):
                        values = np.where(mask, values, 0)
                    info[key] = values.astype(dtype)
            if "terminated" not in info and "lives" in info:
                # The native plugin reports lives and reward: the game is over where the env
                # terminated with no life left (or on any termination without episodic life).
                over = terminated if not self._config["episodic_life"] else terminated & (info["lives"] == 0)
                info["terminated"] = over.astype(np.int32)
        else:
            for key, values in raw.items():  # a hosted env's own infos, without the masks
                if key in ("env_id", "elapsed_step") or key.startswith("_"):
                    continue
                mask = raw.get("_" + key)
                if isinstance(values, np.ndarray) and values.dtype != object and mask is not None and not np.all(mask):
                    values = np.where(mask.reshape(-1, *[1] * (values.ndim - 1)), values, 0)
                info[key] = values
        elapsed = np.asarray(raw["elapsed_step"], np.int32)
        if self._life_offset is not None:
            elapsed = self._whole_game_steps(self._life_offset, info, elapsed, terminated)
        info["elapsed_step"] = elapsed
        return info

    def _whole_game_steps(
        self, life_offset: np.ndarray, info: dict, elapsed: np.ndarray, terminated: np.ndarray
    ) -> np.ndarray:
        """With episodic life the pool counts the steps of one life; EnvPool's
        ``elapsed_step`` counts the game's: a reset after a lost life goes on counting
        (``life_offset``, the env's ``_life_offset``, is what each env's life adds)."""
        ids = info["env_id"]
        fresh = elapsed == 0
        cont = fresh & self._life_lost[ids]
        life_offset[ids[fresh]] = np.where(cont, self._last_elapsed[ids], 0)[fresh]
        out = (elapsed + life_offset[ids]).astype(np.int32)
        self._last_elapsed[ids] = out
        self._life_lost[ids] = terminated & (info["terminated"] == 0)
        return out

    def _step_result(self, res) -> tuple:
        obs, rew, term, trunc, raw = res
        return obs, rew, term, trunc, self._info(raw, term)

    def _reset_result(self, res, rows: np.ndarray | None = None) -> tuple:
        obs, raw = res
        info = self._info(raw, np.zeros(len(raw["env_id"]), np.bool_))
        if rows is not None:
            obs = obs[rows]
            info = _take(info, rows)
        return obs, info

    def _first_seed(self):
        if self._has_reset or self._seed_list is None:
            return None
        return self._seed_list

    # EnvPool's API
    def reset(self, env_id: np.ndarray | None = None, *, seed: Any = None, options: dict | None = None):
        """Resets every env (or, in sync mode, those in ``env_id``: only their rows are
        returned) and returns ``(obs, info)``. Seeds are fixed by ``make``, as in EnvPool:
        ``seed=`` here is ignored with a warning."""
        check_open(self.closed, "env")
        if seed is not None:
            warnings.warn(
                "EnvPool seeds are fixed when the environment is created. reset(seed=...) is ignored; "
                "pass seed to make instead.",
                stacklevel=2,
            )
        if options:
            mask, unknown = reset_request(options, self.num_envs, self.is_async)
            if unknown:
                raise InvalidArgumentError(f"unsupported reset options: {sorted(unknown)} (only 'reset_mask')")
            if env_id is not None:
                raise InvalidArgumentError("pass either env_id or options['reset_mask'], not both")
            assert mask is not None, "options without a reset_mask are all unknown options, refused above"
            env_id = np.flatnonzero(mask)
        if env_id is not None:
            env_id = self._env_ids(env_id)
        self._pending = None
        if env_id is None or (len(env_id) == self.num_envs and np.array_equal(np.sort(env_id), self._all_env_ids)):
            res = self._pool.reset(seed=self._first_seed())
            self._has_reset = True
            obs, info = self._reset_result(res)
            if self._no_rows is None:
                self._no_rows = (_rows(obs, []), _rows(info, []))
            return obs, info
        if self.is_async:
            raise UsageError("reset(env_id) of some envs is not supported in async mode; reset() resets them all")
        if not self._has_reset:
            self.reset()
        if not len(env_id):
            # EnvPool's sync reset of no env returns a batch of no rows; so does this one.
            no_rows = self._no_rows
            assert no_rows is not None, "a sync reset of every env keeps its batch of no rows"
            return _rows(no_rows[0], []), _rows(no_rows[1], [])
        mask = np.zeros(self.num_envs, np.bool_)
        mask[env_id] = True
        return self._reset_result(self._pool.reset(options={"reset_mask": mask}), rows=env_id)

    def async_reset(self) -> None:
        """Starts a reset of every env; ``recv()`` returns the results."""
        check_open(self.closed, "env")
        if self.is_async:
            if self._seed_list is not None and not self._has_reset:
                # Seeds every env; the first batch is kept for recv, the pool's recv has the rest.
                obs, info = self._reset_result(self._pool.reset(seed=self._seed_list))
                n = len(info["env_id"])
                self._pending_first = (obs, np.zeros(n, np.float32), np.zeros(n, np.bool_), np.zeros(n, np.bool_), info)
                self._has_reset = True
                self._pending = ("first", None)
                return
            self._pool.async_reset()
            self._has_reset = True
        else:
            self._check_nothing_pending("async_reset()")
            self._pending = ("reset", None)

    def send(self, action: Any, env_id: np.ndarray | None = None) -> None:
        """Hands actions to the envs in ``env_id`` (all if None)."""
        check_open(self.closed, "env")
        action = np.asarray(action)
        if self.is_async:
            self._pool.send(action, None if env_id is None else self._env_ids(env_id, check_range=False))
            return
        self._check_all(env_id)
        self._check_nothing_pending("send()")
        self._pending = ("step", action)

    def recv(self, reset: bool = False, return_info: bool = True) -> tuple:
        """The next batch: ``(obs, reward, terminated, truncated, info)``."""
        check_open(self.closed, "env")
        if self.is_async:
            if self._pending is not None and self._pending[0] == "first":
                self._pending = None
                return self._pending_first
            return self._step_result(self._pool.recv())
        pending, self._pending = self._pending, None
        if pending is None:
            raise UsageError("recv() in sync mode needs a send(action) or async_reset() first")
        if pending[0] == "reset":
            obs, info = self.reset()
            n = self.num_envs
            return obs, np.zeros(n, np.float32), np.zeros(n, np.bool_), np.zeros(n, np.bool_), info
        return self.step(pending[1])

    def step(self, action: Any, env_id: np.ndarray | None = None) -> tuple:
        """Steps the envs in ``env_id`` (all if None) and returns the next batch."""
        check_open(self.closed, "env")
        if self.is_async:
            self.send(action, env_id)
            return self.recv()
        self._check_all(env_id)
        self._check_nothing_pending("step()")
        return self._step_result(self._pool.step(np.asarray(action)))

    def seed(self, seed: Any = None) -> None:
        warnings.warn("seed() is abandoned, as in EnvPool: pass seed to make(..., seed=seed)", stacklevel=2)

    def render(self, *args: Any, **kwargs: Any):
        raise UsageError("render is not supported by shmenv.envpool")

    def xla(self):
        raise UsageError("xla() is not available in shmenv (EnvPool's XLA interface needs its C++ pool)")

    def close(self, **kwargs: Any) -> None:
        if not self.closed:
            self.closed = True
            self._pool.close()

    def __del__(self):
        if not getattr(self, "closed", True):
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self._config.items()) + ")"

    __str__ = __repr__

    def _check_all(self, env_id) -> None:
        if env_id is not None and not np.array_equal(self._env_ids(env_id), self._all_env_ids):
            raise InvalidArgumentError(
                f"in sync mode every env steps together: env_id must be None or all env ids (0 to "
                f"{self.num_envs - 1}, in order), got {np.asarray(env_id).tolist()}; pass env_id=None"
            )

    def _check_nothing_pending(self, call: str) -> None:
        """Sync mode holds one pending ``send()`` or ``async_reset()`` until ``recv()``: a
        second one would replace it (dropping its actions), so it is refused, as the async
        mode refuses a second action to an env with one in flight."""
        if self._pending is not None:
            what = "send(actions)" if self._pending[0] == "step" else "async_reset()"
            raise UsageError(
                f"{call} after {what} without recv(): in sync mode {what} waits for recv(), which returns its "
                f"batch; call recv() first (a second call would drop the pending one)"
            )

    def _env_ids(self, env_id: Any, check_range: bool = True) -> np.ndarray:
        """``env_id`` as a 1-D int array (a scalar is one id, as in EnvPool), refused with a
        typed error unless its values are integers from 0 to ``num_envs - 1`` (the pool
        range-checks itself when ``check_range`` is False)."""
        ids = np.asarray(env_id)
        if ids.ndim == 0:
            ids = ids.reshape(1)
        if ids.size == 0:
            return np.zeros(0, np.int32)
        valid = f"env ids are ints from 0 to {self.num_envs - 1}"
        if ids.dtype.kind not in "iu":
            raise InvalidArgumentTypeError(
                f"env_id must hold integers ({valid}), got {ids.tolist()!r} (dtype {ids.dtype}): pass an int "
                "array such as info['env_id'] or np.array([...], dtype=np.int32); a float id is not truncated"
            )
        if ids.ndim != 1:
            raise InvalidArgumentError(f"env_id must be one id or a 1-D array of ids ({valid}), got shape {ids.shape}")
        if check_range and (ids.min() < 0 or ids.max() >= self.num_envs):
            bad = ids[(ids < 0) | (ids >= self.num_envs)].tolist()
            raise InvalidArgumentError(f"env_id {bad} out of range: {valid} (num_envs={self.num_envs})")
        return ids if ids.dtype in (np.int32, np.int64) else ids.astype(np.int64)


def _take(info: dict, rows: np.ndarray) -> dict:
    return {k: (_take(v, rows) if isinstance(v, dict) else v[rows]) for k, v in info.items()}


def _rows(value: Any, rows: Any) -> Any:
    """``value`` (an array, or a dict or tuple of them) at ``rows``: new arrays."""
    if isinstance(value, dict):
        return {k: _rows(v, rows) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_rows(v, rows) for v in value)
    return value[np.asarray(rows, np.int64)]
