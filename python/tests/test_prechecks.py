"""The checks every vector env makes before it reaches its backend
(:mod:`shmenv.prechecks`), on their own: plain functions of the state they are given, no
worker processes."""

from __future__ import annotations

import numpy as np
import pytest

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
