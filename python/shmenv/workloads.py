"""The former home of the benchmarks' hosted envs and the native plugins' data paths, kept
so that ``shmenv.workloads:make_atari`` and ``from shmenv.workloads import ale_roms`` keep
working: the envs are :mod:`shmenv.bench.envs`', the paths :mod:`shmenv.assets`'. This
module re-exports them."""

from shmenv.assets import ale_roms, gymnasium_model
from shmenv.bench.envs import make_atari, make_gymnasium

__all__ = ["make_atari", "make_gymnasium", "ale_roms", "gymnasium_model"]
