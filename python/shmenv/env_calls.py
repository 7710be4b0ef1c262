"""What runs on the envs' Python objects in their workers, over the call side channel
(``shmenv.calls``): ``call``, ``get_attr``, ``set_attr``, ``call_async``/``call_wait``,
``np_random`` and reset options, as Gymnasium's ``AsyncVectorEnv`` offers them. Native
(Rust, C) envs have no Python object: they answer :data:`NATIVE_ATTRS` only."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

from shmenv.errors import InvalidArgumentError, UsageError, WorkerDiedError
from shmenv.worker import ops

NATIVE_ATTRS = ("render_mode", "spec", "metadata", "observation_space", "action_space")
"""Attributes a native (Rust) env answers through ``get_attr``/``call``: it has no Python object."""


class EnvCalls:
    """Mixed into :class:`shmenv.vector.ShmVectorEnv`, whose ``_caller`` (the one-caller
    guard), ``_check_open``, ``_calls`` (the
    channel, None for native envs), ``_shards``, ``num_envs``, ``env_id``, ``spec``, single
    spaces, ``_pool``, ``_infos``, ``_assembly``, ``is_async``, ``_restart`` (the pool
    restarts dead workers), ``_has_reset`` and ``_restarted_by_calls`` it uses."""

    _pending_call: tuple[bool, Any] | None = None

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Calls method `name` of every env with the given (picklable) arguments, or reads
        the attribute when it is not callable; returns the results in env order. Native
        envs answer the attributes of :data:`NATIVE_ATTRS` and ``render`` (None)."""
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
        """Runs `op` (one of :mod:`shmenv.worker.ops`: "get", "set", "call", "is_wrapped" ...)
        on envs `env_ids` in their workers.
        Native envs have no Python objects: "get" and "call" answer :data:`NATIVE_ATTRS`.
        Raises :class:`UsageError` while another thread is inside a call on this pool."""
        with self._caller:
            return self._env_call(op, name, env_ids, values, args, kwargs)

    def _env_call(self, op: str, name: str, env_ids, values, args: tuple, kwargs: dict | None):
        self._check_open()
        if self._calls is None:
            if op in (ops.GET, ops.CALL) and name in NATIVE_ATTRS:
                return [self._native_attr(name) for _ in env_ids]
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

    def _native_attr(self, name: str) -> Any:
        return {
            "render_mode": None,
            "spec": self.spec,
            "metadata": {"render_modes": []},
            "observation_space": self.single_observation_space,
            "action_space": self.single_action_space,
        }[name]

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Starts :meth:`call`; :meth:`call_wait` returns its results (or raises its error).
        The call runs at once (every worker answers before this returns), so ``call_wait``
        never waits and its ``timeout`` has nothing to bound."""
        if self._pending_call is not None:
            raise AlreadyPendingCallError("call_async was called while a call is pending: call_wait first", "call")
        try:
            self._pending_call = (True, self.call(name, *args, **kwargs))
        except Exception as e:  # noqa: BLE001 - raised again by call_wait, as AsyncVectorEnv does
            self._pending_call = (False, e)

    def call_wait(self, timeout: float | None = None) -> tuple:
        """The results of the pending :meth:`call_async`, in env order."""
        if self._pending_call is None:
            raise NoAsyncCallError("call_wait was called without a pending call_async", "call")
        (ok, value), self._pending_call = self._pending_call, None
        if not ok:
            raise value
        return value

    @property
    def np_random(self) -> tuple:
        """Copies of the envs' random generators (pickled from the workers), as
        ``AsyncVectorEnv.np_random``; native envs have none (``AttributeError``)."""
        return self.get_attr("np_random")

    def _send_reset_options(self, options: dict, mask: list[bool] | None) -> None:
        """Hands ``options`` to every env this reset resets (over the call channel): each
        takes them at that reset, as ``SyncVectorEnv`` passes them to ``env.reset``."""
        if self._calls is None:
            raise InvalidArgumentError(
                f"{self.env_id} is a native shmenv env: its reset takes no options (got {sorted(options)}); "
                "pass settings through config=..."
            )
        targets = [i for i in range(self.num_envs) if mask is None or mask[i]]
        self.env_call(ops.RESET_OPTIONS, "", targets, values=[options] * len(targets))

    def _check_spaces(self, mode: str | tuple, env_spaces: tuple | None) -> None:
        """As ``AsyncVectorEnv`` at start-up: every env's spaces checked in its worker
        against the pool's (env 0's ``env_spaces``, or the single space of a given
        ``observation_mode`` tuple); a mismatch closes the pool and raises Gymnasium's
        ``RuntimeError`` naming both envs. With ``"different"`` or a tuple, sets the batched
        observation space as Gymnasium does."""
        from shmenv.spaces import modes

        try:
            if env_spaces is None:  # unpicklable spaces: the workers' own comparison of their spec
                if any(self.env_call(ops.MISMATCHED, "", range(self.num_envs))):
                    raise RuntimeError(modes.SAME_MESSAGE.format(detail="(the spaces cannot be pickled to say more)"))
                return
            single = mode[1] if isinstance(mode, tuple) else env_spaces[0]
            kind = "same" if mode == "same" else "different"
            values = [(kind, single, env_spaces[1])] * self.num_envs
            answers = self.env_call(ops.CHECK_SPACES, "", range(self.num_envs), values=values)
            modes.raise_mismatch(mode, answers, single, env_spaces[1])
            batched = modes.batched_observation_space(mode, list(self.get_attr("observation_space")))
        except BaseException:
            self.close()
            raise
        if batched is not None:
            self.single_observation_space = batched[1]
            if not self.is_async:  # an async batch's rows are any envs: its space stays the single one's, batched
                self.observation_space = batched[0]

    # --- restarted workers (max_restarts) ----------------------------------------------

    def _revive(self, workers: list[int]) -> None:
        """A call found ``workers`` dead: the pool restarts them now, through the same engine
        path as its next step would (and within the same budget: with none left this raises
        the step's :class:`~shmenv.WorkerDiedError` and the pool is closed). Async mode: an
        empty ``send``, after which the envs come back restarted in later batches, as after
        any death. Sync mode: a reset command that resets no env, in which only the
        replacements reset theirs (it counts as a reset for ``copy=False`` views); the next
        ``step`` reports those envs, truncated, in ``infos["restarted_envs"]``."""
        if not self._has_reset:
            raise UsageError(
                f"workers {workers} died before the pool's first reset, so calls cannot reach their envs yet: "
                "reset() starts their replacements (max_restarts); call reset() first, then call again"
            )
        before = list(self._pool.worker_pids)
        if self.is_async:
            action_dtype = self._assembly.action_dtype
            no_actions = np.zeros(0, np.uint8 if action_dtype == np.bool_ else action_dtype)
            self._pool.send(no_actions, np.zeros(0, np.int64))
        else:
            res = self._pool.reset(None, [False] * self.num_envs)
            self._restarted_by_calls.update(res.restarted_envs)
        if list(self._pool.worker_pids) == before:
            time.sleep(0.01)  # the pool has not seen the death yet (the process is not reaped)
            return
        self._calls.refresh()
        self._infos.forget_tables()

    def _follow_restarts(self, res) -> None:
        """After a worker restart, before this batch's infos are merged: the call channel
        takes the replacement's connection and sends it the info flag area, so its envs'
        infos (this batch's reset infos included) and calls reach the trainer. Never
        raises: a replacement that died meanwhile is left to the pool's next restart (the
        batch is returned all the same), and a connection still missing is taken later."""
        if self._restart and self._calls is not None:
            restarted = bool(res.restarted_envs)
            if restarted or self._calls.pending:
                self._calls.refresh(wait=restarted)
                self._infos.forget_tables()

    def _note_restarts(self, res, result):
        """Adds ``infos["restarted_envs"]`` to ``result`` (the Gymnasium tuple of the pool's
        results ``res``) when a worker was restarted (``max_restarts``), during this call or (sync mode) by a call into the envs since the last step: those
        envs' rows are marked truncated (their episodes were cut short)."""
        if self._restart:
            restarted = res.restarted_envs
            if self._restarted_by_calls:
                by_calls = sorted(self._restarted_by_calls)
                self._restarted_by_calls.clear()
                result[3][by_calls] = True
                restarted = sorted(set(restarted).union(by_calls))
            if restarted:
                result[4]["restarted_envs"] = restarted
        return result

    def _forget_call_restarts(self, mask: list[bool] | None) -> None:
        """A reset starts the envs it resets over: a restart by a call is news no more."""
        if mask is None:
            self._restarted_by_calls.clear()
        else:
            self._restarted_by_calls.difference_update(i for i in range(self.num_envs) if mask[i])
