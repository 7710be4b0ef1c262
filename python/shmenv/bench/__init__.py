"""Benchmarks: ``python -m shmenv.bench`` (:mod:`shmenv.bench.__main__`: the comparison with
Gymnasium's vector envs and EnvPool, ``--workload`` and ``--contend``),
``python -m shmenv.bench.infos`` and ``python -m shmenv.bench.ray``. Nothing here is
imported by the library itself."""
