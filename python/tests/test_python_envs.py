"""Python (Gymnasium) envs hosted in shmenv workers: the five multiprocessing pitfalls
reproduced and solved, tracebacks, kills, calls into the envs. Fixtures live in
tests/fixtures/shmenv_fixtures (a package the workers import by the inherited sys.path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import FIXTURES, children

import shmenv
from shmenv.libs.sb3 import ShmVecEnv

ACT = np.ones(4, dtype=np.int64)


# --- pitfall 1: an env registered only in the trainer -----------------------------------


def test_env_registered_only_in_the_trainer_runs_in_workers(no_leaks):
    gym.register("FixtureCounter-v0", entry_point="shmenv_fixtures.counter:CounterEnv", kwargs={"length": 4})
    try:
        with shmenv.make_vec("FixtureCounter-v0", 4, num_workers=2, seed=0) as envs:
            assert envs.python_env and envs.single_action_space == gym.spaces.Discrete(3)
            obs, _ = envs.reset()
            assert obs.shape == (4, 4) and obs.dtype == np.float32
            for t in range(1, 5):
                obs, rewards, term, trunc, _ = envs.step(ACT)
            # Workers never saw gymnasium.register: the spec carried the entry point.
            assert term.all() and np.all(obs[:, 0] == 4)
    finally:
        gym.registry.pop("FixtureCounter-v0", None)


def test_env_registered_with_a_class_entry_point(no_leaks):
    from shmenv_fixtures.counter import CounterEnv

    gym.register("FixtureCounterClass-v0", entry_point=CounterEnv, kwargs={"length": 2})
    try:
        with shmenv.make_vec("FixtureCounterClass-v0", 2, num_workers=1) as envs:
            envs.reset()
            envs.step(np.ones(2, dtype=np.int64))
            _, _, term, _, _ = envs.step(np.ones(2, dtype=np.int64))
            assert term.all()
    finally:
        gym.registry.pop("FixtureCounterClass-v0", None)


# --- pitfall 2: a constructor that needs an unpicklable object ---------------------------


def test_unpicklable_resources_are_built_in_the_worker_from_json_config(no_leaks):
    config = {"length": 3, "lock_name": "arena-1"}
    with shmenv.make_vec("shmenv_fixtures.resource:LockedEnv", 4, num_workers=2, config=config) as envs:
        envs.reset()
        assert envs.get_attr("lock_name") == ("arena-1",) * 4
        assert envs.call("bump", 5)[0] >= 5


def test_unpicklable_kwarg_is_refused_before_any_worker_starts(no_leaks):
    before = children()
    with pytest.raises(shmenv.InvalidArgumentError) as e:
        shmenv.make_vec("shmenv_fixtures.resource:LockedEnv", 2, config={"length": 3, "lock": threading.Lock()})
    message = str(e.value)
    assert "config['lock'] is not JSON-serialisable" in message
    assert "inside the env's constructor" in message
    assert children() == before, "workers were started for a refused config"


# --- pitfall 3: one instance per process ---------------------------------------------------


def test_one_instance_per_process_with_envs_per_worker_1(no_leaks):
    with shmenv.make_vec("shmenv_fixtures.singleton:SingletonEnv", 3, envs_per_worker=1) as envs:
        assert len(envs.worker_pids) == 3
        envs.reset()
        envs.step(np.ones(3, dtype=np.int64))
    with pytest.raises(shmenv.BuildError, match="one instance per process"):
        shmenv.make_vec("shmenv_fixtures.singleton:SingletonEnv", 4, num_workers=2)


# --- pitfall 4: an env instance where a factory is needed --------------------------------


def test_an_instance_with_a_spec_is_rebuilt_from_it(no_leaks):
    instance = gym.make("CartPole-v1")
    with shmenv.make_vec(instance, 2, num_workers=1, seed=0) as envs:
        obs, _ = envs.reset()
        ref, _ = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2).reset(seed=0)
        np.testing.assert_array_equal(obs, ref)
    instance.close()


def test_an_instance_without_a_spec_is_refused_with_the_right_call(no_leaks):
    from shmenv_fixtures.counter import CounterEnv

    with pytest.raises(shmenv.InvalidArgumentError, match="package.module:Class"):
        shmenv.make_vec(CounterEnv(), 2)


# --- pitfall 5: a script without `if __name__ == "__main__":` -----------------------------


def run_script(tmp_path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([FIXTURES, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_script_without_main_guard_works(tmp_path):
    out = run_script(
        tmp_path,
        """
        import gymnasium as gym, numpy as np, shmenv
        print("module body ran", flush=True)
        envs = shmenv.make_vec(gym.spec("CartPole-v1"), 4, num_workers=2, seed=0)
        envs.reset()
        for _ in range(50):
            envs.step(np.ones(4, dtype=np.int64))
        envs.close()
        print("trained", flush=True)
        """,
    )
    assert out.returncode == 0, out.stderr
    # Workers are exec'd programs: the script's body runs once, in the trainer only.
    assert out.stdout.count("module body ran") == 1 and "trained" in out.stdout


def test_an_env_defined_in_main_gets_a_clear_error(tmp_path):
    out = run_script(
        tmp_path,
        """
        import gymnasium as gym, shmenv
        from shmenv_fixtures.counter import CounterEnv

        class MyEnv(CounterEnv):
            pass

        try:
            shmenv.make_vec(MyEnv, 2)
        except shmenv.InvalidArgumentError as e:
            print("refused:", e)
        gym.register("MainEnv-v0", entry_point=MyEnv)
        try:
            shmenv.make_vec("MainEnv-v0", 2)
        except shmenv.InvalidArgumentError as e:
            print("refused:", e)
        """,
    )
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("refused:")]
    assert len(lines) == 2, out.stdout
    for line in lines:
        assert "defined in __main__" in line and "my_envs:MyEnv" in line


# --- failures, kills, calls ----------------------------------------------------------------


def test_a_python_exception_in_an_env_reaches_the_trainer_with_its_traceback(no_leaks, capfd, monkeypatch):
    monkeypatch.setenv("RUST_BACKTRACE", "1")  # no backtrace either, even when asked for
    with shmenv.make_vec("shmenv_fixtures.counter:FailingEnv", 4, num_workers=2, config={"fail_at": 3}) as envs:
        envs.reset()
        with pytest.raises(shmenv.WorkerError) as e:
            for _ in range(5):
                envs.step(ACT)
    err = e.value
    # Reported once, as the typed error: no Rust panic text on the workers' stderr.
    printed = capfd.readouterr().err
    assert "panicked at" not in printed and "stack backtrace" not in printed, printed
    assert err.env_id in range(4)
    assert "Traceback (most recent call last)" in err.traceback
    assert "counter.py" in err.traceback
    assert "RuntimeError: the fixture env broke at step 3" in err.traceback
    assert "RuntimeError: the fixture env broke at step 3" in str(err)


def test_a_failing_constructor_is_a_build_error_with_the_traceback(no_leaks):
    with pytest.raises(shmenv.BuildError, match="TypeError") as e:
        shmenv.make_vec("shmenv_fixtures.counter:CounterEnv", 2, config={"no_such_arg": 1})
    assert "no_such_arg" in str(e.value)


def test_sigkill_of_a_python_worker_is_reported(no_leaks):
    envs = shmenv.make_vec(gym.spec("CartPole-v1"), 4, num_workers=2, seed=0)
    envs.reset()
    os.kill(envs.worker_pids[0], signal.SIGKILL)
    with pytest.raises(shmenv.WorkerDiedError) as e:
        for _ in range(1000):
            envs.step(ACT)
    assert e.value.worker == 0 and e.value.env_ids == [0, 1]
    envs.close()


def test_dict_observations_and_box_actions(no_leaks):
    with shmenv.make_vec("shmenv_fixtures.counter:DictObsEnv", 3, num_workers=1) as envs:
        assert isinstance(envs.single_observation_space, gym.spaces.Dict)
        obs, _ = envs.reset()
        assert obs["pos"].shape == (3, 2) and obs["pos"].dtype == np.float64
        assert obs["mode"].shape == (3,) and obs["mode"].dtype == np.int64
        for _ in range(3):
            obs, rewards, *_ = envs.step(np.full((3, 2), 0.5, dtype=np.float32))
        np.testing.assert_allclose(obs["pos"], 1.5)
        np.testing.assert_array_equal(obs["mode"], 1)


def test_gymnasium_call_get_attr_set_attr_reach_the_envs(no_leaks):
    with shmenv.make_vec("shmenv_fixtures.counter:CounterEnv", 4, num_workers=2, seed=0) as envs:
        envs.reset()
        assert envs.get_attr("label") == ("counter",) * 4
        envs.set_attr("label", ["a", "b", "c", "d"])
        assert envs.get_attr("label") == ("a", "b", "c", "d")
        envs.set_attr("scale", 2.0)
        _, rewards, *_ = envs.step(ACT)
        np.testing.assert_array_equal(rewards, 2.0)  # the workers' envs saw the new scale
        starts = envs.get_attr("start")
        assert envs.call("bump", 10) == tuple(int(s) + 10 for s in starts)
        with pytest.raises(shmenv.WorkerError, match="AttributeError") as e:
            envs.get_attr("no_such_attribute")
        assert "no_such_attribute" in e.value.traceback
        envs.step(ACT)  # a failed call leaves the pool usable


def test_sb3_methods_reach_the_envs(no_leaks):
    venv = ShmVecEnv("shmenv_fixtures.counter:CounterEnv", 4, num_workers=2, seed=0)
    try:
        venv.reset()
        assert venv.get_attr("length") == [5] * 4
        assert venv.env_method("bump", 3, indices=[1]) == [venv.get_attr("start", indices=1)[0]]
        venv.set_attr("label", "x", indices=[0, 3])
        assert venv.get_attr("label") == ["x", "counter", "counter", "x"]
        assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [False] * 4
    finally:
        venv.close()
    with ShmVecEnv(gym.spec("CartPole-v1"), 2, num_workers=1) as venv:
        assert venv.env_is_wrapped(gym.wrappers.TimeLimit) == [True, True]


def test_python_cartpole_in_workers_matches_sync_vector_env(no_leaks):
    n = 6
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    rng = np.random.default_rng(1)
    with shmenv.make_vec(gym.spec("CartPole-v1"), n, num_workers=2) as envs:
        np.testing.assert_array_equal(envs.reset(seed=9)[0], ref.reset(seed=9)[0])
        for t in range(300):
            a = rng.integers(0, 2, size=n)
            got, want = envs.step(a), ref.step(a)
            for x, y in zip(got[:4], want[:4]):
                np.testing.assert_allclose(x, y, atol=1e-6, err_msg=f"step {t}")
    ref.close()


def test_python_envs_in_async_mode(no_leaks):
    with shmenv.make_vec(gym.spec("CartPole-v1"), 6, num_workers=2, batch_size=3, seed=0) as envs:
        envs.async_reset()
        seen = []
        for _ in range(40):
            obs, rewards, term, trunc, infos = envs.recv()
            ids = infos["env_id"]
            assert obs.shape == (3, 4)
            seen += ids.tolist()
            envs.send(np.ones(3, dtype=np.int64), ids)
        assert set(seen) == set(range(6))


# --- what an env may return as its observation ------------------------------------------


def _loose_observations() -> Any:
    """A factory of an env whose observations take the forms Gymnasium's vector envs
    accept without being C-contiguous arrays of the space's dtype: a numpy scalar and a
    Python float for ``Box(shape=())``, a list for ``Box((3,))``, a strided view for a
    ``Box((2, 2))``, a numpy integer for ``Discrete``."""

    class Loose(gym.Env):
        observation_space = gym.spaces.Dict(
            {
                "scalar": gym.spaces.Box(-10, 10, (), np.float32),
                "plain": gym.spaces.Box(-10, 10, (), np.float64),
                "listed": gym.spaces.Box(-10, 10, (3,), np.float32),
                "strided": gym.spaces.Box(-10, 10, (2, 2), np.int32),
                "count": gym.spaces.Discrete(9),
            }
        )
        action_space = gym.spaces.Discrete(2)

        def _obs(self):
            t = self.t
            strided = (np.arange(16, dtype=np.int32).reshape(4, 4) + t)[::2, ::2] % 10
            return {
                "scalar": np.float32(t / 2),
                "plain": t / 4,
                "listed": [t, -t, 0.5],
                "strided": strided,
                "count": np.int64(t % 9),
            }

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = int(self.np_random.integers(3))
            return self._obs(), {}

        def step(self, action):
            self.t += 1 + int(action)
            return self._obs(), 1.0, self.t > 7, False, {}

    return Loose


def test_scalars_lists_and_strided_observations_are_accepted_as_sync_vector_env_takes_them(no_leaks):
    cls = _loose_observations()
    ref = gym.vector.SyncVectorEnv([cls for _ in range(2)])
    with shmenv.make_vec(lambda: cls(), 2, num_workers=1) as envs:
        got, _ = envs.reset(seed=3)
        want, _ = ref.reset(seed=3)
        for t in range(6):
            for key in want:
                assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, (t, key)
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"step {t} {key}")
            actions = np.array([t % 2, 1], dtype=np.int64)
            got, want = envs.step(actions)[0], ref.step(actions)[0]
    ref.close()
