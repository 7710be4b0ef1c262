"""Env factories, as ``AsyncVectorEnv(env_fns)`` takes them: zero-argument callables that
return an env, pickled with cloudpickle and called in the workers (``make_vec(fn, n)``,
``shmenv.from_fns(env_fns)``). Real worker processes throughout."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import threading

import gymnasium as gym
import numpy as np
import pytest
from conftest import FIXTURES, children, step_alike

import shmenv

pytestmark = pytest.mark.timeout(60)


def cartpole():
    return gym.make("CartPole-v1")


def steps_until_truncated(envs, limit: int = 50) -> list[int]:
    """Steps with alternating actions (CartPole stays up for a while) and returns, per env,
    the step at which it was first truncated."""
    envs.reset(seed=0)
    first = [0] * envs.num_envs
    for t in range(1, limit + 1):
        _, _, _, trunc, _ = envs.step(np.full(envs.num_envs, t % 2, dtype=np.int64))
        for i in np.flatnonzero(trunc):
            first[i] = first[i] or t
        if all(first):
            break
    return first


def test_a_lambda_steps_as_sync_vector_env_does(no_leaks):
    fn = lambda: gym.make("CartPole-v1")  # noqa: E731 - the point of the test
    ref = gym.vector.SyncVectorEnv([fn] * 4)
    with shmenv.make_vec(fn, 4, num_workers=2) as envs:
        assert envs.env_id.startswith("factory")
        obs, _ = envs.reset(seed=7)
        r_obs, _ = ref.reset(seed=7)
        np.testing.assert_array_equal(obs, r_obs)
        rng = np.random.default_rng(0)
        for t in range(120):
            step_alike(envs, ref, rng.integers(0, 2, 4), f"step {t}")
    ref.close()


def test_a_closure_over_a_local_value_changes_the_env(no_leaks):
    def make_factory(limit: int):
        def factory():
            return gym.make("CartPole-v1", max_episode_steps=limit)

        return factory

    with shmenv.make_vec(make_factory(7), 3, num_workers=2) as envs:
        assert steps_until_truncated(envs) == [7, 7, 7]
        assert [s.max_episode_steps for s in envs.get_attr("spec")] == [7, 7, 7]


def test_a_partial_is_a_factory(no_leaks):
    with shmenv.make_vec(functools.partial(gym.make, "CartPole-v1", max_episode_steps=5), 2, num_workers=2) as envs:
        assert envs.env_id.startswith("factory partial(")
        assert steps_until_truncated(envs) == [5, 5]


def test_from_fns_of_one_lambda_steps_as_sync_vector_env_does(no_leaks):
    fns = [lambda: gym.make("CartPole-v1")] * 4
    ref = gym.vector.SyncVectorEnv(fns)
    with shmenv.from_fns(fns, num_workers=2, seed=3) as envs:
        assert envs.num_envs == 4
        obs, _ = envs.reset(seed=3)
        r_obs, _ = ref.reset(seed=3)
        np.testing.assert_array_equal(obs, r_obs)
        rng = np.random.default_rng(1)
        for t in range(200):
            step_alike(envs, ref, rng.integers(0, 2, 4), f"step {t}")
    ref.close()


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_from_fns_builds_env_i_with_fns_i(no_leaks, num_workers):
    # 5 envs over 1, 2 or 3 workers: uneven shards, each worker picks its envs' factories.
    fns = [functools.partial(gym.make, "CartPole-v1", max_episode_steps=3 + i) for i in range(5)]
    with shmenv.from_fns(fns, num_workers=num_workers) as envs:
        assert steps_until_truncated(envs) == [3, 4, 5, 6, 7]


def test_from_fns_late_binding_is_pythons(no_leaks):
    # As with AsyncVectorEnv, a lambda in a loop sees the loop variable's last value.
    fns = [lambda: gym.make("CartPole-v1", max_episode_steps=4 + i) for i in range(3)]
    with shmenv.from_fns(fns, num_workers=2) as envs:
        assert steps_until_truncated(envs) == [6, 6, 6]


def test_an_unpicklable_closure_is_refused_before_any_worker_starts(no_leaks, monkeypatch):
    lock = threading.Lock()

    def factory():
        with lock:
            return gym.make("CartPole-v1")

    import shmenv.vector

    def no_pool(*args, **kwargs):
        raise AssertionError("a pool was started")

    monkeypatch.setattr(shmenv.vector._shmenv, "Pool", no_pool)
    before = children()
    for call in (lambda: shmenv.make_vec(factory, 2), lambda: shmenv.from_fns([cartpole, factory])):
        with pytest.raises(shmenv.InvalidArgumentError) as e:
            call()
        message = str(e.value)
        assert "factory" in message and "cannot pickle '_thread.lock' object" in message, message
        assert "entry point 'package.module:Class'" in message and "config=" in message, message
    assert "(env 1)" in message
    assert children() == before


def test_envs_of_one_worker_with_different_spaces_are_a_clear_error(no_leaks):
    fns = [cartpole, lambda: gym.make("Pendulum-v1")]
    # AsyncVectorEnv's RuntimeError, naming both envs, whether they share a worker or not.
    for workers in (1, 2):
        with pytest.raises(RuntimeError, match=r"not equivalent\. Env 1 has Box\(.*\(3,\).*env 0 has Box\(.*\(4,\)"):
            shmenv.from_fns(fns, num_workers=workers)


def test_factory_mistakes_are_refused_with_the_fix(no_leaks):
    with pytest.raises(shmenv.InvalidArgumentError, match="called with no arguments"):
        shmenv.make_vec(lambda: gym.make("CartPole-v1"), 2, config={"x": 1})
    with pytest.raises(TypeError, match=r"env_fns\[1\] is a CartPoleEnv, not a callable"):
        shmenv.from_fns([cartpole, gym.make("CartPole-v1").unwrapped])
    with pytest.raises(shmenv.BuildError, match="returned 42, not an env"):
        shmenv.make_vec(lambda: 42, 1)


def test_importable_functions_and_classes_still_go_by_name(no_leaks):
    # A module-level function or class is imported by name in the workers: no pickling.
    with shmenv.make_vec(cartpole, 2, num_workers=1) as envs:
        assert envs.env_id == f"{__name__}:cartpole"
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    with shmenv.from_fns([CartPoleEnv] * 2, num_workers=1) as envs:
        assert envs.env_id == "gymnasium.envs.classic_control.cartpole:CartPoleEnv"


@pytest.mark.timeout(120)
def test_a_function_of_main_is_sent_by_value(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import gymnasium as gym, numpy as np, shmenv

            LIMIT = 6

            def make_env():
                return gym.make("CartPole-v1", max_episode_steps=LIMIT)

            envs = shmenv.make_vec(make_env, 2, num_workers=2)
            envs.reset(seed=0)
            for t in range(LIMIT):
                _, _, _, trunc, _ = envs.step(np.array([t % 2] * 2))
            print("truncated", trunc.tolist(), envs.env_id)
            envs.close()
            """
        )
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([FIXTURES, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110
    )
    assert out.returncode == 0, out.stderr
    assert "truncated [True, True] factory make_env" in out.stdout, out.stdout


def test_a_restarted_worker_rebuilds_its_envs_with_their_own_factories(no_leaks):
    import signal

    from conftest import wait_gone

    fns = [functools.partial(gym.make, "CartPole-v1", max_episode_steps=10 + i) for i in range(4)]
    with shmenv.from_fns(fns, num_workers=2, seed=0, max_restarts=1) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=np.int64))
        victim = envs.worker_pids[1]
        os.kill(victim, signal.SIGKILL)
        assert not wait_gone([victim])
        _, _, _, _, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert infos["restarted_envs"] == [2, 3]
        assert envs.restarts == [0, 1]
        # The restarted envs begin fresh episodes: each truncates at its own factory's limit.
        first = {}
        for t in range(1, 20):
            _, _, _, trunc, _ = envs.step(np.full(4, t % 2, dtype=np.int64))
            for i in (2, 3):
                if trunc[i]:
                    first.setdefault(i, t)
        assert first == {2: 12, 3: 13}
