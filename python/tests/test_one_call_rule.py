"""Which actions and env ids are taken as they are (no conversion) is one rule, the
extension's (``one_call.rs``): its one-call path applies it, and Python's general path asks
it (``Assembly.actions`` through ``_shmenv.ActionForm``, ``arguments._env_ids`` through
``_shmenv.env_ids_as_is``). Here both paths decide a table of cases on a real pool, and
must agree with each other and with the table."""

from __future__ import annotations

import numpy as np
import pytest

import shmenv
from shmenv.arguments import _env_ids

N = 4  # CartPole: Discrete(2) actions, stored as int64 of shape ()


class Stop(Exception):
    """Raised by the recording converters so that nothing reaches the pool."""


def _unaligned(n: int, dtype) -> np.ndarray:
    buf = bytearray(n * np.dtype(dtype).itemsize + 1)
    a = np.frombuffer(buf, dtype=dtype, offset=1, count=n)
    assert not a.flags.aligned
    return a


class Sub(np.ndarray):
    pass


ACTIONS = [  # (what, value, taken as it is)
    ("int64", np.zeros(N, np.int64), True),
    ("longlong (int64 by another name)", np.zeros(N, np.longlong), True),
    ("int32", np.zeros(N, np.int32), False),
    ("big-endian int64", np.zeros(N, ">i8"), False),
    ("strided", np.zeros(2 * N, np.int64)[::2], False),
    ("unaligned", _unaligned(N, np.int64), False),
    ("too few rows", np.zeros(N - 1, np.int64), False),
    ("a column", np.zeros((N, 1), np.int64), False),
    ("a subclass", np.zeros(N, np.int64).view(Sub), False),
    ("a list", [0] * N, False),
]

ENV_IDS = [
    ("int64", np.arange(N, dtype=np.int64), True),
    ("int32", np.arange(N, dtype=np.int32), True),
    ("longlong", np.arange(N, dtype=np.longlong), True),
    ("uint64", np.arange(N, dtype=np.uint64), False),
    ("int16", np.arange(N, dtype=np.int16), False),
    ("big-endian int64", np.arange(N, dtype=">i8"), False),
    ("strided", np.arange(2 * N, dtype=np.int64)[::2], False),
    ("unaligned", _unaligned(N, np.int64), False),
    ("2-D", np.arange(N, dtype=np.int64).reshape(2, 2), False),
    ("a subclass", np.arange(N, dtype=np.int64).view(Sub), False),
    ("a list", list(range(N)), False),
]


@pytest.fixture(scope="module")
def env():
    with shmenv.make_vec("CartPole-v1", N, num_workers=1, seed=0) as env:
        assert env._one_call
        env.reset(seed=0)
        yield env


def _python_takes_actions(env, value) -> bool:
    try:
        return env._assembly.actions(value, N) is value
    except shmenv.errors.ActionError:
        return False


def _one_call_takes_actions(env, value) -> bool:
    converted = []

    def record(actions, count):
        converted.append(count)
        raise Stop

    env._pool.set_converters(record, _env_ids)
    try:
        env._pool.step_gym(value, False, "")
    except Stop:
        pass
    finally:
        env._pool.set_converters(env._assembly.actions, _env_ids)
    return not converted


def _one_call_takes_env_ids(env, value) -> bool:
    converted = []

    def record(ids, num_envs):
        converted.append(num_envs)
        return _env_ids(ids, num_envs)

    def stop(actions, count):
        raise Stop

    env._pool.set_converters(stop, record)
    try:
        env._pool.send_gym([0] * N, value)  # the actions are converted after the ids: Stop
    except (Stop, shmenv.errors.InvalidArgumentError):
        pass
    finally:
        env._pool.set_converters(env._assembly.actions, _env_ids)
    return not converted


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what,value,as_is", ACTIONS, ids=[c[0] for c in ACTIONS])
def test_both_paths_take_the_same_actions_as_they_are(env, what, value, as_is):
    assert env._assembly._action_form.takes(value, N) is as_is
    assert _python_takes_actions(env, value) is as_is, "Assembly.actions"
    assert _one_call_takes_actions(env, value) is as_is, "the one-call path"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what,value,as_is", ENV_IDS, ids=[c[0] for c in ENV_IDS])
def test_both_paths_take_the_same_env_ids_as_they_are(env, what, value, as_is):
    assert shmenv._shmenv.env_ids_as_is(value) is as_is
    assert (_env_ids(value, N) is value) is as_is, "arguments._env_ids"
    assert _one_call_takes_env_ids(env, value) is as_is, "the one-call path"
