"""``AsyncVectorEnv``'s split calls on a :class:`shmenv.ShmVectorEnv`: ``reset_async`` /
``reset_wait`` and ``step_async`` / ``step_wait``, with its states, exception types and
messages (``AlreadyPendingCallError``, ``NoAsyncCallError``, ``multiprocessing.TimeoutError``)
and its warning when ``close()`` finds a call pending.

The call runs on a helper thread (the pool releases the GIL while it waits for the
workers), so ``*_async`` returns at once and ``*_wait(timeout)`` can give up: after a
timeout the call still finishes in the background and its results are dropped, as
``AsyncVectorEnv`` drops them; the next call (or ``close()``) waits for it first. This is
Gymnasium's API for code written against ``AsyncVectorEnv``; EnvPool-style ``send``/``recv``
(``batch_size < num_envs``) is shmenv's own asynchronous mode.
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any, Callable

from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError
from gymnasium.logger import warn


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
    """Mixed into :class:`shmenv.vector.ShmVectorEnv` (its ``reset``, ``step`` and
    ``_check_open``)."""

    _pending: _Call | None = None
    _abandoned: _Call | None = None  # a call whose wait timed out: finishing in the background

    def reset_async(self, seed: Any = None, options: dict | None = None) -> None:
        """Starts ``reset(seed=seed, options=options)``; :meth:`reset_wait` returns it."""
        self._start("reset", lambda: self.reset(seed=seed, options=options))

    def reset_wait(self, timeout: float | None = None) -> tuple:
        """The pending reset's ``(obs, infos)``, waiting at most ``timeout`` seconds
        (``multiprocessing.TimeoutError`` after that, as ``AsyncVectorEnv``)."""
        return self._wait("reset", timeout)

    def step_async(self, actions: Any) -> None:
        """Starts ``step(actions)``; :meth:`step_wait` returns it."""
        self._start("step", lambda: self.step(actions))

    def step_wait(self, timeout: float | None = None) -> tuple:
        """The pending step's results, waiting at most ``timeout`` seconds."""
        return self._wait("step", timeout)

    def _refuse_if_pending(self, kind: str) -> None:
        """``reset()``/``step()`` (``kind``) while a split call runs: Gymnasium's error
        (the helper thread's own call passes)."""
        call = self._pending or self._abandoned
        if call is not None and threading.current_thread() is not call.thread:
            if self._pending is None:
                self._finish_abandoned(None)
                return
            raise AlreadyPendingCallError(
                f"Calling `{kind}` while waiting for a pending call to `{call.kind}` to complete", call.kind
            )

    def _start(self, kind: str, run: Callable[[], Any]) -> None:
        self._check_open()
        if self._pending is not None:
            raise AlreadyPendingCallError(
                f"Calling `{kind}_async` while waiting for a pending call to `{self._pending.kind}` to complete",
                self._pending.kind,
            )
        self._finish_abandoned(None)
        self._pending = _Call(kind, run)

    def _wait(self, kind: str, timeout: float | None) -> Any:
        call = self._pending
        if call is None or call.kind != kind:
            raise NoAsyncCallError(f"Calling `{kind}_wait` without any prior call to `{kind}_async`.", kind)
        call.thread.join(timeout)
        self._pending = None
        if call.thread.is_alive():
            self._abandoned = call
            raise multiprocessing.TimeoutError(f"The call to `{kind}_wait` has timed out after {timeout} second(s).")
        if call.error is not None:
            raise call.error
        return call.result

    def _finish_abandoned(self, timeout: float | None) -> None:
        """Waits for a call whose wait timed out (its results are dropped)."""
        if self._abandoned is not None:
            self._abandoned.thread.join(timeout)
            if not self._abandoned.thread.is_alive():
                self._abandoned = None

    def _close_pending(self) -> None:
        """Before ``close()``: warns of a pending call, as ``AsyncVectorEnv`` does, and lets
        it (and an abandoned one) finish, so that the pool is not closed under it."""
        if self._pending is not None:
            warn(f"Calling `close` while waiting for a pending call to `{self._pending.kind}` to complete.")
            self._pending.thread.join()
            self._pending = None
        self._finish_abandoned(None)
