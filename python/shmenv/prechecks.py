"""The checks every shmenv vector env makes before it reaches its backend, written once as
plain functions.

The local pool (:class:`shmenv.vector.ShmVectorEnv`), the Ray pool
(:class:`shmenv.ray.RayVectorEnv`), EnvPool's front (:class:`shmenv.libs.envpool.env.EnvPoolEnv`)
and the each-agent-a-row env call them with their own state: a call on a closed env, a
``step`` before the first ``reset``, a ``reset_mask`` of the wrong shape or dtype, or a
sync-only call on an async pool raise the same exception with the same message whichever
backend runs the envs.
"""

from __future__ import annotations

from shmenv.arguments import _reset_options
from shmenv.errors import UsageError, closed

__all__ = ["check_open", "check_reset", "check_async", "reset_request"]

POOL_CLOSED_WHY = "close() was called"
"""Why a pool is closed, as :class:`shmenv.ClosedError` says it by default."""


def check_open(is_closed: bool, what: str = "pool", why: str = POOL_CLOSED_WHY) -> None:
    """Raises :class:`shmenv.ClosedError` when ``is_closed``, naming what is closed
    (``what``: "pool", "env") and how it got closed (``why``)."""
    if is_closed:
        raise closed(what, why)


def check_reset(
    is_closed: bool, has_reset: bool, call: str = "step", what: str = "pool", why: str = POOL_CLOSED_WHY
) -> None:
    """Open (as :func:`check_open`), and reset at least once: ``call`` needs a first ``reset()``."""
    if is_closed:
        raise closed(what, why)
    if not has_reset:
        raise UsageError(f"{call}() called before reset(): call reset() first")


def check_async(is_async: bool, call: str) -> None:
    """``call`` is for async pools (``batch_size < num_envs``): raises :class:`shmenv.UsageError`
    on a sync one."""
    if not is_async:
        raise UsageError(f"{call}() is for async pools (batch_size < num_envs); this pool is sync: use step()")


def reset_request(options: dict | None, num_envs: int, is_async: bool) -> tuple[list[bool] | None, dict]:
    """``reset``'s ``options`` checked: the ``reset_mask`` (sync mode only; a bool array with
    one entry per env and a True) and the options for the envs' own ``reset``."""
    return _reset_options(options, num_envs, is_async)
