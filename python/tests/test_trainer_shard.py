"""``make_vec(..., trainer_shard=True)``: the trainer steps the first shard of native envs
itself. It steps as Gymnasium's ``SyncVectorEnv`` does (built-in and C plugin CartPole, both
auto-reset modes, partial resets), takes one worker fewer by default, and refuses what it
cannot run (async mode, another worker program) before any process starts. Hosted Python envs
in the trainer's shard: test_trainer_shard_hosted.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import shmenv
from shmenv.errors import InvalidArgumentError
from conftest import lockstep_with_partial_resets, step_alike
from test_plugins import compile_plugin

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cartpole_c(tmp_path_factory):
    return compile_plugin("examples/c/cartpole.c", tmp_path_factory.mktemp("plugins"))


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("plugin", [False, True], ids=["builtin", "c-plugin"])
def test_a_trainer_shard_steps_as_sync_vector_env(mode, plugin, cartpole_c, no_leaks):
    n = 5
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n, autoreset_mode=mode)
    env_id, extra = ("CartPoleC-v1", {"plugin": cartpole_c}) if plugin else ("CartPole-v1", {})
    with shmenv.make_vec(env_id, n, num_workers=2, trainer_shard=True, autoreset_mode=mode, **extra) as envs:
        assert envs.num_workers == 2 and len(envs.worker_pids) == 2
        obs, _ = envs.reset(seed=7)
        want, _ = ref.reset(seed=7)
        np.testing.assert_array_equal(obs, want)
        ends = lockstep_with_partial_resets(envs, ref, n, mode == AutoresetMode.SAME_STEP)
        assert ends > 0, "the comparison covers episode ends"
    ref.close()


def test_the_default_worker_count_leaves_a_core_to_the_trainer(no_leaks):
    cores = shmenv._shmenv.default_num_workers(1000)
    with shmenv.make_vec("CartPole-v1", 16, trainer_shard=True) as envs:
        assert envs.num_workers == max(1, min(cores, 16) - 1)
        envs.reset(seed=0)
        obs, *_ = envs.step(np.ones(16, dtype=np.int64))
        assert obs.shape == (16, 4)
    with shmenv.make_vec("CartPole-v1", 2, trainer_shard=True) as envs:
        assert envs.num_workers == 1
    # envs_per_worker counts the trainer's shard too: 12 envs at 4 a shard are 3 shards.
    with shmenv.make_vec("CartPole-v1", 12, envs_per_worker=4, trainer_shard=True) as envs:
        assert envs.num_workers == 2


def test_what_a_trainer_shard_cannot_run_is_refused_before_any_worker_starts(no_leaks):
    with pytest.raises(InvalidArgumentError, match="sync mode only"):
        shmenv.make_vec("CartPole-v1", 8, batch_size=4, trainer_shard=True)
    with pytest.raises(InvalidArgumentError, match=r"num_envs \(2\) must be at least num_workers \+ 1 \(3\)"):
        shmenv.make_vec("CartPole-v1", 2, num_workers=2, trainer_shard=True)
    with pytest.raises(InvalidArgumentError, match="cannot know the envs of worker_program"):
        shmenv.make_vec("CartPole-v1", 4, worker_program="/bin/true", trainer_shard=True)


def _cores() -> int:
    return shmenv._shmenv.default_num_workers(1000)


@pytest.mark.parametrize(
    ("env", "n", "options", "reason"),
    [
        ("CartPole-v1", 32, {}, "sync mode, envs the trainer can build"),
        ("CartPole-v1", 32, {"num_workers": 2}, "the worker count was given"),
        ("CartPole-v1", 32, {"envs_per_worker": 16}, "the worker count was given"),
        ("CartPole-v1", 32, {"batch_size": 16}, "async mode"),
        ("CartPole-v1", 32, {"max_restarts": 2}, "restarts asked for"),
        ("CartPole-v1", 1, {}, "too few envs"),
        (lambda: gym.make("CartPole-v1"), 4, {}, "sync mode, envs the trainer can build"),
        (lambda: gym.make("CartPole-v1"), 4, {"max_restarts": 1}, "restarts asked for"),
    ],
    ids=[
        "sync-builtin",
        "workers-given",
        "envs-per-worker",
        "async",
        "restarts",
        "one-env",
        "python-env",
        "python-env-restarts",
    ],
)
def test_the_default_takes_the_trainer_shard_only_where_it_is_safe_and_faster(env, n, options, reason, no_leaks):
    """``trainer_shard="auto"`` (the default): built-in and hosted Python envs in sync mode
    with the worker count left to the pool get the trainer's shard (on two cores or more);
    everything else keeps every env in a worker, and ``trainer_shard_reason`` says why."""
    with shmenv.make_vec(env, n, **options) as envs:
        on = reason.startswith("sync") and _cores() >= 2
        if reason.startswith("sync") and not on:
            reason = "one core"
        assert (envs.trainer_shard, reason in envs.trainer_shard_reason) == (on, True), envs.trainer_shard_reason
        if on:
            # One worker fewer than the cores: the trainer steps the first shard itself.
            assert envs.num_workers == max(1, min(_cores(), n) - 1)
            assert len(envs.worker_pids) == envs.num_workers
        obs, _ = envs.reset(seed=3)
        assert obs.shape[0] == envs.batch_size


def test_the_default_steps_as_sync_vector_env_and_a_plugin_keeps_its_workers(cartpole_c, no_leaks):
    n = 6
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    with shmenv.make_vec("CartPole-v1", n) as envs:
        assert envs.trainer_shard == (_cores() >= 2)
        np.testing.assert_array_equal(envs.reset(seed=11)[0], ref.reset(seed=11)[0])
        rng = np.random.default_rng(4)
        for t in range(300):
            step_alike(envs, ref, rng.integers(0, 2, size=n), f"step {t}")
    ref.close()
    with shmenv.make_vec("CartPoleC-v1", n, plugin=cartpole_c) as envs:
        assert not envs.trainer_shard and "plugin envs keep their crash isolation" in envs.trainer_shard_reason
