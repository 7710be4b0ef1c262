"""Pure unit tests, no worker processes: argument checking (``shmenv.arguments``), the
pool options' one declaration (``shmenv.options``) and the seeding rule (``shmenv.seeding``) on their own, so a mistake
there shows here first."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gymnasium.vector.vector_env import AutoresetMode

from shmenv.arguments import (
    _autoreset_mode,
    _count,
    _env_ids,
    _num_workers,
    _optional_int,
    _optional_seconds,
    _reset_mask,
    _reset_options,
)
from shmenv.errors import InvalidArgumentError, InvalidArgumentTypeError, UsageError
from shmenv.seeding import SEED_RANGE, per_env_seeds, reset_commands, seed_value


@pytest.mark.parametrize("value,words", [(0, "at least 1, got 0"), (-2, "got -2"), (1.5, "positive int, got 1.5"),
                                         (True, "got True"), (None, "got None"), ("3", "got '3'")])
def test_counts_refuse_everything_but_positive_ints(value, words):
    with pytest.raises(InvalidArgumentError, match=words):
        _count("num_envs", value)


def test_counts_take_numpy_ints():
    assert _count("num_envs", np.int32(7)) == 7 and type(_count("num_envs", np.int64(2))) is int


def test_num_workers_from_envs_per_worker_and_their_disagreement():
    assert _num_workers(10, None, 3) == 4
    assert _num_workers(10, 4, 3) == 4
    with pytest.raises(InvalidArgumentError, match="num_workers=2 and envs_per_worker=3 disagree: 10 envs"):
        _num_workers(10, 2, 3)
    assert _num_workers(10, 5, None) == 5
    assert 1 <= _num_workers(10, None, None) <= 10


def test_optional_ints_and_seconds_name_the_range():
    assert _optional_int("max_restarts", None, 0) is None
    with pytest.raises(InvalidArgumentError, match=f"from 1 to {2**32 - 1} .or None., got 0"):
        _optional_int("max_episode_steps", 0, 1)
    with pytest.raises(InvalidArgumentError, match="got 4294967296"):
        _optional_int("max_restarts", 2**32, 0)
    assert _optional_seconds("step_timeout", 2) == 2.0
    for bad in (0, -1, float("nan"), float("inf"), 366 * 86400):
        with pytest.raises(InvalidArgumentError, match="step_timeout must be more than 0"):
            _optional_seconds("step_timeout", bad)
    with pytest.raises(InvalidArgumentError, match="a number of seconds, got '5'"):
        _optional_seconds("step_timeout", "5")


def test_env_ids_pass_through_or_convert():
    ids = np.array([3, 1], np.int32)
    assert _env_ids(ids, 4) is ids, "recv's int32 env ids go straight to the extension"
    assert _env_ids([2, 0], 4).dtype == np.int64 and _env_ids(3, 4).tolist() == [3]
    assert _env_ids(np.array([2**64 - 1], np.uint64), 4).tolist() == [2**63 - 1], "clipped, then refused as out of range"
    with pytest.raises(InvalidArgumentError, match="env_ids must be integers .env ids are 0 to 3., got dtype float64"):
        _env_ids([1.5], 4)


def test_autoreset_names_are_the_engines():
    assert _autoreset_mode("same_step") is AutoresetMode.SAME_STEP
    assert _autoreset_mode(AutoresetMode.DISABLED) is AutoresetMode.DISABLED
    with pytest.raises(Exception, match="next_step"):
        _autoreset_mode("sometimes")


def test_reset_masks_and_options():
    assert _reset_mask(np.array([True, False]), 2) == [True, False]
    # AsyncVectorEnv's exception types and the start of its messages, in its order.
    with pytest.raises(InvalidArgumentTypeError, match=re.escape("must have `dtype=np.bool_`, got int64")):
        _reset_mask(np.array([1, 0]), 2)
    with pytest.raises(InvalidArgumentError, match="at least one True value, got reset_mask=.False False."):
        _reset_mask(np.zeros(2, bool), 2)
    with pytest.raises(InvalidArgumentError, match=re.escape("must have shape `(2,)`, got (3,)")):
        _reset_mask(np.ones(3, bool), 2)
    assert _reset_options({"level": 3}, 2, False) == (None, {"level": 3})
    assert _reset_options({"reset_mask": np.array([False, True]), "x": 1}, 2, False) == ([False, True], {"x": 1})
    with pytest.raises(UsageError, match="reset_mask works in sync mode"):
        _reset_options({"reset_mask": np.array([True, True])}, 2, True)


def test_seeds_as_gymnasium_reads_them():
    assert per_env_seeds(None, 3) == [None] * 3
    assert per_env_seeds(5, 3) == [5, 6, 7]
    assert per_env_seeds(SEED_RANGE - 2, 3) == [SEED_RANGE - 2, SEED_RANGE - 1, 0], "wraps as the engine does"
    assert per_env_seeds([4, None, np.int64(9)], 3) == [4, None, 9]
    with pytest.raises(InvalidArgumentError, match="length must match num_envs=3 but got length=2"):
        per_env_seeds([1, 2], 3)
    with pytest.raises(InvalidArgumentError, match=r"seed\[1\] must be an int in 0..2\*\*64 or None, got 1.5"):
        per_env_seeds([1, 1.5, 2], 3)
    with pytest.raises(InvalidArgumentError, match="seed must be None, an int or a list"):
        per_env_seeds("7", 3)
    with pytest.raises(InvalidArgumentError, match="seed must be an int in 0..2\\*\\*64"):
        seed_value(-1, "seed")


def test_reset_commands_group_seeds_by_base():
    # One int (a consecutive list): one command resetting every env.
    assert reset_commands([5, 6, 7], None, first=False) == [(None, 5)]
    # Two bases: unseeded envs first, then each base with the envs it seeds.
    assert reset_commands([None, 0, 9], None, first=False) == [
        ([True, False, False], None),
        ([False, True, False], -1 % SEED_RANGE),
        ([False, False, True], 7),
    ]
    # The first reset resets every env in its first command.
    assert reset_commands([1, 0], None, first=True) == [(None, 1), ([False, True], -1 % SEED_RANGE)]
    # A mask limits the commands to the envs it selects.
    assert reset_commands([3, 4, 5], [False, True, True], first=False) == [([False, True, True], 3)]


def test_pool_options_are_the_signature_of_every_front():
    """``PoolOptions`` is the one declaration: ``make_vec``'s keywords (and Ray's after its
    own) are its fields, with their defaults, in its order."""
    import dataclasses
    import inspect

    import shmenv
    import shmenv.ray
    from shmenv.options import NAMES, PoolOptions

    fields = [(f.name, f.default) for f in dataclasses.fields(PoolOptions)]
    local = [(p.name, p.default) for p in inspect.signature(shmenv.make_vec).parameters.values()]
    # env, num_envs, then gymnasium.make_vec's keyword name for env (id=), then the options.
    assert local[:3] == [("env", None), ("num_envs", 1), ("id", None)]
    assert local[3:] == fields
    ray = list(inspect.signature(shmenv.ray.make_vec).parameters)
    assert ray[-len(NAMES):] == list(NAMES) and ray[:3] == ["env", "num_envs", "num_actors"]


def test_an_unknown_option_is_a_type_error_naming_the_nearest():
    from shmenv.options import PoolOptions

    with pytest.raises(TypeError, match=r"make_vec\(\) got an unexpected keyword argument 'num_worker'; did you mean 'num_workers'\?"):
        PoolOptions.of("make_vec", {"num_worker": 2})
    with pytest.raises(TypeError, match="valid options: num_workers, envs_per_worker"):
        PoolOptions.of("make_vec", {"zzzzzz": 1})
    assert PoolOptions.of("make_vec", {"seed": 3}).seed == 3
