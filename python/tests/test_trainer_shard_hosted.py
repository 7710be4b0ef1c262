"""``make_vec(..., trainer_shard=True)`` with hosted Python envs: the trainer builds and steps
the first shard in its own interpreter. It steps as Gymnasium's ``SyncVectorEnv`` (both
auto-reset modes, partial resets, seeds, reset options), gives the same infos and side
values, answers env calls for its envs in-process and the workers' over the call channel,
and an exception in one of its envs closes the pool naming the env, as a worker's does."""

from __future__ import annotations

import functools
import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import shmenv
from shmenv.errors import InvalidArgumentError
from conftest import children, lockstep_with_partial_resets
from test_infos import assert_infos_step_alike
from test_gymnasium_vector_conformance import step_both

pytestmark = pytest.mark.timeout(120)


def cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_hosted_envs_in_the_trainer_step_as_sync_vector_env(mode, no_leaks):
    n = 5
    ref = gym.vector.SyncVectorEnv([cartpole] * n, autoreset_mode=mode)
    with shmenv.from_fns([cartpole] * n, num_workers=2, trainer_shard=True, autoreset_mode=mode) as envs:
        assert envs.trainer_shard and envs.num_workers == 2 and len(envs.worker_pids) == 2
        # The trainer builds env 0 in this interpreter; the workers envs 1..5.
        assert envs._pool.trainer_envs == (0, 1) and envs._shards == [(1, 3), (3, 5)]
        assert len(envs._pool.trainer_host.envs) == 1
        obs, _ = envs.reset(seed=7)
        want, _ = ref.reset(seed=7)
        np.testing.assert_array_equal(obs, want)
        assert envs.get_attr("np_random_seed") == tuple(range(7, 7 + n))
        ends = lockstep_with_partial_resets(envs, ref, n, mode == AutoresetMode.SAME_STEP)
        assert ends > 0, "the comparison covers episode ends"
        # The seeds, as Gymnasium's vector envs answer them, after the partial resets.
        assert envs.get_attr("np_random_seed") == ref.get_attr("np_random_seed")
    ref.close()


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_infos_of_the_trainers_envs_equal_sync_vector_envs(mode, no_leaks):
    """Numbers (through the info area's first part, written from the trainer's thread),
    arrays, strings and nested dicts (kept in the trainer) and reset infos."""
    from shmenv_fixtures.infos import InfoEnv

    n, mode_enum = 4, AutoresetMode(mode.title().replace("_", ""))
    ref = gym.vector.SyncVectorEnv([InfoEnv for _ in range(n)], autoreset_mode=mode_enum)
    entry = "shmenv_fixtures.infos:InfoEnv"
    with shmenv.make_vec(entry, n, num_workers=1, trainer_shard=True, autoreset_mode=mode) as envs:
        assert envs._pool.trainer_envs == (0, 2)
        assert_infos_step_alike(envs, ref, n)
    ref.close()


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("space", ["tuple_word", "dict_graph"])
def test_side_values_of_the_trainers_envs_travel_as_a_workers(space, mode, no_leaks):
    """Variable-size and custom spaces inside composites, as observation and as action: side
    leaves both ways, the trainer's envs' kept in its own host."""
    from shmenv_fixtures.spaces import SpacesEnv

    fns = [functools.partial(SpacesEnv, obs=space, action=space, length=3 + i) for i in range(4)]
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    with shmenv.from_fns(fns, num_workers=1, trainer_shard=True, autoreset_mode=mode) as envs:
        assert envs._pool.trainer_envs == (0, 2)
        assert step_both(envs, ref, 12, seed=7) >= 4
    ref.close()


def test_env_calls_reach_the_trainers_envs_and_the_workers_alike(no_leaks):
    entry = "shmenv_fixtures.counter:CounterEnv"
    with shmenv.make_vec(entry, 6, num_workers=2, trainer_shard=True, seed=1) as envs:
        assert envs._pool.trainer_envs == (0, 2)
        envs.reset(options={"start": 40})  # reset options reach every env
        assert envs.get_attr("start") == (40.0,) * 6
        assert envs.call("bump", 2) == (42,) * 6
        envs.set_attr("label", [f"env{i}" for i in range(6)])
        assert envs.get_attr("label") == tuple(f"env{i}" for i in range(6))
        # The trainer's envs are this interpreter's objects (as SyncVectorEnv's).
        host = envs._pool.trainer_host
        assert [e.unwrapped.label for e in host.envs] == ["env0", "env1"]
        assert envs.env_call("is_wrapped", "", range(6), values=[gym.wrappers.TimeLimit] * 6) == [False] * 6
        with pytest.raises(shmenv.WorkerError, match=r"failed in env 0:(.|\n)*no_such_method"):
            envs.call("no_such_method")
        # A partial reset with options: only the masked envs take them.
        mask = np.array([True, False, False, True, False, False])
        obs, _ = envs.reset(options={"reset_mask": mask, "start": 7})
        # The others keep their row: the observation of their last reset (bump changed no observation).
        np.testing.assert_array_equal(obs[:, 2], [7, 40, 40, 7, 40, 40])


