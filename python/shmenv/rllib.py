"""``from shmenv.rllib import VectorEnvCreator``: RLlib's EnvRunners stepping shmenv pools.
The code is :mod:`shmenv.libs.rllib`; this module re-exports its public names."""

from shmenv.libs.rllib import VectorEnvCreator

__all__ = ["VectorEnvCreator"]
