"""``shmenv.envpool`` refuses what EnvPool's scripts can get wrong with typed
``shmenv.errors`` exceptions naming the value, the valid range and the fix (real worker
processes): task ids that are not strings, booleans and floats where ints are due, float
env ids (never truncated), and a second sync ``send`` before ``recv`` (which would drop the
first one's actions). A sync reset of no env returns a batch of no rows, as EnvPool's."""

from __future__ import annotations

import numpy as np
import pytest

import shmenv
import shmenv.libs.envpool as envpool
from shmenv.errors import InvalidArgumentError, InvalidArgumentTypeError, UsageError

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("task_id", [None, 5, b"CartPole-v1"])
def test_a_task_id_that_is_not_a_str_is_a_typed_error(task_id):
    for make in (envpool.make, envpool.make_gym, envpool.make_spec):
        match = rf"task_id must be a str, got {re_escape(task_id)}.*list_all_envs"
        with pytest.raises(InvalidArgumentTypeError, match=match):
            make(task_id, num_envs=1)


def re_escape(value) -> str:
    import re

    return re.escape(repr(value))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_envs": True}, r"num_envs must be an int from 1 .* got True \(bool\); pass num_envs=<int>"),
        ({"num_envs": 2.0}, r"num_envs must be an int from 1 .* got 2.0 \(float\)"),
        ({"num_envs": 2, "batch_size": True}, r"batch_size must be an int from 0 to 2 .* got True"),
        ({"num_envs": 2, "num_threads": True}, r"num_threads must be an int from 0 .* got True"),
        ({"num_envs": 2, "num_threads": "2"}, r"num_threads must be an int .* got '2' \(str\)"),
        ({"num_envs": 2, "seed": [0.5, 1]}, r"seed\[0\] must be an int .* got 0.5 \(float\)"),
        ({"num_envs": 2, "env_seed": 5}, r"env_seed must be a list of one int32 seed per env \(num_envs=2\), got 5"),
    ],
)
def test_bools_floats_and_strings_are_not_ints(kwargs, match):
    with pytest.raises(InvalidArgumentTypeError, match=match):
        envpool.make("CartPole-v1", **kwargs)


def test_a_bool_seed_is_refused():
    with pytest.raises(InvalidArgumentError, match="seed should be an int in the range of int32, got True"):
        envpool.make("CartPole-v1", num_envs=2, seed=True)


@pytest.mark.parametrize("flag", ["copy", "pin_workers", "fair_scheduling", "pool_infos"])
def test_make_vec_flags_take_only_bools(flag, no_leaks):
    match = rf"make_vec\(\): {flag} must be True or False, got 'yes' \(str\); pass {flag}=True"
    with pytest.raises(InvalidArgumentTypeError, match=match):
        shmenv.make_vec("CartPole-v1", 2, num_workers=1, **{flag: "yes"})
    with pytest.raises(InvalidArgumentTypeError, match=rf"{flag} must be True or False, got 1 \(int\)"):
        shmenv.make_vec("CartPole-v1", 2, num_workers=1, **{flag: 1})
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1, **{flag: np.bool_(True)}) as envs:
        envs.reset(seed=0)


def test_trainer_shard_takes_bools_and_mode_names(no_leaks):
    with pytest.raises(
        InvalidArgumentError, match=r"trainer_shard must be True, False, 'auto', 'on' or 'off', got 'yes'"
    ):
        shmenv.make_vec("CartPole-v1", 2, trainer_shard="yes")
    with pytest.raises(InvalidArgumentTypeError, match=r"trainer_shard must be .* got 1 \(int\)"):
        shmenv.make_vec("CartPole-v1", 2, trainer_shard=1)
    with shmenv.make_vec("CartPole-v1", 2, trainer_shard=np.bool_(False)) as envs:
        assert (envs.trainer_shard, envs.trainer_shard_reason) == (False, "off as asked")
    with shmenv.make_vec("CartPole-v1", 2, trainer_shard="on") as envs:
        assert envs.trainer_shard and envs.num_workers == 1


