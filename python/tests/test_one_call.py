"""The one-call path: for native envs with one observation array, no restarts and no
final observations, ``step``/``send``/``recv`` are one call into the extension, which
takes arrays already in the engine's form as they are, converts everything else with
the same Python converters as the general path, and makes Gymnasium's tuple itself.
Each test runs the same pool both ways (the general path forced by ``_one_call =
False``) and checks that results, infos and errors are the same. (pytest-timeout bounds
every test.)"""

from __future__ import annotations

import numpy as np
import pytest

import shmenv
from shmenv.errors import ActionError, Error


def _one_call_only(envs):
    """Makes the general path's Python steps fail on `envs`, so a test passes only if every
    call took the one-call path."""

    def general_path(*args, **kwargs):
        raise AssertionError("the general path ran on a one-call pool")

    assert envs._one_call
    envs._batches.actions = envs._restarts.note = general_path  # step, send and recv call these there
    return envs


def _pools(env: str = "CartPole-v1", num_envs: int = 6, num_workers: int = 2, **kwargs):
    """Two pools with the same seed: the one-call path and the general path."""
    one = shmenv.make_vec(env, num_envs, num_workers=num_workers, seed=11, **kwargs)
    general = shmenv.make_vec(env, num_envs, num_workers=num_workers, seed=11, **kwargs)
    general._one_call = False
    return _one_call_only(one), general


def _same(got, want, where: str) -> None:
    obs, rew, term, trunc, infos = got
    w_obs, w_rew, w_term, w_trunc, w_infos = want
    for a, b in ((obs, w_obs), (rew, w_rew), (term, w_term), (trunc, w_trunc)):
        assert a.dtype == b.dtype and a.flags.writeable and a.flags.owndata, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    assert infos.keys() == w_infos.keys(), (where, infos.keys(), w_infos.keys())
    for key, value in w_infos.items():
        if isinstance(value, dict):
            assert value.keys() == infos[key].keys(), where
            for k in value:
                assert infos[key][k].dtype == value[k].dtype, (where, key, k)
                np.testing.assert_array_equal(infos[key][k], value[k], err_msg=f"{where} {key}/{k}")
        else:
            assert infos[key].dtype == value.dtype, (where, key)
            np.testing.assert_array_equal(infos[key], value, err_msg=f"{where} {key}")


@pytest.mark.parametrize("pool_infos,stats_key", [(False, "episode_stats"), (True, "episode"), (True, "")])
def test_sync_steps_return_what_the_general_path_returns(pool_infos, stats_key):
    one, general = _pools(pool_infos=pool_infos, episode_stats_key=stats_key)
    try:
        assert one._one_call
        one.reset()
        general.reset()
        rng = np.random.default_rng(3)
        ended = 0
        for t in range(300):
            actions = rng.integers(0, 2, size=6)
            got, want = one.step(actions), general.step(actions)
            _same(got, want, f"step {t}")
            ended += int(np.logical_or(got[2], got[3]).any())
            if stats_key and np.logical_or(got[2], got[3]).any():
                np.testing.assert_array_equal(got[4]["_" + stats_key], np.logical_or(got[2], got[3]))
        assert ended > 5, "the run must cover batches where episodes end"
    finally:
        one.close()
        general.close()


# Actions the extension cannot take as they are: each goes through the Python converter.
CONVERTED = {
    "list": lambda a: [int(x) for x in a],
    "int32": lambda a: a.astype(np.int32),
    "integral floats": lambda a: a.astype(np.float64),
    "not contiguous": lambda a: np.repeat(a, 2)[::2],
    "column": lambda a: a.reshape(-1, 1)[:, 0],
    "ndarray subclass": lambda a: a.view(type("Actions", (np.ndarray,), {})),
    "misaligned": lambda a: np.frombuffer(b"\0" + a.tobytes(), dtype=np.int64, offset=1),
    "big-endian": lambda a: a.astype(">i8"),
}


@pytest.mark.parametrize("form", list(CONVERTED))
def test_actions_in_other_forms_step_as_the_engine_array_does(form):
    one, general = _pools()
    try:
        one.reset()
        general.reset()
        for t in range(20):
            actions = np.arange(t, t + 6, dtype=np.int64) % 2
            _same(one.step(CONVERTED[form](actions)), general.step(actions), f"{form} step {t}")
    finally:
        one.close()
        general.close()


BAD_ACTIONS = {
    "out of range": np.array([0, 1, 2, 0, 1, 0]),
    "too few": np.zeros(5, dtype=np.int64),
    "two per env": np.zeros((6, 2), dtype=np.int64),
    "not integral": np.full(6, 0.5),
    "text": ["a"] * 6,
}


