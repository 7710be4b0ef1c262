"""shmenv's integrations with other libraries, one module (or package) per library, named
after it as TorchRL names its own (``torchrl.envs.libs.<lib>``):

- :mod:`shmenv.libs.sb3`: Stable-Baselines3's ``VecEnv`` (``ShmVecEnv``), and
  :mod:`shmenv.libs.sb3_multiagent`, each agent a row (``AgentRowsVecEnv``);
- :mod:`shmenv.libs.torchrl`: a TorchRL ``EnvBase`` (``ShmEnv``), and
  :mod:`shmenv.libs.torchrl_multiagent`, TorchRL's multi-agent layout (``MultiAgentShmEnv``);
- :mod:`shmenv.libs.rllib`: RLlib's EnvRunners over shmenv pools (``VectorEnvCreator``);
- :mod:`shmenv.libs.envpool`: EnvPool's API (``make``, ``make_gymnasium``, ``make_dm`` ...).

Users import them by their short paths, which re-export each module's public names:
``shmenv.sb3``, ``shmenv.torchrl``, ``shmenv.rllib``, ``shmenv.envpool`` (a drop-in for
``import envpool``), ``shmenv.multiagent.sb3`` and ``shmenv.multiagent.torchrl``. Importing
this package imports none of the libraries.
"""
