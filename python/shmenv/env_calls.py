"""What runs on the envs' Python objects in their workers, over the call side channel
(``shmenv.calls``): ``call``, ``get_attr``, ``set_attr``, ``call_async``/``call_wait``,
``np_random`` and reset options, as Gymnasium's ``AsyncVectorEnv`` offers them. Native
(Rust, C) envs have no Python object: they answer :data:`NATIVE_ATTRS` only."""

from __future__ import annotations

from typing import Any

from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

from shmenv.errors import ClosedError, InvalidArgumentError

NATIVE_ATTRS = ("render_mode", "spec", "metadata", "observation_space", "action_space")
"""Attributes a native (Rust) env answers through ``get_attr``/``call``: it has no Python object."""



class EnvCalls:
    """Mixed into :class:`shmenv.vector.ShmVectorEnv`, whose ``closed``, ``_calls`` (the
    channel, None for native envs), ``_shards``, ``num_envs``, ``env_id``, ``spec`` and
    single spaces it uses."""

    _pending_call: tuple[bool, Any] | None = None

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Calls method `name` of every env with the given (picklable) arguments, or reads
        the attribute when it is not callable; returns the results in env order. Native
        envs answer the attributes of :data:`NATIVE_ATTRS` and ``render`` (None)."""
        if self._calls is None and name == "render":
            return tuple(None for _ in range(self.num_envs))
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
        """Runs `op` ("get", "set", "call", "is_wrapped") on envs `env_ids` in their workers.
        Native envs have no Python objects: "get" and "call" answer :data:`NATIVE_ATTRS`."""
        if self.closed:
            raise ClosedError("the pool is closed (close() was called); build a new one")
        if self._calls is None:
            if op in ("get", "call") and name in NATIVE_ATTRS:
                return [self._native_attr(name) for _ in env_ids]
            raise AttributeError(
                f"{self.env_id} is a native shmenv env: it has no Python object to {op} {name!r} on "
                f"(it answers {', '.join(NATIVE_ATTRS)}; pass settings through config=...)"
            )
        return self._calls.request(self._shards, list(env_ids), op, name, values, args, kwargs)

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
        self.env_call("reset_options", "", targets, values=[options] * len(targets))
