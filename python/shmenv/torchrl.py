"""``from shmenv.torchrl import ShmEnv``: a TorchRL ``EnvBase`` over a shmenv pool. The
code is :mod:`shmenv.libs.torchrl`; this module re-exports its public names."""

from shmenv.libs.torchrl import ShmEnv

__all__ = ["ShmEnv"]
