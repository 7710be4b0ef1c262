"""One caller at a time: the guard every call of a :class:`shmenv.ShmVectorEnv` that
touches its pool or its call channel holds, so that a second thread's call raises
:class:`shmenv.errors.UsageError` at once (naming the thread inside) instead of
interleaving its messages with the first one's or waiting on a socket. Re-entrant: a call
that makes another (``step`` -> ``send``/``recv``, ``render`` -> ``call``) goes through."""

from __future__ import annotations

import threading

from shmenv.errors import UsageError


def thread_name(ident: int | None) -> str:
    """The name of the live thread with this ``threading.get_ident()``, as a message says it."""
    for t in threading.enumerate():
        if t.ident == ident:
            return f"thread {t.name!r}"
    return "another thread"


def busy_error(ident: int | None) -> UsageError:
    """The error for a call made while thread ``ident`` is inside one on the same pool."""
    return UsageError(
        f"this pool is in a call from {thread_name(ident)}: a pool is used from one thread at a time; give "
        "each thread its own pool, or guard this one with a lock"
    )


class OneCaller:
    """A non-blocking, re-entrant guard: ``with guard:`` enters, or raises
    :class:`UsageError` when another thread is inside."""

    __slots__ = ("_lock", "_depth", "owner")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # calls of the owner's inside, nested ones included
        self.owner: int | None = None
        """The thread inside (its ``threading.get_ident()``), None when none is."""

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            raise busy_error(self.owner)
        self.owner = threading.get_ident()
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.owner = None
        self._lock.release()