def test_sync_send_twice_is_refused_and_keeps_the_first_actions(no_leaks):
    envs = envpool.make("CartPole-v1", num_envs=3, seed=0)
    ref = envpool.make("CartPole-v1", num_envs=3, seed=0)
    try:
        envs.reset()
        ref.reset()
        first, second = np.array([0, 1, 0], np.int32), np.array([1, 1, 1], np.int32)
        envs.send(first)
        for call in (lambda: envs.send(second), lambda: envs.step(second), envs.async_reset):
            with pytest.raises(UsageError, match=r"after send\(actions\) without recv\(\).*call recv\(\) first"):
                call()
        obs, *_ = envs.recv()
        want, *_ = ref.step(first)  # the first actions were the ones stepped
        np.testing.assert_array_equal(obs, want)
        envs.async_reset()
        with pytest.raises(UsageError, match=r"send\(\) after async_reset\(\) without recv\(\)"):
            envs.send(second)
        obs, *_, info = envs.recv()
        np.testing.assert_array_equal(info["elapsed_step"], [0, 0, 0])
        envs.send(second)  # after recv, sending again is fine
        envs.recv()
    finally:
        envs.close()
        ref.close()


def test_float_env_ids_are_refused_not_truncated(no_leaks):
    sync = envpool.make("CartPole-v1", num_envs=4, seed=0)
    asyn = envpool.make("CartPole-v1", num_envs=4, batch_size=2, seed=0)
    try:
        sync.reset()
        for env_id in (0.5, np.array([0.5]), np.array([1.0, 3.0]), [True, False]):
            match = r"env_id must hold integers \(env ids are ints from 0 to 3\).*not truncated"
            with pytest.raises(InvalidArgumentTypeError, match=match):
                sync.reset(env_id)
        with pytest.raises(InvalidArgumentTypeError, match=r"got \[0.0, 1.0, 2.0, 3.0\] \(dtype float64\)"):
            sync.step(np.zeros(4, np.int32), np.arange(4, dtype=np.float64))
        with pytest.raises(InvalidArgumentError, match=r"env_id \[7\] out of range: env ids are ints from 0 to 3"):
            sync.reset(np.array([0, 7]))
        with pytest.raises(InvalidArgumentError, match=r"1-D array of ids.*shape \(1, 2\)"):
            sync.reset(np.array([[0, 1]]))
        obs, info = sync.reset(2)  # one id, as EnvPool takes it
        assert obs.shape == (1, 4) and info["env_id"].tolist() == [2]
        asyn.async_reset()
        _, _, _, _, info = asyn.recv()
        with pytest.raises(InvalidArgumentTypeError, match=r"env_id must hold integers.*got \[0.5, 1.0\]"):
            asyn.send(np.zeros(2, np.int32), np.array([0.5, 1.0]))
        asyn.send(np.zeros(2, np.int32), info["env_id"])  # the pool is unchanged
        asyn.recv()
    finally:
        sync.close()
        asyn.close()


def test_a_sync_reset_of_no_env_returns_no_rows_as_envpool(no_leaks):
    envs = envpool.make("CartPole-v1", num_envs=3, seed=0)
    try:
        obs, info = envs.reset(env_id=np.array([]))  # the first reset resets every env first
        assert obs.shape == (0, 4) and obs.dtype == np.float32
        assert info["env_id"].shape == (0,) and info["env_id"].dtype == np.int32
        assert info["elapsed_step"].shape == (0,) and info["players"]["env_id"].shape == (0,)
        step_obs, *_, step_info = envs.step(np.ones(3, np.int32))
        assert step_info["elapsed_step"].tolist() == [1, 1, 1]  # one reset happened, not a reset of nothing
        obs, info = envs.reset(np.zeros(0, np.int32))
        assert obs.shape == (0, 4)
        _, *_, step_info = envs.step(np.ones(3, np.int32))
        assert step_info["elapsed_step"].tolist() == [2, 2, 2]  # no env was reset
        obs, info = envs.reset(env_id=[])
        assert obs.shape == (0, 4)
    finally:
        envs.close()
