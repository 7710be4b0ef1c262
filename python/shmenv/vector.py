"""``shmenv.make_vec``: a Gymnasium ``VectorEnv`` whose envs live in worker processes and
whose observations are numpy views of the shared memory they write into.

:class:`ShmVectorEnv` is the whole of Gymnasium's vector env API in this file; each part it
hands off goes to a named collaborator, given what it needs when it is made: the
extension's pool (``_pool``: the step path), the call channel to hosted envs (``_calls``,
:mod:`shmenv.channel.trainer`), the batches' conversions (``_batches``, :mod:`shmenv.batches`),
restarted workers (``_restarts``, :mod:`shmenv.restarts`), the split calls
(``_split``, :mod:`shmenv.pending`), and the checks every vector env makes
(:mod:`shmenv.prechecks`).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.vector.vector_env import AutoresetMode

from shmenv import _shmenv
from shmenv.arguments import _env_ids, gym_keywords
from shmenv.batches import Batches, start_infos, weak_close
from shmenv.channel import protocol as ops
from shmenv.channel.trainer import CallChannel
from shmenv.engine_args import PoolPlan, plan_pool
from shmenv.env_calls import NATIVE_ATTRS, checked_spaces, env0_attrs, native_attr, reset_option_targets
from shmenv.errors import BuildError, InvalidArgumentError, UsageError, WorkerDiedError
from shmenv.infos import InfoArea
from shmenv.options import NAMES, PoolOptions, env_or_id, with_options
from shmenv.pending import PendingCalls
from shmenv.prechecks import check_open, reset_request
from shmenv.resolve import python_worker_command
from shmenv.restarts import Restarts
from shmenv.seeding import per_env_seeds, reset_commands
from shmenv.spaces import modes
from shmenv.spaces.assembly import Assembly

__all__ = ["make_vec", "from_fns", "ShmVectorEnv", "python_worker_command"]


class ShmVectorEnv(VectorEnv):
    """A Gymnasium vector env over shmenv worker processes. Made by :func:`make_vec`, whose
    docstring describes every argument.

    Arrays returned by ``reset``/``step``/``recv`` are the caller's: writable numpy arrays
    that shmenv never changes while the caller can reach them, as with ``SyncVectorEnv``
    and EnvPool (an array the caller let go of may come back refilled as a later result).
    With ``copy=False`` observations are instead read-only views of the shared memory
    (rewards, flags and infos stay owned copies), valid until the second call after the
    one that returned them: in sync mode until the step (or reset) after next, in async
    mode until the second ``recv`` (or reset) after it begins, so ``obs`` is still intact
    next to ``next_obs``. Views never dangle: each holds the mapping alive, even after
    ``close()``.
    """

    @with_options
    def __init__(self, env: Any, num_envs: int = 1, **options: Any):
        options, extras = gym_keywords("make_vec", options, NAMES)
        o = PoolOptions.of("make_vec", options)
        self.closed = True  # until the pool exists, so __del__ has nothing to close
        # One caller at a time: held by every call but the native one-call path, whose
        # extension calls check it (a second thread's call raises UsageError).
        self._caller = _shmenv.CallerGuard()
        self._split = PendingCalls()
        self._calls: CallChannel | None = None
        self._infos: InfoArea | None = None
        self._restart = o.max_restarts is not None
        self._has_reset = False
        # Every argument mistake is raised here, before workers start.
        plan = plan_pool(env, num_envs, o, self._caller, extras)
        self._start_pool(plan)
        self._describe(plan, o.render_mode)
        self.copy = bool(o.copy)
        self.pool_infos = bool(o.pool_infos) or self.is_async
        self.episode_stats_key = o.episode_stats_key
        self._env_seeds: list[int | None] = [None] * self.num_envs
        self._pool_seed = plan.seed
        self._connect()

    def _start_pool(self, plan: PoolPlan) -> None:
        """Starts the workers (and, for Python envs, the call channel: a private socket per
        worker process, made by the engine when it spawns it); a spec mismatch between the
        workers' envs raises as ``AsyncVectorEnv`` words it."""
        resolved, pool_args = plan.resolved, plan.pool_args
        if resolved.python and plan.num_workers <= plan.num_envs:
            # A replacement worker that does not take the shared fds is waited for as long as a step.
            self._calls = CallChannel(
                plan.num_workers, restart_wait=pool_args["step_timeout"], replaces_workers=self._restart
            )
            pool_args["call_socket"] = True
        try:
            self._pool = _shmenv.Pool(resolved.engine_id, plan.num_envs, pool_args)
        except BaseException as e:
            if self._calls is not None:
                self._calls.close()
            mismatch = None
            if isinstance(e, BuildError) and resolved.python:
                mismatch = modes.spec_mismatch(e, plan.obs_mode, plan.num_envs, plan.num_workers)
            if mismatch is None:
                raise
            raise mismatch from e
        self.closed = False
        if self._calls is not None:
            # A changed pid is a restarted worker: the call channel then takes its replacement's socket.
            self._calls.worker_pids = lambda pool=self._pool: pool.worker_pids
            self._calls.take_socket = self._pool.take_call_socket
            self._calls.local = self._pool.trainer_host  # the trainer's own envs, answered in-process
        self.python_env = resolved.python
        self.env_id = resolved.label
        self.backend = resolved.backend  # "native", "plugin" or "python": which path runs the envs
        self.num_envs = plan.num_envs
        self.num_workers = plan.num_workers
        # Whether the trainer steps a shard of the envs itself, and why (``trainer_shard``).
        self.trainer_shard, self.trainer_shard_reason = plan.trainer_shard
        self.batch_size = plan.batch_size
        self.is_async = self.batch_size < self.num_envs
        self._shards = [(lo, hi) for lo, hi in self._pool.shards()]

    def _describe(self, plan: PoolPlan, render_mode: str | None) -> None:
        """The pool's spaces, spec, time limit, metadata and render mode, from the workers'
        spec and (Python envs) env 0's attributes; every env's spaces checked against them.
        A mismatch closes the pool and raises."""
        spec = json.loads(self._pool.spec_json)
        env0: dict = {}
        if self.python_env:
            env0 = self._while_open(lambda: env0_attrs(self._env_call))
        self._assembly = Assembly(spec, env0.get("spaces"))
        self.single_observation_space = self._assembly.single_observation_space
        self.single_action_space = self._assembly.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.batch_size)
        self.action_space = batch_space(self.single_action_space, self.batch_size)
        self.observation_mode = plan.obs_mode
        if self.python_env:
            batched = self._while_open(
                lambda: checked_spaces(self._env_call, self.num_envs, plan.obs_mode, env0["spaces"])
            )
            if batched is not None:
                self.single_observation_space = batched[1]
                if not self.is_async:  # an async batch's rows are any envs: its space stays the single one's, batched
                    self.observation_space = batched[0]
        self.spec = plan.resolved.gym_spec
        gym_limit = getattr(self.spec, "max_episode_steps", None)
        self.max_episode_steps = plan.pool_args["max_episode_steps"] or spec.get("max_episode_steps") or gym_limit
        self.metadata = {"autoreset_mode": plan.mode, "render_modes": []}
        self.render_mode = self._take_render_info(env0, render_mode) if self.python_env else None
        self.autoreset_mode = plan.mode

    def _while_open(self, run: Callable[[], Any]) -> Any:
        """``run()``, closing the pool if it raises (a start-up step that failed)."""
        try:
            return run()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        """The collaborators of the running pool: the shared info area (Python envs), the
        batches' conversions, restarts, and the one-call path. Batches that need nothing
        from Python (one observation array, native envs, no restarts, no final
        observations) are made into Gymnasium's tuple by the extension in the call itself,
        with its converters for other arguments."""
        self._infos = start_infos(self._pool, self._shards, self._calls)
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        self._batches = Batches(
            self._pool, self._assembly, self._calls, self._infos, self._shards, same_step, weak_close(self)
        )
        self._restarts = Restarts(
            self._pool,
            self._calls,
            self._infos,
            self._restart,
            self.is_async,
            self.num_envs,
            self._assembly.action_dtype,
        )
        self._one_call = self._calls is None and not self._restart and self._assembly.as_engine_arrays and not same_step
        if self._one_call:
            self._pool.set_converters(self._assembly.actions, _env_ids)

    # --- Gymnasium API ---------------------------------------------------------------

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None):
        """Resets every env, as Gymnasium's vector envs do: ``seed`` None (each env
        continues its random stream; the first reset uses the pool's seed), an int (env
        ``i`` gets ``seed + i``) or a list of one int or None per env. With
        ``options={"reset_mask": mask}`` (sync mode; a bool array, one per env) resets only
        the masked envs; the others keep their episode and their row holds their current
        observation, as with ``SyncVectorEnv``. Other ``options`` go to each reset env's
        ``reset`` (hosted Python envs). In async mode returns the first
        ``batch_size`` envs to finish (``infos["env_id"]`` says which); ``recv()`` the rest,
        and a seed list must be consecutive (``[s, s + 1, ...]``)."""
        if self._split.busy:
            self._split.refuse("reset")
        with self._caller:
            return self._reset(seed, options)

    def _reset(self, seed: int | Sequence[int | None] | None, options: dict | None):
        check_open(self.closed)
        mask, env_options = reset_request(options, self.num_envs, self.is_async)
        seeds = per_env_seeds(seed, self.num_envs)
        commands = reset_commands(seeds, mask, first=not self._has_reset)
        if self.is_async and len(commands) > 1:
            raise InvalidArgumentError(
                f"an async pool seeds env i with seed + i: pass None, one int or a list [s, s + 1, ...]; got {seed!r}"
            )
        if env_options:
            targets = reset_option_targets(self.env_id, self._calls is not None, env_options, mask, self.num_envs)
            self._env_call(ops.RESET_OPTIONS, "", targets, [env_options] * len(targets))
        if seed is None and not self._has_reset and self._pool_seed is None and self._calls is not None:
            # As Gymnasium's vector envs: an unseeded first reset calls reset(seed=None).
            self._env_call(ops.UNSEEDED, "", range(self.num_envs))
        self._restarts.forget(mask)
        res = None
        for env_mask, base in commands:
            if res is not None and self._infos is not None:
                self._batches.merge_infos(res, {})  # an earlier command's infos are stale
            res = self._pool.reset(base, env_mask)
            self._restarts.follow(res)
            self._note_seeds(env_mask, base)
        obs, _, _, _, infos = self._batches.unpack(res, self.pool_infos, self._stats_key)
        return obs, infos

    def _note_seeds(self, mask: list[bool] | None, base: int | None) -> None:
        """Tracks each native env's seed after a reset command (``np_random_seed``)."""
        if base is None and self._has_reset:
            return  # unseeded: the envs continue their streams, their seed is unchanged
        base = self._pool.seed if base is None else base
        for i in range(self.num_envs):
            if mask is None or mask[i]:
                self._env_seeds[i] = (base + i) % 2**64
        self._has_reset = True

    @property
    def np_random_seed(self) -> tuple[int | None, ...]:
        """Each env's seed, as Gymnasium's vector envs answer it: Python envs' own
        ``np_random_seed``; for native envs the seed of their last seeded reset (None
        before the first reset)."""
        if self.python_env:
            return self.get_attr("np_random_seed")
        return tuple(self._env_seeds)

    def step(self, actions, env_ids=None):
        """Steps the envs. Sync pools step every env (row ``i`` = env ``i``). Async pools
        (``batch_size < num_envs``) send ``actions`` to ``env_ids`` (all envs if None) and
        return the next batch, EnvPool style, with ``infos["env_id"]``."""
        if self._split.busy:
            self._split.refuse("step")
        if self.is_async:
            if self._one_call:
                return self._pool.send_recv_gym(actions, env_ids, self.pool_infos, self._stats_key)
            with self._caller:
                self._send(actions, env_ids)
                return self._recv()
        if self._one_call:
            return self._pool.step_gym(actions, self.pool_infos, self._stats_key)
        with self._caller:
            res = self._pool.step(self._batches.actions(actions, None, self.num_envs))
            self._restarts.follow(res)
            return self._restarts.note(res, self._batches.unpack(res, self.pool_infos, self._stats_key))

    def close_extras(self, **kwargs: Any):
        """Closes the pool (``AsyncVectorEnv``'s ``timeout``/``terminate`` are accepted: the
        workers stop within the shutdown grace, then are killed). A split call still
        pending is warned of and finishes first, as ``AsyncVectorEnv`` does."""
        self._split.close()  # before the guard, which a pending call's thread may hold
        with self._caller:
            self._pool.close()
            if self._calls is not None:
                self._calls.close()
            if self._infos is not None:
                self._infos.close()

    def __enter__(self) -> "ShmVectorEnv":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    # --- AsyncVectorEnv's split calls (shmenv.pending) --------------------------------

    def reset_async(self, seed: Any = None, options: dict | None = None) -> None:
        """Starts ``reset(seed=seed, options=options)`` on a helper thread; :meth:`reset_wait`
        returns it."""
        check_open(self.closed)
        self._split.start("reset", lambda: self.reset(seed=seed, options=options))

    def reset_wait(self, timeout: float | None = None) -> tuple:
        """The pending reset's ``(obs, infos)``, waiting at most ``timeout`` seconds
        (``multiprocessing.TimeoutError`` after that, as ``AsyncVectorEnv``)."""
        return self._split.wait("reset", timeout)

    def step_async(self, actions: Any) -> None:
        """Starts ``step(actions)`` on a helper thread; :meth:`step_wait` returns it."""
        check_open(self.closed)
        self._split.start("step", lambda: self.step(actions))

    def step_wait(self, timeout: float | None = None) -> tuple:
        """The pending step's results, waiting at most ``timeout`` seconds."""
        return self._split.wait("step", timeout)

    # --- calls into the envs (a side channel, not the step path) ---------------------

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Calls method `name` of every env with the given (picklable) arguments, or reads
        the attribute when it is not callable; returns the results in env order. Native
        envs answer the attributes of :data:`shmenv.env_calls.NATIVE_ATTRS` and ``render``
        (None)."""
        if self._calls is None and name == "render":
            return tuple(None for _ in range(self.num_envs))
        return tuple(self.env_call(ops.CALL, name, range(self.num_envs), args=args, kwargs=kwargs))

    def get_attr(self, name: str) -> tuple:
        """Attribute `name` of every env, in env order."""
        return tuple(self.env_call(ops.GET, name, range(self.num_envs)))

    def set_attr(self, name: str, values: Any) -> None:
        """Sets attribute `name` of every env: `values` is one value per env (a list or
        tuple of num_envs values) or a single value for all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise InvalidArgumentError(f"set_attr needs {self.num_envs} values (one per env), got {len(values)}")
        self.env_call(ops.SET, name, range(self.num_envs), values=values)

    def env_call(self, op: str, name: str, env_ids, values=None, args: tuple = (), kwargs: dict | None = None):
        """Runs `op` (one of :mod:`shmenv.channel.protocol`: "get", "set", "call", "is_wrapped" ...)
        on envs `env_ids` in their workers.
        Native envs have no Python objects: "get" and "call" answer
        :data:`shmenv.env_calls.NATIVE_ATTRS`. Raises :class:`UsageError` while another
        thread is inside a call on this pool."""
        with self._caller:
            return self._env_call(op, name, env_ids, values, args, kwargs)

    def _env_call(self, op: str, name: str, env_ids, values=None, args: tuple = (), kwargs: dict | None = None):
        check_open(self.closed)
        if self._calls is None:
            if op in (ops.GET, ops.CALL) and name in NATIVE_ATTRS:
                spaces = (self.single_observation_space, self.single_action_space)
                return [native_attr(name, self.spec, *spaces) for _ in env_ids]
            raise AttributeError(
                f"{self.env_id} is a native shmenv env: it has no Python object to {op} {name!r} on "
                f"(it answers {', '.join(NATIVE_ATTRS)}; pass settings through config=...)"
            )
        if self._restart:
            return self._calls.request(self._shards, list(env_ids), op, name, values, args, kwargs, revive=self._revive)
        try:
            return self._calls.request(self._shards, list(env_ids), op, name, values, args, kwargs)
        except WorkerDiedError as e:
            # No restart policy: a dead worker ends the pool, as the next step would.
            if e.worker is not None:
                e.env_ids = list(range(*self._shards[e.worker]))
            self.close()
            raise

    def _revive(self, workers: list[int]) -> None:
        """A call found ``workers`` dead (``max_restarts``): the pool restarts them
        (:meth:`shmenv.restarts.Restarts.revive`), once it has been reset."""
        if not self._has_reset:
            raise Restarts.refuse_before_reset(workers)
        self._restarts.revive(workers)

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Starts :meth:`call`; :meth:`call_wait` returns its results (or raises its error).
        The call runs at once (every worker answers before this returns), so ``call_wait``
        never waits and its ``timeout`` has nothing to bound."""
        self._split.call_async(lambda: self.call(name, *args, **kwargs))

    def call_wait(self, timeout: float | None = None) -> tuple:
        """The results of the pending :meth:`call_async`, in env order."""
        return self._split.call_wait()

    @property
    def np_random(self) -> tuple:
        """Copies of the envs' random generators (pickled from the workers), as
        ``AsyncVectorEnv.np_random``; native envs have none (``AttributeError``)."""
        return self.get_attr("np_random")

    def _take_render_info(self, env0: dict, render_mode: str | None) -> str | None:
        """As Gymnasium's vector envs: ``metadata``'s render modes and fps are env 0's, and
        so is the render mode, which must be the one asked for; returns it."""
        env_metadata, env_render_mode = env0["metadata"], env0["render_mode"]
        self.metadata["render_modes"] = list(env_metadata.get("render_modes") or [])
        if "render_fps" in env_metadata:
            self.metadata["render_fps"] = env_metadata["render_fps"]
        if render_mode is not None and env_render_mode != render_mode:
            self.close()
            raise InvalidArgumentError(
                f"{self.env_id} was built with render_mode={render_mode!r} but its render_mode is "
                f"{env_render_mode!r}: the env ignores the render_mode keyword (its metadata['render_modes'] "
                f"is {self.metadata['render_modes']!r})"
            )
        return env_render_mode

    def render(self) -> tuple:
        """Every env's ``render()``, in env order, as Gymnasium's vector envs return it: for
        ``render_mode="rgb_array"`` (or ``"depth_array"``) a tuple of one frame per env, for
        ``"rgb_array_list"`` a tuple of one list of frames per env. The envs render in their
        workers (``make_vec(..., render_mode=...)``) and the frames come back pickled over
        the call side channel (not the shared memory): a few milliseconds per call for
        CartPole's 600x400 frames, meant for videos and evaluation, not for every training
        step. Raises :class:`shmenv.UsageError` when ``render_mode`` is None."""
        check_open(self.closed)
        if self.render_mode is None:
            if not self.python_env:
                raise UsageError(
                    f"{self.env_id} is a native shmenv env: native envs do not render (render_mode is None). To "
                    f"render Gymnasium's own env in Python workers, pass its spec: "
                    f"shmenv.make_vec(gymnasium.spec({self.env_id!r}), n, render_mode='rgb_array')"
                )
            raise UsageError(
                f"{self.env_id}: render_mode is None, so the envs have no frames to return; build the pool with "
                f"shmenv.make_vec(..., render_mode='rgb_array') (one of the env's render_modes: "
                f"{self.metadata.get('render_modes')!r})"
            )
        return self.call("render")

    # --- async API (EnvPool convention) ----------------------------------------------

    def send(self, actions, env_ids=None) -> None:
        """Hands one action per env in ``env_ids`` (all envs if None) to those envs (async
        mode), as EnvPool's ``send(action, env_id)``."""
        if self._one_call:
            return self._pool.send_gym(actions, env_ids)
        with self._caller:
            self._send(actions, env_ids)

    def _send(self, actions, env_ids) -> None:
        ids = np.arange(self.num_envs, dtype=np.int64) if env_ids is None else _env_ids(env_ids, self.num_envs)
        self._pool.send(self._batches.actions(actions, ids, self.num_envs), ids)

    def recv(self):
        """Waits for the next ``batch_size`` results, from the envs that finished first:
        ``(obs, rewards, terminations, truncations, infos)`` as EnvPool's ``recv()``, with
        ``infos["env_id"]`` (int32) saying which env each row is."""
        if self._one_call:
            return self._pool.recv_gym(self.pool_infos, self._stats_key)
        with self._caller:
            return self._recv()

    def _recv(self):
        res = self._pool.recv()
        self._restarts.follow(res)
        return self._restarts.note(res, self._batches.unpack(res, self.pool_infos, self._stats_key))

    def async_reset(self) -> None:
        """Starts a reset of every env (async mode); ``recv()`` returns the results."""
        with self._caller:
            self._pool.async_reset()

    # --- shmenv extras ---------------------------------------------------------------

    def stats(self) -> dict:
        """What the pool did since it started, from the live stats in shared memory: per
        worker steps, utilization (share of time in env code), wait share, run-queue share
        (time waiting for a CPU), env-step p50/p99; the trainer's wait share; the wait mode
        the default ``wait="auto"`` chose ("active" or, under contention, "sleep"), with the
        share of batches that slept; the share of the machine's CPU time other tasks took
        (``others_share``); and a verdict ("contended", "oversubscribed", "env-bound",
        "trainer-bound", "sync-bound"). See docs/profiling.md; ``shmenv top --pid <this
        pid>`` shows the same live."""
        with self._caller:
            return json.loads(self._pool.stats_json())

    @property
    def episode_stats_key(self) -> str:
        """The infos key of per-episode return and length (``{"r": ..., "l": ...}`` and its
        ``_key`` mask where episodes ended); "" for none. May be set (a str, or None for
        none)."""
        return self._stats_key

    @episode_stats_key.setter
    def episode_stats_key(self, key: str | None) -> None:
        if key is not None and not isinstance(key, str):
            raise InvalidArgumentError(
                f'episode_stats_key must be a str (an infos key), or None or "" for no episode statistics; got {key!r}'
            )
        self._stats_key = key or ""

    @property
    def restarts(self) -> list[int]:
        """Restarts so far, per worker (with ``max_restarts``)."""
        return self._pool.restarts

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the worker processes."""
        return self._pool.worker_pids

    @property
    def engine_spec(self) -> dict:
        """The env's spec as the workers reported it: observation arrays, the action space
        and the time limit, in the engine's JSON form."""
        return json.loads(self._pool.spec_json)

    @property
    def mapping_range(self) -> tuple[int, int]:
        """Addresses ``(start, end)`` of the shared region in this process."""
        return self._pool.lease.address_range()

    def __repr__(self) -> str:
        mode = f"async batch_size={self.batch_size}" if self.is_async else "sync"
        return f"ShmVectorEnv({self.env_id!r}, num_envs={self.num_envs}, {mode})"


