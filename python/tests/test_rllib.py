"""RLlib's new-stack EnvRunners stepping shmenv pools (``shmenv.rllib.VectorEnvCreator``):
``examples/rllib_ppo.py`` trains PPO on CartPole-v1 with 2 EnvRunners to a mean return of
150. Runs when RLlib and torch are importable, skipped otherwise."""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on 127.0.0.1
pytest.importorskip("torch", reason="torch is not installed (RLlib's PPO needs it)")
try:  # RLlib raises ImportError (not ModuleNotFoundError) when ray.tune's dependencies are missing
    import ray.rllib  # noqa: F401
except ImportError as e:
    pytest.skip(f"RLlib is not importable (pip install 'ray[rllib]'): {e}", allow_module_level=True)
import ray  # noqa: E402

from shmenv.libs.rllib import VectorEnvCreator  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "rllib_ppo.py")


def load_example():
    spec = importlib.util.spec_from_file_location("rllib_ppo", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_creator_builds_a_shmenv_pool_of_rllibs_num_envs():
    envs = VectorEnvCreator("CartPole-v1", num_workers=1)({"num_envs": 3})
    try:
        assert type(envs).__name__ == "ShmVectorEnv" and envs.num_envs == 3
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (3, 4) and obs.flags.writeable
    finally:
        envs.close()


@pytest.mark.timeout(600)
def test_ppo_with_two_env_runners_on_shmenv_pools_learns_cartpole():
    example = load_example()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        algo = example.build_config(num_env_runners=2, envs_per_runner=8, workers_per_runner=1, seed=0).build_algo()
        try:
            kinds = algo.env_runner_group.foreach_env_runner(
                lambda runner: (type(runner.env.unwrapped).__name__, runner.env.unwrapped.num_envs),
                local_env_runner=False,
            )
            assert kinds == [("ShmVectorEnv", 8)] * 2, kinds
            best = example.train(algo, target=150.0, max_iterations=60)
        finally:
            algo.stop()
    finally:
        ray.shutdown()
    assert best >= 150.0, f"PPO reached a mean return of only {best:.1f}"
