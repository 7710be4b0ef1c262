"""Bad input is answered clearly: every row gets a typed shmenv error whose message names the
argument, the value and the valid range; nothing panics or hangs, and a pool that refused a
call is unchanged. Also: a pool in a forked child is inert, and a pool used from two threads
at once says so. (pytest-timeout bounds every test.)"""

import os
import sys
import threading

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


@pytest.mark.parametrize("ids,words", [([-1], ["-1", "0..3"]), ([1.7], ["1.7", "integers"])])
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
