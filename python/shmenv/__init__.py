"""shmenv: vectorized RL environments stepped by worker processes straight into shared
memory, as a Gymnasium ``VectorEnv`` (``shmenv.make_vec``) and a Stable-Baselines3
``VecEnv`` (``shmenv.sb3.ShmVecEnv``). Workers write observations, rewards and flags into
the shared memory (no pickling, no pipes); each call copies its results once into arrays
you own, or with ``copy=False`` returns the observations as read-only views of that memory.
The ``shmenv`` command (``python -m shmenv``) lists, benchmarks, tunes and watches pools.

>>> import shmenv
>>> envs = shmenv.make_vec("CartPole-v1", num_envs=8, num_workers=2, seed=0)
>>> obs, infos = envs.reset()
>>> obs.shape
(8, 4)
>>> envs.close()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shmenv._shmenv import builtin_env_ids

# The exception classes are part of the API; ClosedError loads on first use (its base class
# is Gymnasium's, see shmenv.errors).
from shmenv.errors import (
    ActionError,
    ActionTypeError,
    ActorDiedError,
    BuildError,
    ConfigError,
    Error,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    NotEnoughMemoryError,
    StepError,
    UnknownEnvError,
    UsageError,
    WorkerDiedError,
    WorkerError,
    WorkerTimeoutError,
)

if TYPE_CHECKING:
    # The names loaded on first use (see _LAZY), as type checkers see them: importing them
    # here at run time would import gymnasium.
    from shmenv.errors import ClosedError
    from shmenv.options import PoolOptions
    from shmenv.vector import ShmVectorEnv, from_fns, make_vec

__version__ = "0.1.0"

# The vector env imports gymnasium (a few hundred ms); worker processes, which import this
# package too, never need it, so it loads on first use.
_LAZY = {
    "make_vec": "shmenv.vector",
    "from_fns": "shmenv.vector",
    "ShmVectorEnv": "shmenv.vector",
    "PoolOptions": "shmenv.options",
    "ClosedError": "shmenv.errors",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shmenv' has no attribute {name!r}")


def __dir__():
    return sorted(__all__ + ["__version__"])


__all__ = [
    "make_vec",
    "from_fns",
    "ShmVectorEnv",
    "PoolOptions",
    "builtin_env_ids",
    # shmenv.errors.__all__, in its order (tests/test_package_names.py checks that they agree):
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
    "ClosedError",
    "UsageError",
]
