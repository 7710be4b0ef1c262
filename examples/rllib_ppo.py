"""PPO on CartPole-v1 with RLlib's new API stack, 2 EnvRunners, each stepping its envs in a
shmenv pool (worker processes writing into shared memory) instead of RLlib's in-process
gymnasium vector env.

    pip install 'ray[rllib]' torch ./python
    python examples/rllib_ppo.py                       # local Ray; stops at a mean return of 150
    python examples/rllib_ppo.py --address auto        # on a running Ray cluster

What matters in the config: ``gym_env_vectorize_mode=VECTOR_ENTRY_POINT`` (the creator
returns a whole VectorEnv), one shmenv pool per EnvRunner (``num_envs_per_env_runner`` is its
``num_envs``), ``num_cpus_per_env_runner`` equal to the pool's workers, and CPU pinning off
(``VectorEnvCreator``'s default), since several runners may share a node.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from shmenv.rllib import VectorEnvCreator


def build_config(num_env_runners: int = 2, envs_per_runner: int = 8, workers_per_runner: int = 1, seed: int = 0):
    """PPO for CartPole-v1 (shmenv's native CartPole, step for step Gymnasium's). RLlib
    takes a creator by a registered name (``ray.init`` must have run)."""
    from ray.tune.registry import register_env

    register_env("shmenv-CartPole-v1", VectorEnvCreator("CartPole-v1", num_workers=workers_per_runner))
    return (
        PPOConfig()
        .environment("shmenv-CartPole-v1")
        .env_runners(
            num_env_runners=num_env_runners,
            num_envs_per_env_runner=envs_per_runner,
            num_cpus_per_env_runner=workers_per_runner,
            gym_env_vectorize_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT,
        )
        .training(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01, train_batch_size_per_learner=2000, minibatch_size=128)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True))
        .debugging(seed=seed)
    )


def train(algo, target: float = 150.0, max_iterations: int = 60, log=print) -> float:
    """Trains until the mean episode return reaches ``target``; returns the best mean."""
    best = float("-inf")
    for i in range(max_iterations):
        result = algo.train()
        mean = result["env_runners"].get("episode_return_mean", float("nan"))
        steps = result["env_runners"].get("num_env_steps_sampled_lifetime", 0)
        best = max(best, mean) if mean == mean else best
        log(f"iteration {i + 1}: mean return {mean:.1f} after {steps:.0f} env steps")
        if best >= target:
            break
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="Ray cluster address (default: start Ray locally)")
    parser.add_argument("--env-runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=8)
    parser.add_argument("--workers-per-runner", type=int, default=1)
    parser.add_argument("--target", type=float, default=150.0)
    parser.add_argument("--max-iterations", type=int, default=60)
    args = parser.parse_args()

    import ray

    ray.init(address=args.address)
    algo = build_config(args.env_runners, args.envs_per_runner, args.workers_per_runner).build_algo()
    try:
        best = train(algo, args.target, args.max_iterations)
    finally:
        algo.stop()
    print(f"best mean return: {best:.1f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
