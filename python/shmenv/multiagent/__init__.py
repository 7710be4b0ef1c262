"""``shmenv.multiagent``: multi-agent envs (PettingZoo ``ParallelEnv``s, ``AECEnv``s
through PettingZoo's converters, MeltingPot-style dmlab2d games) stepped in shmenv's
worker processes, with agent axes, per-agent rewards and flags and an ``active`` mask.

- :func:`make_vec` / :func:`from_fns`: a Gymnasium-style vector env with arrays
  ``[num_envs, num_agents, ...]`` (:class:`MultiAgentVectorEnv`);
- :func:`make_agent_vec`: each agent a row (``[num_envs * num_agents, ...]``), a Gymnasium
  ``VectorEnv`` for parameter-shared trainers (:class:`AgentRowsVectorEnv`);
  ``shmenv.multiagent.sb3.AgentRowsVecEnv`` is the same as a Stable-Baselines3 ``VecEnv``;
- ``shmenv.multiagent.torchrl.MultiAgentShmEnv``: TorchRL's multi-agent layout
  (``("agents", "observation")``, group maps as ``PettingZooWrapper`` builds them);
- ``shmenv.multiagent.lab2d.Lab2dParallelEnv``: a dmlab2d game (``commons_harvest``) as a
  PettingZoo ``ParallelEnv``, built inside the worker.

>>> import shmenv.multiagent
>>> envs = shmenv.multiagent.make_vec("mpe2.simple_spread_v3", 4, num_workers=2, seed=0)
>>> obs, infos = envs.reset()
>>> obs.shape                       # [num_envs, num_agents, 18]
(4, 3, 18)
>>> envs.close()

docs/multiagent.md describes the API and the encoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shmenv.multiagent.layout import AgentDataError, DuplicateAgentsError, SpaceMismatchError

if TYPE_CHECKING:
    # The names loaded on first use (see _LAZY), as type checkers see them.
    from shmenv.multiagent.adapter import ParallelAdapter
    from shmenv.multiagent.flat import AgentRowsVectorEnv, make_agent_vec
    from shmenv.multiagent.vector import MultiAgentVectorEnv, from_fns, make_vec

__all__ = [
    "make_vec",
    "from_fns",
    "MultiAgentVectorEnv",
    "make_agent_vec",
    "AgentRowsVectorEnv",
    "SpaceMismatchError",
    "DuplicateAgentsError",
    "AgentDataError",
    "ParallelAdapter",
]

# Loaded on first use: workers import shmenv.multiagent.adapter, never the vector envs.
_LAZY = {
    "make_vec": "shmenv.multiagent.vector",
    "from_fns": "shmenv.multiagent.vector",
    "MultiAgentVectorEnv": "shmenv.multiagent.vector",
    "make_agent_vec": "shmenv.multiagent.flat",
    "AgentRowsVectorEnv": "shmenv.multiagent.flat",
    "ParallelAdapter": "shmenv.multiagent.adapter",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'shmenv.multiagent' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
