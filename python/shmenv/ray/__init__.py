"""``shmenv.ray.make_vec``: one Gymnasium ``VectorEnv`` over shmenv pools in Ray actors,
for more envs than one machine's cores can step. Inside a node, each actor's envs run in
a shmenv pool (worker processes, shared memory); across nodes, Ray carries actions and
results. Ray is imported when a pool is made (``pip install 'shmenv[ray]'``).

Modules: :mod:`~shmenv.ray.vector_env` (:class:`RayVectorEnv`, :func:`make_vec`,
:func:`from_fns`), :mod:`~shmenv.ray.host` (:class:`~shmenv.ray.host.PoolHost`, the actor
that owns one pool on its node), :mod:`~shmenv.ray.channel` (the step path: one TCP
connection per actor), :mod:`~shmenv.ray.faults` (dead actors, restarts) and
:mod:`~shmenv.ray.async_mode` (``send``/``recv`` across actors)."""

from __future__ import annotations

from shmenv.ray.vector_env import RayVectorEnv, from_fns, make_vec

__all__ = ["make_vec", "from_fns", "RayVectorEnv"]