@pytest.mark.parametrize("what", list(BAD_ACTIONS))
def test_bad_actions_raise_what_the_general_path_raises_and_change_nothing(what):
    one, general = _pools()
    try:
        one.reset()
        general.reset()
        with pytest.raises(Error) as got:
            one.step(BAD_ACTIONS[what])
        with pytest.raises(Error) as want:
            general.step(BAD_ACTIONS[what])
        assert type(got.value) is type(want.value) and str(got.value) == str(want.value), (got.value, want.value)
        assert isinstance(got.value, (ActionError, shmenv.errors.ActionTypeError))
        actions = np.ones(6, dtype=np.int64)
        _same(one.step(actions), general.step(actions), f"after {what}")
    finally:
        one.close()
        general.close()


ENV_IDS = {
    "as recv returns them": lambda ids: ids,
    "list": lambda ids: [int(i) for i in ids],
    "misaligned": lambda ids: np.frombuffer(b"\0" + ids.tobytes(), dtype=ids.dtype, offset=1),
    "int32": lambda ids: ids.astype(np.int32),
    "uint8": lambda ids: ids.astype(np.uint8),
    "not contiguous": lambda ids: np.repeat(ids, 2)[::2],
    "2-D": lambda ids: ids.reshape(1, -1),
}


@pytest.mark.parametrize("form", list(ENV_IDS))
def test_async_batches_return_what_the_general_path_returns(form):
    # One worker: the batches' env order is then the same in both pools.
    one, general = _pools(num_envs=8, num_workers=1, batch_size=4)
    try:
        one.async_reset()
        general.async_reset()
        got, want = one.recv(), general.recv()
        for t in range(100):
            _same(got, want, f"{form} batch {t}")
            ids = got[4]["env_id"]
            actions = (ids + t) % 2
            if t % 2:  # EnvPool's step(action, env_id): send and recv in one call
                got, want = one.step(actions, ENV_IDS[form](ids)), general.step(actions, ids)
                continue
            one.send(actions, ENV_IDS[form](ids))
            general.send(actions, ids)
            got, want = one.recv(), general.recv()
        _same(got, want, f"{form} last batch")
    finally:
        one.close()
        general.close()


@pytest.mark.parametrize("call", ["send", "step"])
@pytest.mark.parametrize("bad_actions", [False, True])
@pytest.mark.parametrize("ids", [[-1, 0, 1, 2], [0, 1, 2, 8], [0.5, 1, 2, 3], np.array([0, 1, 2, 9], np.int32), [0, 0, 1, 2]])
def test_bad_env_ids_raise_what_the_general_path_raises(ids, bad_actions, call):
    pools = _pools(num_envs=8, num_workers=1, batch_size=4)
    try:
        messages = []
        for envs in pools:
            envs.async_reset()
            back = envs.recv()[4]["env_id"]
            with pytest.raises(Error) as info:
                getattr(envs, call)(np.full(4, 7 if bad_actions else 0), ids)
            messages.append((type(info.value), str(info.value)))
            # Nothing was sent: the pool takes a good send and answers it.
            envs.send(np.zeros(4, dtype=np.int64), back)
            assert len(envs.recv()[0]) == 4
        assert messages[0] == messages[1], messages
    finally:
        for envs in pools:
            envs.close()


def test_observation_views_stay_views_on_the_one_call_path():
    envs = shmenv.make_vec("CartPole-v1", 8, num_workers=1, batch_size=4, seed=2, copy=False)
    try:
        assert envs._one_call
        envs.async_reset()
        obs = envs.recv()[0]
        start, end = envs.mapping_range
        assert not obs.flags.writeable and start <= obs.ctypes.data < end
    finally:
        envs.close()


def test_pools_python_must_complete_take_the_general_path():
    same_step = shmenv.make_vec("CartPole-v1", 2, num_workers=1, autoreset_mode="same_step")
    restarting = shmenv.make_vec("CartPole-v1", 2, num_workers=1, max_restarts=1)
    try:
        assert not same_step._one_call and not restarting._one_call
    finally:
        same_step.close()
        restarting.close()


def test_a_closed_pool_reports_bad_actions_first_as_the_general_path_does():
    one, general = _pools()
    one.close()
    general.close()
    for bad in (np.full(6, 5), np.zeros(6)):
        errors = []
        for envs in (one, general):
            with pytest.raises(Error) as info:
                envs.step(bad)
            errors.append((type(info.value), str(info.value)))
        assert errors[0] == errors[1], errors


def test_the_infos_options_may_change_between_steps():
    one, general = _pools()
    try:
        one.reset()
        general.reset()
        for t, (pool_infos, key) in enumerate([(1, "episode"), (0, None), ([], "e"), (True, "")] * 10):
            for envs in (one, general):
                envs.pool_infos, envs.episode_stats_key = pool_infos, key
            assert one.episode_stats_key == (key or "")
            actions = np.full(6, t % 2)
            _same(one.step(actions), general.step(actions), f"step {t}")
        with pytest.raises(shmenv.errors.InvalidArgumentError, match="episode_stats_key must be a str"):
            one.episode_stats_key = ("episode",)
    finally:
        one.close()
        general.close()
