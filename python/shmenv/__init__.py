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

from shmenv import errors as _errors_module
from shmenv._shmenv import builtin_env_ids
from shmenv.errors import __all__ as _errors

# The exception classes are part of the API; ClosedError loads on first use (its base class
# is Gymnasium's, see shmenv.errors).
globals().update({name: getattr(_errors_module, name) for name in _errors if name != "ClosedError"})

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


__all__ = ["make_vec", "from_fns", "ShmVectorEnv", "PoolOptions", "builtin_env_ids", *_errors]
