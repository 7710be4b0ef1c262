"""``make_vec(..., trainer_shard=True)``: the trainer steps the first shard of native envs
itself. It steps as Gymnasium's ``SyncVectorEnv`` does (built-in and C plugin CartPole, both
auto-reset modes, partial resets), takes one worker fewer by default, and refuses what it
cannot run (async mode, another worker program) before any process starts. With
``num_workers=0``, or by default where a batch costs less than a handoff to a worker, the
trainer steps every env and no worker process starts. Hosted Python envs in the trainer's
shard: test_trainer_shard_hosted.py."""

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
        # Burn-v0 at 20 us a step: a batch dearer than a handoff keeps the workers.
        ("Burn-v0", 32, {"config": {"step_us": 20}}, "sync mode, envs the trainer can build"),
        ("CartPole-v1", 4, {}, "a batch costs less than a handoff"),
        ("CartPole-v1", 32, {"num_workers": 2}, "the worker count was given"),
        ("CartPole-v1", 32, {"envs_per_worker": 16}, "the worker count was given"),
        ("CartPole-v1", 32, {"batch_size": 16}, "async mode"),
        ("CartPole-v1", 32, {"max_restarts": 2}, "restarts asked for"),
        ("Burn-v0", 1, {"config": {"step_us": 20}}, "too few envs"),
        (lambda: gym.make("CartPole-v1"), 4, {}, "sync mode, envs the trainer can build"),
        (lambda: gym.make("CartPole-v1"), 4, {"max_restarts": 1}, "restarts asked for"),
    ],
    ids=[
        "sync-builtin",
        "cheaper-than-a-handoff",
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
        alone = "handoff" in reason and _cores() >= 2
        on = (alone or reason.startswith("sync")) and _cores() >= 2
        if (reason.startswith("sync") or "handoff" in reason) and not on:
            reason = "one core"
        assert (envs.trainer_shard, reason in envs.trainer_shard_reason) == (on, True), envs.trainer_shard_reason
        if alone:
            assert (envs.num_workers, envs.worker_pids) == (0, [])
        elif on:
            # One worker fewer than the cores: the trainer steps the first shard itself.
            assert envs.num_workers == max(1, min(_cores(), n) - 1)
            assert len(envs.worker_pids) == envs.num_workers
        obs, _ = envs.reset(seed=3)
        assert obs.shape[0] == envs.batch_size


def test_the_default_steps_as_sync_vector_env_and_a_plugin_keeps_its_workers(cartpole_c, no_leaks):
    n = 6
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    with shmenv.make_vec("CartPole-v1", n) as envs:
        # Every env in the trainer where a batch is cheaper than a handoff, else a shard.
        assert envs.trainer_shard or _cores() < 2, envs.trainer_shard_reason
        np.testing.assert_array_equal(envs.reset(seed=11)[0], ref.reset(seed=11)[0])
        rng = np.random.default_rng(4)
        for t in range(300):
            step_alike(envs, ref, rng.integers(0, 2, size=n), f"step {t}")
    ref.close()
    with shmenv.make_vec("CartPoleC-v1", n, plugin=cartpole_c) as envs:
        assert not envs.trainer_shard and "plugin envs keep their crash isolation" in envs.trainer_shard_reason


@pytest.mark.parametrize("hosted", [False, True], ids=["builtin", "hosted"])
def test_no_worker_steps_every_env_in_the_trainer_as_sync_vector_env(hosted, no_leaks):
    """``num_workers=0``: no worker process; the batches, episode ends and partial resets
    of ``SyncVectorEnv``; env calls answered in-process; ``trainer_shard=False`` refused."""
    n = 5
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    env = gym.spec("CartPole-v1") if hosted else "CartPole-v1"
    with shmenv.make_vec(env, n, num_workers=0) as envs:
        assert (envs.num_workers, envs.worker_pids, envs.trainer_shard) == (0, [], True)
        assert "num_workers 0" in envs.trainer_shard_reason
        np.testing.assert_array_equal(envs.reset(seed=7)[0], ref.reset(seed=7)[0])
        ends = lockstep_with_partial_resets(envs, ref, n, False)
        assert ends > 0, "the comparison covers episode ends"
        if hosted:  # env calls are answered by the trainer's own envs
            assert [s.id for s in envs.get_attr("spec")] == ["CartPole-v1"] * n
    ref.close()
    with pytest.raises(InvalidArgumentError, match="num_workers=0 has the trainer step every env"):
        shmenv.make_vec(env, n, num_workers=0, trainer_shard=False)
    for options, what in [
        ({"batch_size": 2}, "async mode"),
        ({"max_restarts": 1}, "restarts"),
        ({"step_timeout": 5.0}, "a step_timeout"),
    ]:
        with pytest.raises(InvalidArgumentError, match=f"cannot serve {what}"):
            shmenv.make_vec(env, 4, num_workers=0, **options)
    with pytest.raises(InvalidArgumentError, match="num_workers=0 has the trainer build every env"):
        shmenv.make_vec(env, 4, num_workers=0, worker_program="/bin/true")


def test_the_default_measures_a_batch_of_built_in_envs_against_a_handoff():
    """The engine's probe (a throwaway set of envs, timed): 4 CartPole envs are cheaper than
    a handoff, 16 Burn-v0 envs of 20 us a step are not; hosted envs are not measured, and
    neither are pools where the trainer would step no env (one core, one env) or that ask
    for a step timeout."""
    choice = shmenv._shmenv.trainer_shard_choice
    common = dict(workers_given=False, buildable=True, plugin=False, sync=True, restarts=False)
    cartpole = ("CartPole-v1", "{}")
    on, alone, reason = choice("auto", num_envs=4, seed=3, native=cartpole, **common)
    assert (on, alone, "handoff" in reason) == ((True,) * 3 if _cores() >= 2 else (False,) * 3), reason
    assert not choice("auto", num_envs=1, native=cartpole, **common)[1]
    assert not choice("auto", num_envs=4, step_timeout=True, native=cartpole, **common)[1]
    on, alone, reason = choice("auto", num_envs=16, native=("Burn-v0", '{"step_us": 20}'), **common)
    assert not alone and (on or _cores() < 2), reason
    on, alone, reason = choice("auto", num_envs=16, **common)
    assert not alone, reason
