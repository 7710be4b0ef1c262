"""RLlib's new-stack EnvRunners stepping shmenv pools: :class:`VectorEnvCreator` is the env
creator RLlib calls, in each EnvRunner, to build that runner's vector env when
``gym_env_vectorize_mode`` is ``gymnasium.VectorizeMode.VECTOR_ENTRY_POINT``::

    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.tune.registry import register_env
    from shmenv.rllib import VectorEnvCreator

    register_env("shmenv-CartPole-v1", VectorEnvCreator("CartPole-v1", num_workers=2))
    config = (
        PPOConfig()
        .environment("shmenv-CartPole-v1")     # RLlib takes creators by a registered name
        .env_runners(
            num_env_runners=2,                 # EnvRunner actors, each owning one shmenv pool
            num_envs_per_env_runner=16,        # the pool's num_envs
            num_cpus_per_env_runner=2,         # = the pool's workers
            gym_env_vectorize_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT,
        )
    )

One pool per EnvRunner, its workers on the runner's node; Ray places the runners. This
module imports neither Ray nor RLlib."""

from __future__ import annotations

from typing import Any

__all__ = ["VectorEnvCreator"]


class VectorEnvCreator:
    """Builds ``shmenv.make_vec(env, num_envs, **make_vec_kwargs)`` when RLlib calls it
    with the EnvRunner's env config (``config.environment(env_config=...)``) plus
    ``num_envs`` (``num_envs_per_env_runner``). A non-empty env config becomes the pool's
    ``config`` (the env's keyword arguments), unless ``make_vec_kwargs`` has one.

    Defaults that suit EnvRunners: ``pin_workers=False`` (several runners may share a node,
    and pins of one runner's workers would collide with another's); autoreset
    "next_step", which RLlib's ``SingleAgentEnvRunner`` expects; owned arrays
    (``copy=True``), since RLlib keeps rows of observations in its episodes. Pass
    ``num_workers`` and set ``num_cpus_per_env_runner`` to the same number, so Ray reserves
    the cores the pool's workers use."""

    def __init__(self, env: Any, **make_vec_kwargs: Any):
        for key in ("num_envs", "copy", "autoreset_mode", "batch_size"):
            if key in make_vec_kwargs:
                from shmenv.errors import InvalidArgumentError

                raise InvalidArgumentError(
                    f"VectorEnvCreator takes no {key}: RLlib sets num_envs (num_envs_per_env_runner) and its "
                    "EnvRunners need owned arrays, next-step autoreset and sync steps"
                )
        self.env = env
        self.make_vec_kwargs = {"pin_workers": False, **make_vec_kwargs}

    def __call__(self, env_config: dict | None = None):
        from shmenv.vector import make_vec

        env_config = dict(env_config or {})
        num_envs = env_config.pop("num_envs", 1)
        kwargs = dict(self.make_vec_kwargs)
        if env_config and "config" not in kwargs:
            kwargs["config"] = env_config
        return make_vec(self.env, num_envs, **kwargs)

    def __repr__(self) -> str:
        return f"VectorEnvCreator({self.env!r}, {self.make_vec_kwargs})"
