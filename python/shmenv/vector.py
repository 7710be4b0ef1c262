"""``shmenv.make_vec``: a Gymnasium ``VectorEnv`` whose envs live in worker processes and
whose observations are numpy views of the shared memory they write into."""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.vector.vector_env import AutoresetMode

from shmenv import _shmenv
from shmenv.arguments import _env_ids
from shmenv.engine_args import plan_pool
from shmenv.env_calls import EnvCalls
from shmenv.errors import (
    BuildError,
    InvalidArgumentError,
    UsageError,
    WorkerDiedError,
    WorkerError,
)
from shmenv.front import VectorFront
from shmenv.infos import InfoArea
from shmenv.options import PoolOptions, with_options
from shmenv.pending import PendingCalls
from shmenv.resolve import python_worker_command
from shmenv.seeding import per_env_seeds, reset_commands
from shmenv.spaces import modes
from shmenv.spaces.assembly import Assembly
from shmenv.worker import ops

__all__ = ["make_vec", "from_fns", "ShmVectorEnv", "python_worker_command"]


class ShmVectorEnv(VectorFront, EnvCalls, PendingCalls, VectorEnv):
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
    def __init__(self, env: Any, num_envs: int, **options: Any):
        o = PoolOptions.of("make_vec", options)
        self.closed = True  # until the pool exists, so __del__ has nothing to close
        # One caller at a time: held by every call but the native one-call path, whose
        # extension calls check it (a second thread's call raises UsageError).
        self._caller = _shmenv.CallerGuard()
        self._calls = None
        self._infos: InfoArea | None = None
        self._restart = o.max_restarts is not None
        self._has_reset = False
        self._restarted_by_calls: set[int] = set()
        # Every argument mistake is raised here, before workers start.
        plan = plan_pool(env, num_envs, o, self._caller)
        resolved, mode, obs_mode, pool_args = plan.resolved, plan.mode, plan.obs_mode, plan.pool_args
        num_envs, num_workers, batch, seed = plan.num_envs, plan.num_workers, plan.batch_size, plan.seed
        try:
            self._start_pool(resolved, num_envs, pool_args)
        except BuildError as e:
            mismatch = modes.spec_mismatch(e, obs_mode, num_envs, num_workers) if resolved.python else None
            if mismatch is None:
                raise
            raise mismatch from e
        self.python_env = resolved.python
        spec = json.loads(self._pool.spec_json)
        self.env_id = resolved.label
        self.num_envs = num_envs
        self.num_workers = num_workers
        self.batch_size = batch
        self.is_async = self.batch_size < self.num_envs
        self._shards = [tuple(r) for r in self._pool.shards()]
        env0 = self._env0_attrs() if self.python_env else {}
        self._assembly = Assembly(spec, env0.get("spaces"))
        self.single_observation_space = self._assembly.single_observation_space
        self.single_action_space = self._assembly.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.batch_size)
        self.action_space = batch_space(self.single_action_space, self.batch_size)
        self.observation_mode = obs_mode
        if self.python_env:
            self._check_spaces(obs_mode, env0.get("spaces"))
        self.spec = resolved.gym_spec
        gym_limit = getattr(self.spec, "max_episode_steps", None)
        self.max_episode_steps = pool_args["max_episode_steps"] or spec.get("max_episode_steps") or gym_limit
        self.metadata = {"autoreset_mode": mode, "render_modes": []}
        self.render_mode = self._take_render_info(env0, o.render_mode) if self.python_env else None
        self.autoreset_mode = mode
        self._infos = self._start_infos()
        self.copy = bool(o.copy)
        self.pool_infos = bool(o.pool_infos) or self.is_async
        self.episode_stats_key = o.episode_stats_key
        self._env_seeds: list[int | None] = [None] * num_envs
        self._pool_seed = seed
        # Batches that need nothing from Python (one observation array, native envs, no
        # restarts, no final observations) are made into Gymnasium's tuple by the
        # extension in the call itself, with its converters for other arguments.
        self._one_call = (
            self._calls is None
            and not self._restart
            and self._assembly.as_engine_arrays
            and mode != AutoresetMode.SAME_STEP
        )
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
        with self._caller:
            return self._reset(seed, options)

    def _reset(self, seed: int | Sequence[int | None] | None, options: dict | None):
        self._check_open()
        if self._pending is not None or self._abandoned is not None:
            self._refuse_if_pending("reset")
        mask, env_options = self._reset_request(options)
        seeds = per_env_seeds(seed, self.num_envs)
        commands = reset_commands(seeds, mask, first=not self._has_reset)
        if self.is_async and len(commands) > 1:
            raise InvalidArgumentError(
                f"an async pool seeds env i with seed + i: pass None, one int or a list [s, s + 1, ...]; got {seed!r}"
            )
        if env_options:
            self._send_reset_options(env_options, mask)
        if seed is None and not self._has_reset and self._pool_seed is None and self._calls is not None:
            # As Gymnasium's vector envs: an unseeded first reset calls reset(seed=None).
            self.env_call(ops.UNSEEDED, "", range(self.num_envs))
        self._forget_call_restarts(mask)
        for k, (env_mask, base) in enumerate(commands):
            if k > 0 and self._infos is not None:
                self._merge_infos(res, {})  # noqa: F821 (set when k > 0): an earlier command's infos are stale
            res = self._pool.reset(base, env_mask)
            self._follow_restarts(res)
            self._note_seeds(env_mask, base)
        obs, _, _, _, infos = self._unpack(res)
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
        if self._pending is not None or self._abandoned is not None:
            self._refuse_if_pending("step")
        if self.is_async:
            if self._one_call:
                return self._pool.send_recv_gym(actions, env_ids, self.pool_infos, self._stats_key)
            with self._caller:
                self._send(actions, env_ids)
                return self._recv()
        if self._one_call:
            return self._pool.step_gym(actions, self.pool_infos, self._stats_key)
        with self._caller:
            res = self._pool.step(self._actions(actions, None))
            self._follow_restarts(res)
            return self._note_restarts(res, self._unpack(res))

    def close_extras(self, **kwargs: Any):
        """Closes the pool (``AsyncVectorEnv``'s ``timeout``/``terminate`` are accepted: the
        workers stop within the shutdown grace, then are killed)."""
        with self._caller:
            self._close()

    def _close(self) -> None:
        self._close_pending()
        self._pool.close()
        if self._calls is not None:
            self._calls.close()
        if self._infos is not None:
            self._infos.close()

    # --- calls into the envs (a side channel, not the step path) ---------------------

    def _start_pool(self, resolved, num_envs: int, pool_args: dict[str, Any]) -> None:
        """Starts the workers (and, for Python envs, the call channel: a private socket per
        worker process, made by the engine when it spawns it)."""
        num_workers = pool_args["num_workers"]
        if resolved.python and 1 <= num_workers <= num_envs:
            from shmenv.calls import CallChannel

            # A replacement worker that does not take the shared fds is waited for as long as a step.
            self._calls = CallChannel(
                num_workers, restart_wait=pool_args["step_timeout"], replaces_workers=self._restart
            )
            pool_args["call_socket"] = True
        try:
            self._pool = _shmenv.Pool(resolved.engine_id, num_envs, pool_args)
        except BaseException:
            if self._calls is not None:
                self._calls.close()
            raise
        self.closed = False
        if self._calls is not None:
            # A changed pid is a restarted worker: the call channel then takes its replacement's socket.
            self._calls.worker_pids = lambda pool=self._pool: pool.worker_pids
            self._calls.take_socket = self._pool.take_call_socket

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

    def _env0_attrs(self) -> dict:
        """Env 0's ``metadata``, ``render_mode`` and ``spaces`` (its observation and action
        spaces, which say whether they nest), through its worker's call channel."""
        try:
            metadata = self.env_call(ops.GET, "metadata", [0])[0]
            try:
                render_mode = self.env_call(ops.GET, "render_mode", [0])[0]
            except WorkerError:
                render_mode = None  # an env without the attribute (not a gym.Env) does not render
            try:
                env_spaces = tuple(
                    self.env_call(ops.GET, name, [0])[0] for name in ("observation_space", "action_space")
                )
            except WorkerError:
                env_spaces = None  # unpicklable spaces: the spec's (composite spaces need them picklable)
        except BaseException:
            self.close()
            raise
        metadata = metadata if isinstance(metadata, dict) else {}
        return {"metadata": metadata, "render_mode": render_mode, "spaces": env_spaces}

    def render(self) -> tuple:
        """Every env's ``render()``, in env order, as Gymnasium's vector envs return it: for
        ``render_mode="rgb_array"`` (or ``"depth_array"``) a tuple of one frame per env, for
        ``"rgb_array_list"`` a tuple of one list of frames per env. The envs render in their
        workers (``make_vec(..., render_mode=...)``) and the frames come back pickled over
        the call side channel (not the shared memory): a few milliseconds per call for
        CartPole's 600x400 frames, meant for videos and evaluation, not for every training
        step. Raises :class:`shmenv.UsageError` when ``render_mode`` is None."""
        self._check_open()
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
        self._pool.send(self._actions(actions, ids), ids)

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
        self._follow_restarts(res)
        return self._note_restarts(res, self._unpack(res))

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

    # --- internals -------------------------------------------------------------------

    def _unpack(self, res):
        side = self._side_obs(res) if self._assembly.side_obs else None
        obs = self._assembly.observations(res.obs, None if side is None else [c for c, _ in side])
        infos = res.infos(self.pool_infos, self._stats_key)
        if res.any_done and res.final_obs is not None:
            done = np.logical_or(res.terminated, res.truncated)
            final = np.full(len(done), None, dtype=object)
            for i in np.flatnonzero(done):
                final[i] = self._assembly.final_observation(res.final_obs, i, None if side is None else side[i][1])
            infos["final_obs"] = final
            infos["_final_obs"] = done
            infos["final_info"] = self._info_columns(res.final_obs, done)
            infos["_final_info"] = done.copy()
        if self._assembly.info_names:  # most envs have none: nothing to do per batch
            infos.update(self._info_columns(res.obs, None))
        if self._infos is not None:
            self._merge_infos(res, infos)
        return obs, res.rewards, res.terminated, res.truncated, infos

    def _side_obs(self, res) -> list[tuple[list, list]]:
        """Each row's side-leaf values (its observation's, and the one before: a final
        observation's under same-step autoreset), fetched from the workers."""
        return self._calls.request(self._shards, res.env_id.tolist(), ops.SIDE_OBS, "")

    def _actions(self, actions: Any, env_ids) -> np.ndarray:
        """The engine's action array for ``env_ids`` (all envs if None); the side leaves'
        values go to their workers first, over the call channel."""
        count = self.num_envs if env_ids is None else len(env_ids)
        packed = self._assembly.actions(actions, count)
        packing = self._assembly.packing
        if packing is not None and packing.side:
            ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in env_ids]
            self._calls.request(self._shards, ids, ops.SIDE_ACTIONS, "", values=packing.side_values(actions, count))
        return packed

    def _info_columns(self, arrays: tuple, rows: np.ndarray | None) -> dict[str, Any]:
        """The arrays a native env reports as infos (spec ``info``: Atari's lives), with
        their ``_name`` masks: every row, or ``rows`` (a final step's values)."""
        out: dict[str, Any] = {}
        # Every array is the caller's: its own mask each, and a copy of a view of the
        # region (``copy=False`` pools' observation arrays, the info ones among them).
        for name, values in self._assembly.info_arrays(arrays).items():
            if rows is None:
                kept = values if values.flags.writeable else values.copy()
                mask = np.ones(len(values), np.bool_)
            else:
                kept, mask = np.where(rows.reshape(-1, *[1] * (values.ndim - 1)), values, 0), rows.copy()
            out[name], out["_" + name] = kept, mask
        return out

    def _start_infos(self) -> InfoArea | None:
        """Python envs: the shared area through which workers pass infos (``infos.py``)."""
        if self._calls is None:
            return None
        area = InfoArea(self._pool, self._shards)
        try:
            self._calls.share_fd(ops.MAP_INFOS, area.fd, area.data())
        except BaseException:
            area.close()
            raise
        area.close_fd()
        return area

    def _merge_infos(self, res, infos: dict[str, Any]) -> None:
        """Adds the infos hosted envs returned for this batch's rows: one call of the
        extension, which adds the numbers (``shmenv.infos``), and for the rows whose envs
        kept other values, a fetch over the call channel."""
        taken = self._pool.take_infos(infos)
        if taken is not None:
            same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
            try:
                self._infos.add_kept(infos, taken, res, self._calls, self._shards, same_step)
            except WorkerDiedError as e:
                # The worker died while it sent this batch's infos: the batch raises, and
                # without a restart policy the pool is closed, as after a death in a step.
                if e.worker is not None:
                    e.env_ids = list(range(*self._shards[e.worker]))
                self.close()
                raise


