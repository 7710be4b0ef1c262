"""``import shmenv.envpool as envpool``: a drop-in for ``import envpool`` (EnvPool 1.2.5's
``make``, ``make_gymnasium``, ``make_gym``, ``make_dm``, ``make_spec``, ``list_all_envs``)
over shmenv's worker processes. The code is :mod:`shmenv.libs.envpool`; this module
re-exports its public names."""

from shmenv.libs.envpool import (
    DmEnvNotInstalledError,
    EnvPoolEnv,
    EnvSpec,
    list_all_envs,
    make,
    make_dm,
    make_gym,
    make_gymnasium,
    make_spec,
)

__all__ = [
    "make",
    "make_gymnasium",
    "make_gym",
    "make_dm",
    "make_spec",
    "list_all_envs",
    "EnvPoolEnv",
    "EnvSpec",
    "DmEnvNotInstalledError",
]
