"""``AsyncVectorEnv``'s split calls, as :class:`shmenv.ShmVectorEnv` offers them:
``reset_async`` / ``reset_wait``, ``step_async`` / ``step_wait`` and ``call_async`` /
``call_wait``, with its states, exception types and messages (``AlreadyPendingCallError``,
``NoAsyncCallError``, ``multiprocessing.TimeoutError``) and its warning when ``close()``
finds a call pending.

:class:`PendingCalls` holds that state for one vector env, which hands it each call to run
and knows nothing else of it. A reset or step runs on a helper thread (the pool releases
the GIL while it waits for the workers), so ``*_async`` returns at once and
``*_wait(timeout)`` can give up: after a timeout the call still finishes in the background
and its results are dropped, as ``AsyncVectorEnv`` drops them; the next call (or
``close()``) waits for it first. ``call_async`` runs the call at once (every worker answers
before it returns) and keeps its result or error for ``call_wait``, which never waits.
This is Gymnasium's API for code written against ``AsyncVectorEnv``; EnvPool-style
``send``/``recv`` (``batch_size < num_envs``) is shmenv's own asynchronous mode.
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any, Callable

from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.logger import warn

__all__ = ["PendingCalls"]


class _Call:
    """One call running on a helper thread: its result or exception once done."""

    def __init__(self, kind: str, run: Callable[[], Any]):
        self.kind = kind
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(run,), name=f"shmenv-{kind}", daemon=True)
        self.thread.start()

    def _run(self, run: Callable[[], Any]) -> None:
        try:
            self.result = run()
        except BaseException as e:  # noqa: BLE001 - raised again by the *_wait call
            self.error = e


class PendingCalls:
    """The split calls of one vector env: at most one reset or step in flight (``pending``),
    one whose wait timed out and that finishes in the background (``abandoned``), and the
    outcome of a ``call_async`` not waited for yet. ``busy`` is True while a reset or step
    is pending or abandoned: the env's ``reset``/``step`` then ask :meth:`refuse`."""

    def __init__(self) -> None:
        self.pending: _Call | None = None
        self.abandoned: _Call | None = None
        self.busy = False
        self._call_outcome: tuple[bool, Any] | None = None

    def _note(self) -> None:
        self.busy = self.pending is not None or self.abandoned is not None

    def start(self, kind: str, run: Callable[[], Any]) -> None:
        """Starts ``run`` (the ``kind`` call, "reset" or "step") on a helper thread, after
        any abandoned call finished; raises ``AlreadyPendingCallError`` while one is pending."""
        if self.pending is not None:
            raise AlreadyPendingCallError(
                f"Calling `{kind}_async` while waiting for a pending call to `{self.pending.kind}` to complete",
                self.pending.kind,
            )
        self._finish_abandoned()
        self.pending = _Call(kind, run)
        self._note()

    def wait(self, kind: str, timeout: float | None) -> Any:
        """The pending ``kind`` call's result (or raises its error), waiting at most
        ``timeout`` seconds: ``multiprocessing.TimeoutError`` after that, and the call is
        abandoned (it finishes in the background; its result is dropped)."""
        call = self.pending
        if call is None or call.kind != kind:
            raise NoAsyncCallError(f"Calling `{kind}_wait` without any prior call to `{kind}_async`.", kind)
        call.thread.join(timeout)
        self.pending = None
        if call.thread.is_alive():
            self.abandoned = call
            self._note()
            raise multiprocessing.TimeoutError(f"The call to `{kind}_wait` has timed out after {timeout} second(s).")
        self._note()
        if call.error is not None:
            raise call.error
        return call.result

    def refuse(self, kind: str) -> None:
        """Before ``reset()``/``step()`` (``kind``) while ``busy``: Gymnasium's
        ``AlreadyPendingCallError`` while a split call is pending; waits for an abandoned one
        to finish. The helper thread's own call passes."""
        call = self.pending or self.abandoned
        if call is not None and threading.current_thread() is not call.thread:
            if self.pending is None:
                self._finish_abandoned()
                return
            raise AlreadyPendingCallError(
                f"Calling `{kind}` while waiting for a pending call to `{call.kind}` to complete", call.kind
            )

    def _finish_abandoned(self) -> None:
        """Waits for a call whose wait timed out (its results are dropped)."""
        if self.abandoned is not None:
            self.abandoned.thread.join()
            self.abandoned = None
            self._note()

    def close(self) -> None:
        """Before the env closes: warns of a pending call, as ``AsyncVectorEnv`` does, and
        lets it (and an abandoned one) finish, so that the pool is not closed under it."""
        if self.pending is not None:
            warn(f"Calling `close` while waiting for a pending call to `{self.pending.kind}` to complete.")
            self.pending.thread.join()
            self.pending = None
        self._finish_abandoned()
        self._note()

    def call_async(self, run: Callable[[], tuple]) -> None:
        """Runs ``run`` (a ``call``) now and keeps its results, or its exception, for
        :meth:`call_wait`, as ``AsyncVectorEnv`` raises a call's error at ``call_wait``."""
        if self._call_outcome is not None:
            raise AlreadyPendingCallError("call_async was called while a call is pending: call_wait first", "call")
        try:
            self._call_outcome = (True, run())
        except Exception as e:  # noqa: BLE001 - raised again by call_wait, as AsyncVectorEnv does
            self._call_outcome = (False, e)

    def call_wait(self) -> tuple:
        """The results of the pending :meth:`call_async` (or raises its error)."""
        if self._call_outcome is None:
            raise NoAsyncCallError("call_wait was called without a pending call_async", "call")
        (ok, value), self._call_outcome = self._call_outcome, None
        if not ok:
            raise value
        return value
