"""Exceptions raised by shmenv. Messages are the engine's: they say what went wrong and
what to do. Details are attributes (``env_id``, ``worker``, ``pid``, ``exit`` ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


class Error(Exception):
    """Base class of every shmenv error."""


class BuildError(Error):
    """The pool could not be built (workers did not start, or refused the env)."""


class UnknownEnvError(BuildError, ValueError):
    """The env id is not registered; ``registered`` lists the ids that are,
    ``closest`` the nearest one."""

    env_id: str
    registered: list
    closest: "str | None"


class ConfigError(BuildError, ValueError):
    """The env refused its config (unknown or ill-typed key)."""


class InvalidArgumentError(BuildError, ValueError):
    """A pool parameter is out of range (num_envs, num_workers, batch_size ...)."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong type where Gymnasium's vector envs raise ``TypeError``
    (a ``reset_mask`` that is not bool)."""


class NotEnoughMemoryError(BuildError, MemoryError):
    """The pool would not fit in the memory this process may use (``MemAvailable`` or the
    limit of its memory cgroup, v1 or v2), checked before any worker starts: ``num_envs``
    asked for, ``needed`` (estimated bytes: the shared region and the workers' envs),
    ``available`` (bytes), ``fits`` (the most envs that fit)."""

    num_envs: int
    needed: int
    available: "int | None"
    fits: int


class StepError(Error):
    """A call on a running pool failed."""


class ActionError(StepError, ValueError):
    """Actions were refused before any worker saw them (which env, what was expected);
    the pool is unchanged."""


class ActionTypeError(ActionError, TypeError):
    """Actions that are not a batch (one number for a pool of envs), where Gymnasium's
    vector envs raise ``TypeError``."""


class WorkerDiedError(StepError):
    """A worker process ended (killed, crashed, exited). ``worker``, ``pid``, ``env_ids``
    (the envs it hosted) and ``exit`` ("killed by signal 9", "exit code 1") say which and
    how; ``oom_kill`` is True when the kernel's OOM killer ended it (it was SIGKILLed while
    an ``oom_kill`` counter of this process's memory cgroup, or of the machine, rose: the
    message names the counter), during start-up or while the pool ran. The pool is
    closed."""

    worker: int
    pid: "int | None"  # None when the process is not known (a worker that died before it said hello)
    env_ids: "list[int] | None"
    exit: str
    output: str  # the last lines the worker wrote to stdout/stderr
    oom_kill: bool = False


class ActorDiedError(WorkerDiedError):
    """A Ray actor of a :func:`shmenv.ray.make_vec` env ended (killed, crashed, its node
    lost) and had no restarts left. ``actor`` (its index), ``actor_id``, ``node_id``,
    ``pid`` (of the actor process, on its node) and ``env_ids`` (the global env ids it
    hosted) say which; ``exit`` is Ray's account of the death. ``worker`` is ``actor``. The
    env is closed: its other actors are released."""

    # None only in an instance made without them (Python makes one so when it unpickles it,
    # before it restores the attributes).
    actor: "int | None"
    worker: "int | None"
    actor_id: "str | None"
    node_id: "str | None"

    def __init__(
        self,
        message: str,
        *,
        actor: int | None = None,
        actor_id: str | None = None,
        node_id: str | None = None,
        pid: int | None = None,
        env_ids: list[int] | None = None,
        exit: str = "",
    ):
        super().__init__(message)
        self.actor = self.worker = actor
        self.actor_id, self.node_id, self.pid = actor_id, node_id, pid
        self.env_ids, self.exit, self.output = env_ids, exit, ""


class WorkerError(StepError):
    """An env failed inside its worker (a Rust panic or a Python exception); ``env_id``
    names it when known, ``worker`` otherwise, and ``traceback`` holds the worker's full
    traceback text (Python envs) or panic message. After a failed step the pool is closed;
    after a failed ``call``/``get_attr``/``set_attr`` it stays usable."""

    env_id: "int | None"
    worker: "int | None"
    traceback: "str | None"


class WorkerTimeoutError(StepError, TimeoutError):
    """Hang detection (``step_timeout=``): workers did not answer in time. ``workers`` and
    ``env_ids`` name them; the pool is closed and its workers stopped."""

    workers: list
    env_ids: list


if TYPE_CHECKING:
    # What type checkers see; at run time the class is made by _closed_error() on first use.
    from gymnasium.error import ClosedEnvironmentError

    class ClosedError(StepError, ClosedEnvironmentError):
        """The pool was closed (by ``close()`` or by an earlier failure). Also a
        ``gymnasium.error.ClosedEnvironmentError``, as ``AsyncVectorEnv`` raises."""


def _closed_error() -> type:
    # Built on first use: its Gymnasium base class imports gymnasium (~60 ms), which worker
    # processes (they import this package) never need.
    from gymnasium.error import ClosedEnvironmentError

    class ClosedError(StepError, ClosedEnvironmentError):
        """The pool was closed (by ``close()`` or by an earlier failure). Also a
        ``gymnasium.error.ClosedEnvironmentError``, as ``AsyncVectorEnv`` raises."""

    ClosedError.__module__, ClosedError.__qualname__ = __name__, "ClosedError"
    return ClosedError


def closed(what: str = "pool", why: str = "close() was called") -> Exception:
    """The :class:`ClosedError` of any call on a closed pool or env: the one wording
    (the extension raises the same for its pool)."""
    return __getattr__("ClosedError")(f"the {what} is closed ({why}); build a new one")


def __getattr__(name: str) -> Any:
    if name == "ClosedError":
        cls = globals().setdefault("ClosedError", _closed_error())
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class UsageError(StepError, RuntimeError):
    """A call that does not fit the pool's state or mode (step before reset, send to an
    env with an action in flight, step on an async pool ...)."""


__all__ = [
    "Error",
    "BuildError",
    "UnknownEnvError",
    "ConfigError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "NotEnoughMemoryError",
    "StepError",
    "ActionError",
    "ActionTypeError",
    "WorkerDiedError",
    "ActorDiedError",
    "WorkerError",
    "WorkerTimeoutError",
    "ClosedError",  # noqa: F822 (made on first use by the module's __getattr__)
    "UsageError",
]