@with_options
def make_vec(env: Any, num_envs: int, **options: Any) -> ShmVectorEnv:
    """Starts ``num_envs`` envs in worker processes and returns them as a Gymnasium
    ``VectorEnv`` (:class:`ShmVectorEnv`).

    - ``env``: a native (Rust) env id (``shmenv.builtin_env_ids()``, checked first), a
      Gymnasium id (also one registered only in this process), a
      ``gymnasium.envs.registration.EnvSpec``, an entry point ``"package.module:Class"``
      (or the class itself), or an env instance that has a ``spec``. Python envs are built
      in the workers from JSON: ``config`` holds their constructor's keyword arguments.
      Or a zero-argument callable that returns an env (a lambda, a closure,
      ``functools.partial``, a function of ``__main__``), as ``AsyncVectorEnv`` takes: it is
      pickled with cloudpickle, and each worker calls its copy once per env (importable
      module-level functions go by name instead, called with ``config``).
    - ``num_workers``: worker processes (default: one per core, at most ``num_envs``), or
      ``envs_per_worker`` instead (1 gives each env its own process, for libraries that
      allow one instance per process); both may be given when they agree.
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
    - ``episode_stats_key``: the infos key of per-episode return and length ("r", "l") at
      episode ends ("" for none).
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
    - ``trainer_shard`` (sync mode, native envs): the trainer steps the first of
      ``num_workers + 1`` shards of the envs itself while the workers step theirs (default
      ``num_workers``: one fewer than the cores). Where envs are cheap this is one process
      per core instead of a trainer sharing a core with a worker; but those envs run in the
      trainer's process, so a plugin's crash there ends the trainer (docs/python.md).
    - ``pool_infos``: add ``infos["env_id"]`` and ``infos["elapsed_step"]`` to every
      result in sync mode too (async mode always has them, EnvPool style); by default a
      sync pool's infos hold what the envs returned, as ``SyncVectorEnv``'s.
    """
    return ShmVectorEnv(env, num_envs, **options)


def from_fns(env_fns: Sequence[Any], **kwargs: Any) -> ShmVectorEnv:
    """``AsyncVectorEnv(env_fns)``'s shape: one zero-argument callable per env, each
    returning an env; every :func:`make_vec` keyword but ``num_envs`` (``len(env_fns)``).
    The callables are pickled with cloudpickle and env ``i``'s worker calls ``env_fns[i]``
    (one factory sent once when they are all the same object). All envs must have the same
    spaces."""
    from shmenv.resolve import env_fns_target

    env, num_envs = env_fns_target(env_fns, kwargs)
    return make_vec(env, num_envs, **kwargs)
