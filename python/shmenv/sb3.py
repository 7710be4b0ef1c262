"""``from shmenv.sb3 import ShmVecEnv``: a Stable-Baselines3 ``VecEnv`` over a shmenv pool.
The code is :mod:`shmenv.libs.sb3`; this module re-exports its public names."""

from shmenv.libs.sb3 import HAVE_SB3, ShmVecEnv

__all__ = ["HAVE_SB3", "ShmVecEnv"]
