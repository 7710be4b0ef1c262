"""The checks every shmenv vector env makes before it reaches its backend, written once.

:class:`VectorFront` is mixed into the local pool (:class:`shmenv.vector.ShmVectorEnv`),
the Ray pool (:class:`shmenv.ray.RayVectorEnv`) and EnvPool's front
(:class:`shmenv.envpool.env.EnvPoolEnv`): a call on a closed env, a ``step`` before the
first ``reset``, a ``reset_mask`` of the wrong shape or dtype, or a sync-only call on an
async pool raise the same exception with the same message whichever backend runs the envs.
"""

from __future__ import annotations

from shmenv.arguments import _reset_options
from shmenv.errors import UsageError, closed


class VectorFront:
    """Argument, mask, closed and mode checks shared by the vector envs, and the context
    manager (``with ... as envs:`` closes them). The class using it has ``closed``,
    ``close()``, ``num_envs``, ``is_async`` and ``_has_reset``, and may name what is closed
    (``_closed_what``) and how it gets closed (``_closed_why``)."""

    closed: bool
    num_envs: int
    is_async: bool
    _has_reset: bool
    _closed_what: str = "pool"
    _closed_why: str = "close() was called"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()  # type: ignore[attr-defined]
        return False

    def _check_open(self) -> None:
        """Raises :class:`shmenv.ClosedError` once the env is closed."""
        if self.closed:
            raise closed(self._closed_what, self._closed_why)

    def _check_reset(self, call: str = "step") -> None:
        """Open, and reset at least once: stepping needs a first ``reset()``."""
        self._check_open()
        if not self._has_reset:
            raise UsageError(f"{call}() called before reset(): call reset() first")

    def _check_async(self, call: str) -> None:
        """``call`` is for async pools (``batch_size < num_envs``)."""
        if not self.is_async:
            raise UsageError(f"{call}() is for async pools (batch_size < num_envs); this pool is sync: use step()")

    def _reset_request(self, options: dict | None) -> tuple[list[bool] | None, dict]:
        """``reset``'s ``options`` checked: the ``reset_mask`` (sync mode only; a bool array
        with one entry per env and a True) and the options for the envs' own ``reset``."""
        return _reset_options(options, self.num_envs, self.is_async)
