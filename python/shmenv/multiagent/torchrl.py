"""``from shmenv.multiagent.torchrl import MultiAgentShmEnv``: multi-agent envs in
TorchRL's multi-agent layout. The code is :mod:`shmenv.libs.torchrl_multiagent`; this
module re-exports its public names."""

from shmenv.libs.torchrl_multiagent import MultiAgentShmEnv

__all__ = ["MultiAgentShmEnv"]
