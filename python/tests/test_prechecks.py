"""The checks every vector env makes before it reaches its backend
(:mod:`shmenv.prechecks`): plain functions of the state they are given, on their own, then
on a real pool, where a refused call raises the exception type ``AsyncVectorEnv`` raises and
leaves the pool unchanged."""

from __future__ import annotations

import re

import numpy as np
import pytest

import shmenv

from shmenv.errors import ClosedError, InvalidArgumentTypeError, UsageError
from shmenv.prechecks import check_async, check_open, check_reset, reset_request


def test_the_checks_and_their_messages():
    with pytest.raises(ClosedError, match=r"the pool is closed \(close\(\) was called\); build a new one"):
        check_open(True)
    check_open(False)
    with pytest.raises(ClosedError, match=r"the env is closed \(an actor failed\); build a new one"):
        check_open(True, "env", "an actor failed")
    with pytest.raises(UsageError, match=r"step\(\) called before reset\(\): call reset\(\) first"):
        check_reset(False, False)
    with pytest.raises(ClosedError, match=r"the env is closed"):
        check_reset(True, True, what="env")
    check_reset(False, True)
    with pytest.raises(UsageError, match=r"send\(\) is for async pools"):
        check_async(False, "send")
    check_async(True, "send")
    mask, rest = reset_request({"reset_mask": np.array([True, False, True]), "x": 1}, 3, False)
    assert mask == [True, False, True] and rest == {"x": 1}
    with pytest.raises(UsageError, match="reset_mask works in sync mode"):
        reset_request({"reset_mask": np.ones(3, bool)}, 3, True)
    with pytest.raises(InvalidArgumentTypeError, match="must have `dtype=np.bool_`"):
        reset_request({"reset_mask": np.ones(3, int)}, 3, False)


@pytest.mark.timeout(60)
def test_misuse_raises_the_exception_types_of_async_vector_env(no_leaks):
    with shmenv.make_vec("CartPole-v1", 3, num_workers=1, seed=0) as envs:
        with pytest.raises(ValueError, match="length must match num_envs=3"):
            envs.reset(seed=[1, 2])
        envs.reset()
        with pytest.raises(TypeError, match=re.escape("`options['reset_mask']` must have `dtype=np.bool_`, got int64")):
            envs.reset(options={"reset_mask": np.array([1, 0, 1])})
        with pytest.raises(ValueError, match=re.escape("`options['reset_mask']` must have shape `(3,)`, got (2,)")):
            envs.reset(options={"reset_mask": np.array([True, False])})
        with pytest.raises(ValueError, match="at least one True"):
            envs.reset(options={"reset_mask": np.zeros(3, bool)})
        with pytest.raises(TypeError, match="single value 0"):
            envs.step(0)
        envs.step(np.zeros(3, np.int64))  # none of the above changed the pool
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, batch_size=2) as envs:
        with pytest.raises(ValueError, match=r"async pool seeds env i with seed \+ i"):
            envs.reset(seed=[1, 0, 2, 3])
        envs.reset(seed=[5, 6, 7, 8])