def test_render_reaches_the_trainers_envs(no_leaks):
    with shmenv.make_vec(
        gym.spec("CartPole-v1"), 3, num_workers=1, trainer_shard=True, render_mode="rgb_array"
    ) as envs:
        assert envs._pool.trainer_envs == (0, 1)
        envs.reset(seed=0)
        frames = envs.render()
        assert len(frames) == 3 and all(f.shape == (400, 600, 3) for f in frames)


def test_per_env_factories_follow_the_trainers_shard(no_leaks):
    """``from_fns`` with a factory per env: the trainer builds envs 0.., the workers the
    rest, each env with its own factory."""
    from shmenv_fixtures.counter import CounterEnv

    fns = [functools.partial(CounterEnv, scale=float(i + 1)) for i in range(5)]
    with shmenv.from_fns(fns, num_workers=2, trainer_shard=True) as envs:
        assert envs._pool.trainer_envs == (0, 1)
        assert envs.get_attr("scale") == (1.0, 2.0, 3.0, 4.0, 5.0)
        envs.reset(seed=0)
        _, rewards, *_ = envs.step(np.ones(5, dtype=np.int64))
        np.testing.assert_array_equal(rewards, [1, 2, 3, 4, 5])


def test_an_exception_in_a_trainers_env_closes_the_pool_naming_the_env(no_leaks, capfd, monkeypatch):
    from shmenv_fixtures.counter import FailingEnv

    monkeypatch.setenv("RUST_BACKTRACE", "1")  # no backtrace either, even when asked for
    # Only env 0, the trainer's, fails (at its third step); the workers' would at the 100th.
    fns = [functools.partial(FailingEnv, fail_at=3)] + [functools.partial(FailingEnv, fail_at=100)] * 3
    envs = shmenv.from_fns(fns, num_workers=2, trainer_shard=True)
    pids = envs.worker_pids
    assert envs._pool.trainer_envs == (0, 1)
    envs.reset(seed=0)
    with pytest.raises(shmenv.WorkerError) as e:
        for _ in range(5):
            envs.step(np.ones(4, dtype=np.int64))
    err = e.value
    assert err.env_id == 0
    assert "Traceback (most recent call last)" in err.traceback and "counter.py" in err.traceback
    assert "RuntimeError: the fixture env broke at step 3" in str(err)
    printed = capfd.readouterr().err
    assert "panicked at" not in printed and "stack backtrace" not in printed, printed
    # The pool is closed, its workers gone.
    with pytest.raises(shmenv.ClosedError):
        envs.step(np.ones(4, dtype=np.int64))
    envs.close()
    assert not set(pids) & children()


def test_two_pools_with_trainer_shards_keep_their_envs_apart(no_leaks):
    entry = "shmenv_fixtures.counter:CounterEnv"
    with shmenv.make_vec(entry, 4, num_workers=1, trainer_shard=True) as a:
        with shmenv.make_vec(entry, 4, num_workers=1, trainer_shard=True) as b:
            a.reset(options={"start": 1})
            b.reset(options={"start": 2})
            assert a.get_attr("start") == (1.0,) * 4 and b.get_attr("start") == (2.0,) * 4
            assert a._pool.trainer_host is not b._pool.trainer_host


def test_what_is_refused_is_refused_before_any_worker_starts(no_leaks):
    before = children()
    with pytest.raises(InvalidArgumentError, match="sync mode only"):
        shmenv.make_vec(cartpole, 8, batch_size=4, trainer_shard=True)
    with pytest.raises(InvalidArgumentError, match=r"num_envs \(2\) must be at least num_workers \+ 1 \(3\)"):
        shmenv.make_vec(cartpole, 2, num_workers=2, trainer_shard=True)
    with pytest.raises(InvalidArgumentError, match="cannot know the envs of worker_program"):
        shmenv.make_vec(cartpole, 4, worker_program="/bin/true", trainer_shard=True)
    assert children() == before
    # "auto" (the default) takes the trainer's shard for hosted envs too, and says why; with
    # restarts asked for it keeps every env in a worker.
    with shmenv.make_vec(cartpole, 4) as envs:
        two_cores = shmenv._shmenv.default_num_workers(1000) >= 2
        assert envs.trainer_shard == two_cores, envs.trainer_shard_reason
        assert ("sync mode" if two_cores else "one core") in envs.trainer_shard_reason
    with shmenv.make_vec(cartpole, 4, max_restarts=1) as envs:
        assert not envs.trainer_shard and envs._pool.trainer_envs == (0, 0)
        assert "restarts" in envs.trainer_shard_reason


def test_the_trainers_envs_are_closed_with_the_pool(no_leaks, tmp_path):
    from shmenv_fixtures.counter import CounterEnv

    class Closing(CounterEnv):
        def close(self):
            with open(os.path.join(str(tmp_path), f"closed-{os.getpid()}"), "a") as f:
                f.write("x")

    with shmenv.from_fns([Closing] * 3, num_workers=1, trainer_shard=True) as envs:
        envs.reset(seed=0)
    # This process closed its env, env 0 (the worker closed envs 1 and 2 in its process).
    with open(tmp_path / f"closed-{os.getpid()}") as f:
        assert f.read() == "x"
