"""``AgentRowsVecEnv``: multi-agent envs as a Stable-Baselines3 ``VecEnv`` with each agent
a row (``num_envs * num_agents`` rows: one policy shared by every agent), what SuperSuit's
``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), n, base_class="stable_baselines3")``
gives, stepped in shmenv's workers.

>>> from shmenv.multiagent.sb3 import AgentRowsVecEnv
>>> venv = AgentRowsVecEnv("mpe2.simple_spread_v3", 4, num_workers=2, seed=0)
>>> venv.reset().shape              # 4 envs x 3 agents
(12, 18)
>>> venv.close()

Rows, flags and dead agents follow :mod:`shmenv.multiagent.flat`. SB3's conventions on top:
same-step autoreset; ``dones`` is a row's ``terminated or truncated``; a done row's
``infos[r]["terminal_observation"]`` is its agent's last observation (an agent that left
while its env goes on: the returned row is already the zeros that follow) and
``infos[r]["TimeLimit.truncated"]`` says it was truncated; ``infos[r]["episode"] = {"r",
"l", "t"}`` is the row's return and length since its last done (what SB3's ``VecMonitor``
computes over the rows). ``get_attr``/``env_method``/``set_attr`` reach the env of each row
(the adapter in its worker; the PettingZoo env is its ``par_env``).

As SuperSuit's ``concat_vec_envs_v1``, it also takes a PettingZoo env *instance* (what
PettingZoo's SB3 tutorials build, ``black_death_v3`` and other wrappers applied): it is
pickled (with cloudpickle) once and each env is an unpickled copy, built in its worker; an
instance that does not pickle is refused, naming the fix (pass a factory). ``metadata``
is the PettingZoo env's (``metadata["name"]``, which the tutorials read), with SB3's
``render_modes``.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import cloudpickle
import numpy as np

from shmenv.arguments import start_method as check_start_method
from shmenv.errors import InvalidArgumentError
from shmenv.libs.sb3 import _Base, renamed_errors
from shmenv.multiagent.flat import AgentRowsVectorEnv, make_agent_vec
from shmenv.multiagent.vector import from_fns

__all__ = ["AgentRowsVecEnv"]


class AgentRowsVecEnv(_Base):
    """An SB3 ``VecEnv`` (SB3's own base class when SB3 is installed) over
    :func:`shmenv.multiagent.make_agent_vec`: ``env``, ``num_envs`` and the keywords are
    :func:`shmenv.multiagent.make_vec`'s (``autoreset_mode`` is SB3's same step)."""

    def __init__(self, env: Any, num_envs: int | None = None, start_method: str | None = None, **kwargs: Any):
        check_start_method("AgentRowsVecEnv", start_method)
        kwargs.pop("autoreset_mode", None)
        with renamed_errors("AgentRowsVecEnv"):
            if isinstance(env, (list, tuple)):
                # SubprocVecEnv's shape: one thunk per env (each returning a PettingZoo env).
                if num_envs is not None and num_envs != len(env):
                    raise InvalidArgumentError(
                        f"AgentRowsVecEnv got {len(env)} env thunks and num_envs={num_envs}: a list runs one env per "
                        "thunk, drop num_envs"
                    )
                self.rows = AgentRowsVectorEnv(from_fns(env, autoreset_mode="same_step", **kwargs))
            else:
                n = 1 if num_envs is None else num_envs
                if hasattr(env, "possible_agents") and not callable(env):
                    env = EnvCopy(env)
                self.rows = make_agent_vec(env, n, autoreset_mode="same_step", **kwargs)
        self._actions: Any = None
        rows = self.rows.num_envs
        self._returns = np.zeros(rows, np.float64)
        self._lengths = np.zeros(rows, np.int64)
        self._t0 = np.full(rows, time.perf_counter())
        super().__init__(rows, self.rows.single_observation_space, self.rows.single_action_space)
        self.render_mode = self.rows.render_mode
        # The PettingZoo env's metadata (SuperSuit's VecEnv gives it: tutorials read "name").
        env_metadata = {k: v for k, v in self.rows.metadata.items() if k != "autoreset_mode"}
        self.metadata = {**env_metadata, "render_modes": self.metadata.get("render_modes", [])}

    def reset(self) -> Any:
        """Resets every env (seeded by :meth:`seed`: env ``i`` gets ``seed + i``)."""
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        obs, _ = self.rows.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._returns[:] = 0
        self._lengths[:] = 0
        self._t0[:] = time.perf_counter()
        return obs

    def step_async(self, actions: Any) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict]]:
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async(actions)")
        obs, rewards, terminated, truncated, infos = self.rows.step(self._actions)
        self._actions = None
        dones = np.logical_or(terminated, truncated)
        self._returns += rewards
        self._lengths += 1
        row_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            now = time.perf_counter()
            final = infos.get("final_obs")
            obs = _writable(obs)
            for r in np.flatnonzero(dones):
                info = row_infos[r]
                last = final[r] if final is not None else None
                # An agent that left while its env goes on: its row continues with zeros.
                info["terminal_observation"] = last if last is not None else _take_row(obs, int(r))
                info["TimeLimit.truncated"] = bool(truncated[r] and not terminated[r])
                info["episode"] = {
                    "r": float(self._returns[r]),
                    "l": int(self._lengths[r]),
                    "t": round(now - self._t0[r], 6),
                }
            self._returns[dones], self._lengths[dones], self._t0[dones] = 0.0, 0, now
        return obs, rewards, dones, row_infos

    def close(self) -> None:
        self.rows.close()

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seeds the next ``reset()``: env ``i`` (rows ``i * num_agents ...``) gets ``seed + i``."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._seeds = [seed + r // self.rows.num_agents for r in range(self.num_envs)]
        return self._seeds

    def _envs_of(self, indices: Any) -> list[int]:
        rows = range(self.num_envs) if indices is None else [indices] if isinstance(indices, int) else indices
        return [int(r) // self.rows.num_agents for r in rows]

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """Attribute ``attr_name`` of each row's env (its adapter)."""
        envs = self._envs_of(indices)
        values = self.rows.envs.pool.env_call("get", attr_name, sorted(set(envs)))
        by_env = dict(zip(sorted(set(envs)), values))
        return [by_env[e] for e in envs]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        """Sets ``attr_name`` on each row's env (once per env)."""
        envs = sorted(set(self._envs_of(indices)))
        self.rows.envs.pool.env_call("set", attr_name, envs, values=[value] * len(envs))

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list:
        """Calls ``method_name`` on each row's env (once per env; its result on each of
        its rows)."""
        envs = self._envs_of(indices)
        unique = sorted(set(envs))
        values = self.rows.envs.pool.env_call("call", method_name, unique, args=method_args, kwargs=method_kwargs)
        by_env = dict(zip(unique, values))
        return [by_env[e] for e in envs]

    def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> list[bool]:
        """False for every row: the adapters are not Gymnasium wrappers of SB3's."""
        return [False for _ in self._envs_of(indices)]

    def __enter__(self) -> "AgentRowsVecEnv":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the worker processes."""
        return self.rows.envs.worker_pids


class EnvCopy:
    """Builds a copy of a PettingZoo env instance in a worker: the instance is pickled with
    cloudpickle here and unpickled there, once per env (SuperSuit's ``concat_vec_envs_v1``
    copies its env the same way)."""

    def __init__(self, env: Any):
        try:
            self.blob = cloudpickle.dumps(env)
        except Exception as e:  # pickling raises whatever the env's members raise
            raise InvalidArgumentError(
                f"AgentRowsVecEnv got a {type(env).__name__} instance that cannot be pickled "
                f"({type(e).__name__}: {e}); each env is a copy of it built in a worker process: pass a factory "
                "that builds the env there instead (lambda: black_death_v3(my_env.parallel_env(...))), or "
                "the env module's name with config={...}"
            ) from e
        metadata = getattr(env, "metadata", None) or {}
        self.__qualname__ = str(metadata.get("name") or type(env).__name__)

    def __call__(self) -> Any:
        return cloudpickle.loads(self.blob)


def _writable(obs: Any) -> Any:
    """``obs`` with every array writable (views of the shared memory, ``copy=False``, are
    copied)."""
    if isinstance(obs, dict):
        return {k: _writable(v) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_writable(v) for v in obs)
    return obs if obs.flags.writeable else np.array(obs)


def _take_row(obs: Any, r: int) -> Any:
    """A copy of row ``r`` of ``obs``, whose row is then zeroed."""
    if isinstance(obs, dict):
        return {k: _take_row(v, r) for k, v in obs.items()}
    if isinstance(obs, tuple):
        return tuple(_take_row(v, r) for v in obs)
    row = np.array(obs[r])
    obs[r] = 0
    return row
