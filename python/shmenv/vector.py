"""``shmenv.make_vec``: a Gymnasium ``VectorEnv`` whose envs live in worker processes and
whose observations are numpy views of the shared memory they write into."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Sequence

import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.vector.vector_env import AutoresetMode

from shmenv import _shmenv
from shmenv.errors import ActionError, ClosedError, InvalidArgumentError
from shmenv.resolve import resolve
from shmenv.spaces import dtype_of, observation_space, space_from_json

__all__ = ["make_vec", "ShmVectorEnv", "python_worker_command"]


def python_worker_command() -> tuple[str, list[str], list[tuple[str, str]]]:
    """How a Python worker starts: this interpreter, ``-m shmenv.worker``, with this
    process's ``sys.path`` so that the same packages import the same way."""
    paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    env = [("PYTHONPATH", os.pathsep.join(dict.fromkeys(paths)))]
    return sys.executable, ["-m", "shmenv.worker"], env


class ShmVectorEnv(VectorEnv):
    """A Gymnasium vector env over shmenv worker processes. Made by :func:`make_vec`.

    Zero-copy contract (``copy=False``, the default): the arrays ``reset``/``step``/``recv``
    return are read-only numpy views of the shared region. They stay valid until the call
    after next (results alternate between two blocks, so ``obs`` from the previous step is
    still intact while you hold ``next_obs``); copy what you keep longer. ``copy=True``
    returns owned, writable arrays. Views never dangle: each holds the mapping alive, even
    after ``close()``.
    """

    def __init__(
        self,
        env: Any,
        num_envs: int,
        *,
        num_workers: int | None = None,
        envs_per_worker: int | None = None,
        batch_size: int | None = None,
        seed: int | None = None,
        config: dict | None = None,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        copy: bool = False,
        worker_program: str | os.PathLike | None = None,
        max_episode_steps: int | None = None,
        wait: str = "auto",
        ring_depth: int = 2,
        pin_workers: bool = True,
        episode_stats_key: str = "episode_stats",
        step_timeout: float | None = None,
        max_restarts: int | None = None,
    ):
        self.closed = True  # until the pool exists, so __del__ has nothing to close
        self._calls = None
        mode = _autoreset_mode(autoreset_mode)
        resolved = resolve(env, config)  # every argument mistake is raised here, before workers start
        num_envs = int(num_envs)
        if envs_per_worker is not None:
            if num_workers is not None:
                raise InvalidArgumentError("pass num_workers or envs_per_worker, not both")
            if int(envs_per_worker) < 1:
                raise InvalidArgumentError(f"envs_per_worker must be at least 1, got {envs_per_worker}")
            num_workers = -(-num_envs // int(envs_per_worker))
        if num_workers is None:
            num_workers = max(1, min(len(os.sched_getaffinity(0)), num_envs))
        if worker_program is None:
            program, args, worker_env = python_worker_command()
        elif resolved.python:
            raise InvalidArgumentError(
                f"{resolved.label} is a Python env: it runs in Python workers (python -m shmenv.worker); "
                "worker_program is for native worker binaries"
            )
        else:
            program, args, worker_env = os.fspath(worker_program), [], []
        if resolved.python and 1 <= num_workers <= num_envs:
            from shmenv.calls import CallChannel

            self._calls = CallChannel(num_workers)
            worker_env = worker_env + self._calls.worker_env()
        try:
            self._pool = self._start_pool(resolved, num_envs, num_workers, batch_size, seed, mode, program, args,
                                          worker_env, max_episode_steps, wait, ring_depth, pin_workers, step_timeout,
                                          max_restarts)
        except BaseException:
            if self._calls is not None:
                self._calls.close()
            raise
        self.closed = False
        self.python_env = resolved.python
        spec = json.loads(self._pool.spec_json)
        self.env_id = resolved.label
        self.num_envs = num_envs
        self.num_workers = num_workers
        self.batch_size = int(batch_size) if batch_size is not None else self.num_envs
        self.is_async = self.batch_size < self.num_envs
        self.single_observation_space, self._obs_names = observation_space(spec)
        self.single_action_space = space_from_json(spec["action"])
        self.observation_space = batch_space(self.single_observation_space, self.batch_size)
        self.action_space = batch_space(self.single_action_space, self.batch_size)
        self.metadata = {"autoreset_mode": mode, "render_modes": []}
        self.render_mode = None
        self.autoreset_mode = mode
        self.copy = bool(copy)
        self.episode_stats_key = episode_stats_key
        self.max_episode_steps = spec.get("max_episode_steps") if max_episode_steps is None else max_episode_steps
        self._action_dtype = dtype_of(spec["action"])
        self._action_shape = tuple(self.single_action_space.shape or ())
        self._shards = [tuple(r) for r in self._pool.shards()]
        self._restart = max_restarts is not None

    @staticmethod
    def _start_pool(resolved, num_envs, num_workers, batch_size, seed, mode, program, args, worker_env,
                    max_episode_steps, wait, ring_depth, pin_workers, step_timeout, max_restarts):
        return _shmenv.Pool(
            resolved.engine_id,
            num_envs,
            num_workers=num_workers,
            batch_size=batch_size,
            seed=seed,
            config_json=json.dumps(resolved.config),
            autoreset=mode.value,
            max_episode_steps=max_episode_steps,
            worker_program=program,
            worker_args=args,
            worker_env=worker_env,
            wait=wait,
            ring_depth=ring_depth,
            pin_workers=pin_workers,
            step_timeout=step_timeout,
            max_restarts=max_restarts,
        )

    # --- Gymnasium API ---------------------------------------------------------------

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """Resets every env; ``seed`` seeds env ``i`` with ``seed + i``. In async mode
        returns the first ``batch_size`` envs to finish (``infos["env_id"]`` says which);
        ``recv()`` the rest."""
        if options and "reset_mask" in options and not np.all(options["reset_mask"]):
            raise NotImplementedError(
                "shmenv resets every env at once: partial resets (reset_mask) are not supported; "
                "use autoreset_mode='next_step' or 'same_step' instead of 'disabled'"
            )
        arrays, any_done = self._pool.reset(self._base_seed(seed))
        obs, _, _, _, infos, _ = self._unpack(arrays, False)
        return obs, infos

    def step(self, actions, env_ids=None):
        """Steps the envs. Sync pools step every env (row ``i`` = env ``i``). Async pools
        (``batch_size < num_envs``) send ``actions`` to ``env_ids`` (all envs if None) and
        return the next batch, EnvPool style, with ``infos["env_id"]``."""
        if self.is_async:
            self.send(actions, env_ids)
            return self.recv()[:5]
        arrays, any_done = self._pool.step(self._actions(actions))
        return self._note_restarts(self._unpack(arrays, any_done))[:5]

    def _note_restarts(self, result):
        """Adds ``infos["restarted_envs"]`` when a worker was restarted (``max_restarts``)."""
        if self._restart:
            restarted = self._pool.restarted_envs
            if restarted:
                result[4]["restarted_envs"] = restarted
        return result

    def close_extras(self, **kwargs: Any):
        self._pool.close()
        if self._calls is not None:
            self._calls.close()

    # --- calls into the envs (Python envs only; a side channel, not the step path) ---

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Calls method `name` of every env with the given (picklable) arguments, or reads
        the attribute when it is not callable; returns the results in env order."""
        return tuple(self.env_call("call", name, range(self.num_envs), args=args, kwargs=kwargs))

    def get_attr(self, name: str) -> tuple:
        """Attribute `name` of every env, in env order."""
        return tuple(self.env_call("get", name, range(self.num_envs)))

    def set_attr(self, name: str, values: Any) -> None:
        """Sets attribute `name` of every env: `values` is one value per env (a list or
        tuple of num_envs values) or a single value for all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise InvalidArgumentError(f"set_attr needs {self.num_envs} values (one per env), got {len(values)}")
        self.env_call("set", name, range(self.num_envs), values=values)

    def env_call(self, op: str, name: str, env_ids, values=None, args: tuple = (), kwargs: dict | None = None):
        """Runs `op` ("get", "set", "call", "is_wrapped") on envs `env_ids` in their workers."""
        if self.closed:
            raise ClosedError("the pool is closed (close() was called); build a new one")
        if self._calls is None:
            raise AttributeError(
                f"{self.env_id} is a native shmenv env: it has no Python object to {op} {name!r} on "
                "(pass settings through config=...)"
            )
        return self._calls.request(self._shards, list(env_ids), op, name, values, args, kwargs)

    def render(self):
        return None

    # --- async API (EnvPool convention) ----------------------------------------------

    def send(self, actions, env_ids=None) -> None:
        """Hands one action per env in ``env_ids`` to those envs (async mode)."""
        ids = np.arange(self.num_envs, dtype=np.int64) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        self._pool.send(self._actions(actions), np.ascontiguousarray(ids.reshape(-1)))

    def recv(self):
        """Waits for the next ``batch_size`` results, from the envs that finished first:
        ``(obs, rewards, terminations, truncations, infos, env_ids)``."""
        arrays, any_done = self._pool.recv()
        return self._note_restarts(self._unpack(arrays, any_done))

    def async_reset(self) -> None:
        """Starts a reset of every env (async mode); ``recv()`` returns the results."""
        self._pool.async_reset()

    # --- shmenv extras ---------------------------------------------------------------

    def stats(self) -> dict:
        """What the pool did since it started, from the live stats in shared memory: per
        worker steps, utilization (share of time in env code), wait share, env-step p50/p99;
        the trainer's wait share; and a verdict ("env-bound", "trainer-bound", "sync-bound").
        See docs/profiling.md; ``shmenv top --pid <this pid>`` shows the same live."""
        return json.loads(self._pool.stats_json())

    @property
    def restarts(self) -> list[int]:
        """Restarts so far, per worker (with ``max_restarts``)."""
        return self._pool.restarts

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the worker processes."""
        return self._pool.worker_pids

    @property
    def mapping_range(self) -> tuple[int, int]:
        """Addresses ``(start, end)`` of the shared region in this process."""
        return self._pool.lease.address_range()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self) -> str:
        mode = f"async batch_size={self.batch_size}" if self.is_async else "sync"
        return f"ShmVectorEnv({self.env_id!r}, num_envs={self.num_envs}, {mode})"

    # --- internals -------------------------------------------------------------------

    def _base_seed(self, seed):
        if seed is None or isinstance(seed, (int, np.integer)):
            return None if seed is None else int(seed)
        seeds = list(seed)
        if len(seeds) == self.num_envs and all(s == seeds[0] + i for i, s in enumerate(seeds)):
            return int(seeds[0])
        raise InvalidArgumentError(
            "shmenv seeds env i with seed + i: pass one int (or the list [seed, seed+1, ...])"
        )

    def _actions(self, actions) -> np.ndarray:
        a = np.asarray(actions)
        if a.dtype != self._action_dtype:
            if a.dtype.kind == "f" and self._action_dtype.kind in "iu":
                # Like Gymnasium's spaces: an integer space takes integral values only.
                if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
                    raise ActionError(f"actions must be integers for {self.single_action_space}, got {a}")
            a = a.astype(self._action_dtype)
        return np.ascontiguousarray(a)

    def _unpack(self, arrays, any_done: bool):
        obs_t, rewards, terminated, truncated, env_ids, ep_return, ep_length, final_t = arrays
        if self.copy:
            obs_t = tuple(np.array(o) for o in obs_t)
            rewards, terminated, truncated = np.array(rewards), np.array(terminated), np.array(truncated)
            env_ids, ep_return, ep_length = np.array(env_ids), np.array(ep_return), np.array(ep_length)
        obs = obs_t[0] if len(obs_t) == 1 else dict(zip(self._obs_names, obs_t))
        infos: dict[str, Any] = {}
        if self.is_async:
            infos["env_id"] = env_ids
        if any_done:
            done = np.logical_or(terminated, truncated)
            key = self.episode_stats_key
            if key:
                # Workers write 0 where no episode ended, as RecordEpisodeStatistics does.
                infos[key] = {"r": ep_return, "l": ep_length}
                infos["_" + key] = done
            if final_t is not None:
                final = np.full(len(done), None, dtype=object)
                for i in np.flatnonzero(done):
                    rows = [np.array(a[i]) for a in final_t]
                    final[i] = rows[0] if len(rows) == 1 else dict(zip(self._obs_names, rows))
                infos["final_obs"] = final
                infos["_final_obs"] = done
                infos["final_info"] = {}
                infos["_final_info"] = done
        return obs, rewards, terminated, truncated, infos, env_ids


def _autoreset_mode(mode: str | AutoresetMode) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    names = {m.value.lower(): m for m in AutoresetMode}
    found = names.get(str(mode).replace("_", "").lower())
    if found is None:
        raise InvalidArgumentError(
            f"unknown autoreset_mode {mode!r}: use 'next_step', 'same_step' or 'disabled' "
            "(or gymnasium.vector.AutoresetMode)"
        )
    return found


def make_vec(env: Any, num_envs: int, **kwargs: Any) -> ShmVectorEnv:
    """Starts ``num_envs`` envs in ``num_workers`` worker processes (default: one per core,
    at most ``num_envs``) and returns them as a Gymnasium ``VectorEnv``. The keywords are
    those of :class:`ShmVectorEnv`:

    ``env`` is a native (Rust) env id (``shmenv.builtin_env_ids()``, checked first), a
    Gymnasium id (also one registered only in this process), a
    ``gymnasium.envs.registration.EnvSpec``, an entry point ``"package.module:Class"`` (or
    the class itself), or an env instance that has a ``spec``. Python envs are built in the
    workers from JSON: ``config`` holds their constructor's keyword arguments.

    - ``batch_size < num_envs`` is async mode: ``send``/``recv`` (or ``step(actions,
      env_ids)``) return the first ``batch_size`` envs to finish.
    - ``seed``: env ``i`` is seeded with ``seed + i`` at the first reset.
    - ``config``: the env's JSON config (native envs refuse unknown keys with a message;
      Python envs get it as keyword arguments).
    - ``envs_per_worker``: instead of ``num_workers``; 1 gives each env its own process
      (for libraries that allow one instance per process).
    - ``autoreset_mode``: "next_step" (Gymnasium's default), "same_step" (final
      observations in ``infos["final_obs"]``) or "disabled".
    - ``copy``: return owned arrays instead of views of the shared memory.
    - ``worker_program``: a native worker binary (such as ``shmenv-worker`` or your own
      Rust build with custom envs) instead of ``python -m shmenv.worker``.
    - more keywords: ``max_episode_steps``, ``wait`` ("auto", "spin", "yield", "block"),
      ``ring_depth``, ``pin_workers``, ``episode_stats_key``, ``step_timeout`` (seconds:
      hang detection, raises ``WorkerTimeoutError`` naming the envs that did not answer),
      ``max_restarts``: a dead or hung worker is restarted up to that many times; its
      envs come back as fresh, truncated episodes listed in ``infos["restarted_envs"]``
      (async mode: each in the batch that returns it).
    """
    return ShmVectorEnv(env, num_envs, **kwargs)