@with_options
def make_vec(env: Any = None, num_envs: int = 1, *, id: Any = None, **options: Any) -> ShmVectorEnv:  # noqa: A002
    """Starts ``num_envs`` envs in worker processes and returns them as a Gymnasium
    ``VectorEnv`` (:class:`ShmVectorEnv`).

    - ``env`` (or ``id=``, ``gymnasium.make_vec``'s name for it): a native (Rust) env id (``shmenv.builtin_env_ids()``, checked first), an
      id of an installed plugin package (:mod:`shmenv.plugins`: its library, without
      ``plugin=``; ``envs.backend`` says which path runs), a Gymnasium id (also one registered only in this process), a
      ``gymnasium.envs.registration.EnvSpec``, an entry point ``"package.module:Class"``
      (or the class itself), or an env instance that has a ``spec``. Python envs are built
      in the workers from JSON: ``config`` holds their constructor's keyword arguments.
      Or a zero-argument callable that returns an env (a lambda, a closure,
      ``functools.partial``, a function of ``__main__``), as ``AsyncVectorEnv`` takes: it is
      pickled with cloudpickle, and each worker calls its copy once per env (importable
      module-level functions go by name instead, called with ``config``).
    - ``num_workers``: worker processes (default: one per core; ``0``: the trainer steps
      every env), or ``envs_per_worker`` instead (1 gives each env its own process, for
      libraries that allow one instance per process); both may be given when they agree.
    - ``batch_size < num_envs`` is async mode: ``send``/``recv`` (or ``step(actions,
      env_ids)``) return the first ``batch_size`` envs to finish, EnvPool style.
    - ``seed``: env ``i`` is seeded with ``seed + i`` at the first reset.
    - ``config``: the env's JSON config (native envs refuse unknown keys with a message;
      Python envs get it as keyword arguments).
    - ``autoreset_mode``: "next_step" (Gymnasium's default), "same_step" (final
      observations in ``infos["final_obs"]``) or "disabled" (reset ended envs with
      ``reset(options={"reset_mask": mask})``).
    - ``copy`` (default True): every returned array is a fresh array the caller owns, as
      with ``SyncVectorEnv`` and EnvPool. ``copy=False`` returns observations as
      read-only views of the shared memory, valid until the second call after the one
      that returned them (see :class:`ShmVectorEnv`); rewards, flags and infos are always
      owned.
    - ``worker_program``: a native worker binary (your own Rust build with custom envs)
      instead of ``python -m shmenv.worker``.
    - ``max_episode_steps``: a time limit (truncation) on top of the env's own.
    - ``wait``: how the trainer and workers wait for each other: "auto" (measured,
      adaptive: waits actively on an idle machine, sleeps on the futex, workers unpinned,
      when other processes or the trainer's own threads compete for the cores), "spin",
      "yield" or "block" (fixed).
    - ``ring_depth``: async mode, result blocks in the ring (default 2, 3 with
      ``copy=False``, which keeps the two latest batches intact).
    - ``pin_workers``: pin each worker to its own core when there are enough cores (while
      ``wait="auto"`` sleeps under contention, the workers are unpinned).
    - ``episode_stats_key``: an infos key for shmenv's per-episode return and length
      (``{"r", "l"}`` at episode ends); "" (the default) for none, so that infos are the
      envs' own, as ``SyncVectorEnv``'s (Gymnasium's ``RecordEpisodeStatistics`` reports
      episodes as ``infos["episode"]``).
    - ``step_timeout``: seconds; hang detection, raises ``WorkerTimeoutError`` naming the
      envs that did not answer.
    - ``max_restarts``: a dead or hung worker is restarted up to that many times; its envs
      come back as fresh, truncated episodes listed in ``infos["restarted_envs"]``. A call
      into the envs that finds a worker dead restarts it too (docs/python.md).
    - ``fair_scheduling`` (async mode, default True): every env gets its share of steps
      (counts within a few steps of each other); False lets whichever worker runs step
      its envs as fast as it can (a few percent more throughput for the cheapest envs).
    - ``render_mode`` (hosted Python envs): passed to each env's construction in its worker
      (``gym.make(spec, render_mode=...)``, or an entry point's keyword); ``envs.render()``
      returns every env's frame. A factory binds the mode itself (``lambda: gym.make(id,
      render_mode="rgb_array")``). Native (Rust) envs do not render: None only.
    - ``plugin``: the path of a shared library implementing ``shmenv_env.h`` (a C or C++
      env); ``env`` is then one of its ids. Every worker loads the library for itself.
    - ``observation_mode`` (as ``AsyncVectorEnv``'s): "same" (every env has env 0's
      spaces; a mismatch raises ``RuntimeError`` naming both envs), "different" (the
      observation spaces may differ in their bounds, with one shape and dtype; the batched
      space is ``batch_differing_spaces`` of them) or ``(observation_space,
      single_observation_space)``.
    - ``trainer_shard`` ("auto" by default, True/"on", False/"off"; sync mode, native
      envs): the trainer steps the first of ``num_workers + 1`` shards of the envs itself
      while the workers step theirs (default ``num_workers``: one fewer than the cores).
      Where envs are cheap this is one process per core instead of a trainer sharing a
      core with a worker; but those envs run in the trainer's process, so a crash there
      ends the trainer. "auto" takes it for built-in and hosted Python envs in sync mode
      when ``num_workers``/``envs_per_worker``, ``max_restarts`` and ``plugin`` are not
      given (plugins keep every env in a worker unless True; the trainer answers calls for
      its hosted envs in-process); ``envs.trainer_shard`` and
      ``envs.trainer_shard_reason`` say what was chosen (docs/python.md).
    - ``pool_infos``: add ``infos["env_id"]`` and ``infos["elapsed_step"]`` to every
      result in sync mode too (async mode always has them, EnvPool style); by default a
      sync pool's infos hold what the envs returned, as ``SyncVectorEnv``'s.
    """
    return ShmVectorEnv(env_or_id(env, id), num_envs, **options)


def from_fns(env_fns: Sequence[Any], **kwargs: Any) -> ShmVectorEnv:
    """``AsyncVectorEnv(env_fns)``'s shape: one zero-argument callable per env, each
    returning an env; every :func:`make_vec` keyword but ``num_envs`` (``len(env_fns)``).
    The callables are pickled with cloudpickle and env ``i``'s worker calls ``env_fns[i]``
    (one factory sent once when they are all the same object). All envs must have the same
    spaces."""
    from shmenv.resolve import env_fns_target

    env, num_envs = env_fns_target(env_fns, kwargs)
    return make_vec(env, num_envs, **kwargs)
