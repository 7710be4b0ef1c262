"""``from shmenv.multiagent.sb3 import AgentRowsVecEnv``: multi-agent envs as a Stable-
Baselines3 ``VecEnv``, each agent a row. The code is :mod:`shmenv.libs.sb3_multiagent`;
this module re-exports its public names."""

from shmenv.libs.sb3_multiagent import AgentRowsVecEnv

__all__ = ["AgentRowsVecEnv"]
