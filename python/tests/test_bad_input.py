"""Bad input is answered clearly: every row gets a typed shmenv error whose message names the
argument, the value and the valid range; nothing panics or hangs, and a pool that refused a
call is unchanged. Also: a pool in a forked child is inert, and a pool used from two threads
at once says so. (pytest-timeout bounds every test.)"""

import os
import sys
import threading
from typing import Any

import numpy as np
import pytest

import shmenv
from shmenv.errors import InvalidArgumentError, UsageError, ActionError, Error

BUILD_ROWS = [
    # (keyword arguments, exception, words the message must hold)
    (dict(num_envs=-3), InvalidArgumentError, ["num_envs", "-3", "at least 1"]),
    (dict(num_envs=4, seed=-1), InvalidArgumentError, ["seed", "-1", "0..2**64"]),
    (dict(num_envs=4, seed=2**64), InvalidArgumentError, ["seed", str(2**64), "0..2**64"]),
    (dict(num_envs=4, max_restarts=-1), InvalidArgumentError, ["max_restarts", "-1", "from 0 to"]),
    (dict(num_envs=4, max_episode_steps=0), InvalidArgumentError, ["max_episode_steps", "0", "from 1 to"]),
    (dict(num_envs=4, step_timeout=-1), InvalidArgumentError, ["step_timeout", "-1", "more than 0"]),
    (dict(num_envs=4, step_timeout=float("nan")), InvalidArgumentError, ["step_timeout", "nan"]),
    (dict(num_envs=4, num_workers=-2), InvalidArgumentError, ["num_workers", "-2"]),
    (dict(num_envs=4, batch_size=1.5), InvalidArgumentError, ["batch_size", "1.5"]),
]


@pytest.mark.parametrize("kwargs,exc,words", BUILD_ROWS, ids=[str(r[0]) for r in BUILD_ROWS])
def test_bad_pool_arguments_are_refused(kwargs, exc, words):
    num_envs = kwargs.pop("num_envs")
    with pytest.raises(exc) as info:
        shmenv.make_vec("CartPole-v1", num_envs, num_workers=kwargs.pop("num_workers", 1), **kwargs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_a_seed_near_the_top_wraps_by_the_documented_rule():
    # Env i is seeded (seed + i) % 2**64: env 1 of seed 2**64-1 replays env 0 of seed 0.
    top = shmenv.make_vec("CartPole-v1", 2, num_workers=1, seed=2**64 - 1)
    low = shmenv.make_vec("CartPole-v1", 2, num_workers=1, seed=0)
    try:
        a, _ = top.reset()
        b, _ = low.reset()
        np.testing.assert_array_equal(a[1], b[0])
    finally:
        top.close()
        low.close()


def test_bad_calls_are_refused_and_the_pool_is_unchanged():
    envs = shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=5)
    ref = shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=5)
    try:
        envs.reset()
        ref.reset()
        with pytest.raises(ActionError) as info:
            envs.step(np.array([1e30, 0, 0, 0]))
        assert "1e+30" in str(info.value) or "1e30" in str(info.value), str(info.value)
        got = envs.step(np.ones(4, dtype=np.int64))[0]
        want = ref.step(np.ones(4, dtype=np.int64))[0]
        np.testing.assert_array_equal(got, want)
    finally:
        envs.close()
        ref.close()


@pytest.mark.parametrize("ids,words", [([-1], ["env id -1 is out of range: env ids are 0 to 3"]), ([1.7], ["1.7", "integers"])])
def test_bad_env_ids_in_send_are_refused(ids, words):
    envs = shmenv.make_vec("CartPole-v1", 4, num_workers=2, batch_size=2, seed=1)
    try:
        envs.async_reset() if hasattr(envs, "async_reset") else envs.reset()
        with pytest.raises(Error) as info:
            envs.send(np.zeros(len(ids), dtype=np.int64), ids)
        for w in words:
            assert w in str(info.value), (w, str(info.value))
    finally:
        envs.close()


def test_one_pool_used_from_two_threads_is_a_usage_error():
    envs = shmenv.make_vec("Burn-v0", 2, num_workers=1, seed=1, config={"step_us": 200000})
    try:
        envs.reset()
        errors = []

        def other():
            try:
                envs.step(np.zeros(2, dtype=np.int64))
            except Error as e:
                errors.append(e)

        t = threading.Thread(target=other)
        t.start()
        caught = None
        try:
            envs.step(np.zeros(2, dtype=np.int64))
        except Error as e:
            caught = e
        t.join()
        found = errors + ([caught] if caught else [])
        assert len(found) == 1, found
        assert isinstance(found[0], UsageError), repr(found[0])
        assert "one thread at a time" in str(found[0])
        envs.step(np.zeros(2, dtype=np.int64))  # still usable
    finally:
        envs.close()


FORK_EXIT = """
import os, sys
import numpy as np
import shmenv
envs = shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=3)
envs.reset()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # the child's interpreter drops its copy of the pool on the way out
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
for _ in range(20):
    envs.step(np.ones(4, dtype=np.int64))
envs.close()
print("parent kept stepping")
"""


def test_a_forked_child_that_exits_leaves_the_parent_pool_alone():
    import subprocess

    out = subprocess.run([sys.executable, "-c", FORK_EXIT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "parent kept stepping" in out.stdout
    assert "panicked" not in out.stderr, out.stderr


@pytest.mark.parametrize("what", ["drop", "close", "step"])
def test_a_pool_in_a_forked_child_is_inert(what):
    envs = shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=3)
    try:
        envs.reset()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if what == "close":
                    envs.close()
                elif what == "step":
                    try:
                        envs.step(np.zeros(4, dtype=np.int64))
                        code = 3
                    except UsageError as e:
                        code = 0 if f"belongs to process {os.getppid()}" in str(e) else 4
            except BaseException:
                code = 5
            finally:
                if what == "drop":
                    del envs
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, (what, status)
        for _ in range(20):
            envs.step(np.ones(4, dtype=np.int64))
    finally:
        envs.close()


# --- config values JSON cannot carry -----------------------------------------------------

CONFIG_ROWS = [
    # (env, config, words the message must hold)
    ("Burn-v0", {"step_us": float("nan")}, ["config['step_us']", "nan", "JSON has no NaN or Infinity"]),
    ("Burn-v0", {"obs_shape": [4], "step_us": float("inf")}, ["config['step_us']", "inf", "finite"]),
    (
        "shmenv_fixtures.counter:CounterEnv",
        {"length": 3, "weights": [1.0, {"w": float("-inf")}]},
        ["config['weights'][1]['w']", "-inf", "factory"],
    ),
]


@pytest.mark.parametrize("env,config,words", CONFIG_ROWS, ids=[str(r[1]) for r in CONFIG_ROWS])
def test_nan_and_infinity_in_config_are_refused_naming_the_key(env, config, words):
    from conftest import children

    from shmenv.errors import ConfigError

    before = children()
    with pytest.raises(ConfigError) as info:
        shmenv.make_vec(env, 2, num_workers=1, config=config)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    assert isinstance(info.value, ValueError)
    assert children() == before, "workers were left running for a refused config"


# --- hosted Python envs that return what the Gymnasium API does not --------------------


def _returning(where: str, bad) -> Any:
    """A factory of a Box((3,)) env whose ``reset`` (``where="reset"``) or ``step``
    returns ``bad(obs, info)`` instead of ``(obs, info)`` / the step's five values."""
    import gymnasium as gym

    class BadReturns(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            obs = np.zeros(3, np.float32)
            return bad(obs, {}) if where == "reset" else (obs, {})

        def step(self, action):
            obs = np.ones(3, np.float32)
            return bad(obs, {}) if where == "step" else (obs, 0.0, False, False, {})

    return lambda: BadReturns()


ENV_ROWS = [
    # (id, where, what the env returns, words the message must hold)
    ("obs (3, 1)", "reset", lambda o, i: (o.reshape(3, 1), i), ["BadReturns", "shape (3, 1)", "shape (3,)"]),
    ("step obs (1, 3)", "step", lambda o, i: (o.reshape(1, 3), 0.0, False, False, i), ["shape (1, 3)", "(3,)"]),
    ("obs None", "reset", lambda o, i: (None, i), ["BadReturns", "returned None", "shape (3,)"]),
    ("reset (obs,)", "reset", lambda o, i: (o,), ["reset()", "returned 1 value", "(obs, info)"]),
    ("reset (obs, None)", "reset", lambda o, i: (o, None), ["reset()", "info of type NoneType", "dict"]),
    ("reset (obs, {}, 1)", "reset", lambda o, i: (o, i, 1), ["reset()", "returned 3 values", "(obs, info)"]),
    ("reset [obs, {}]", "reset", lambda o, i: [o, i], ["reset()", "returned a list", "tuple"]),
    ("step 4 values", "step", lambda o, i: (o, 0.0, False, i), ["step()", "returned 4 values", "5 values"]),
]


@pytest.mark.parametrize("where,bad,words", [r[1:] for r in ENV_ROWS], ids=[r[0] for r in ENV_ROWS])
def test_env_returns_off_the_gymnasium_api_are_refused_naming_the_env(where, bad, words):
    from shmenv.errors import ClosedError, WorkerError

    envs = shmenv.make_vec(_returning(where, bad), 2, num_workers=1)
    try:
        with pytest.raises(WorkerError) as info:
            envs.reset(seed=0)
            envs.step(np.zeros(2, dtype=np.int64))
        message = str(info.value)
        for w in words:
            assert w in message, (w, message)
        assert info.value.env_id == 0 and "Rust" not in message and "pyenv.rs" not in message, message
        with pytest.raises(ClosedError):  # an env that failed closes the pool, as documented
            envs.step(np.zeros(2, dtype=np.int64))
    finally:
        envs.close()


# --- composite actions with parts the action space does not have ------------------------

EXTRA_PART_ROWS = [
    # (id, the bad actions made from good ones, words the message must hold)
    ("tuple item 3", lambda g: (*g, g[2]), ["4 items", "has 3", "item 3 is extra"]),
    ("dict key 'zz'", lambda g: ({**g[0], "zz": g[0]["h"]}, g[1], g[2]), ["action 0 has the key 'zz'", "['h', 'md']"]),
]


@pytest.mark.parametrize("make_bad,words", [r[1:] for r in EXTRA_PART_ROWS], ids=[r[0] for r in EXTRA_PART_ROWS])
def test_extra_parts_of_composite_actions_are_refused_and_the_pool_is_unchanged(make_bad, words):
    config = {"obs": "box_u16", "action": "composite"}
    entry = "shmenv_fixtures.spaces:SpacesEnv"
    with shmenv.make_vec(entry, 3, num_workers=1, config=config, seed=4) as envs, shmenv.make_vec(
        entry, 3, num_workers=1, config=config, seed=4
    ) as ref:
        envs.reset()
        ref.reset()
        envs.action_space.seed(0)
        good = envs.action_space.sample()
        with pytest.raises(ActionError) as info:
            envs.step(make_bad(good))
        for w in words:
            assert w in str(info.value), (w, str(info.value))
        got, want = envs.step(good), ref.step(good)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
