"""Owned result arrays are refilled only when the caller has let go of them: an array the
caller holds (directly, through a view, a memoryview, or a container) never changes, an
array it changed the layout or flags of is not reused, and arrays it dropped are reused
(the same memory comes back) with the new batch's values. Each test checks values
against a second pool stepped alike and kept in fresh copies. (pytest-timeout bounds
every test.)"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import shmenv


def _pair(**kwargs):
    a = shmenv.make_vec("CartPole-v1", 8, num_workers=2, seed=4, **kwargs)
    b = shmenv.make_vec("CartPole-v1", 8, num_workers=2, seed=4, **kwargs)
    return a, b


def _copies(result):
    obs, rew, term, trunc, infos = result
    return [np.array(x) for x in (obs, rew, term, trunc)]


def _marks(arrays) -> set[tuple[int, int]]:
    """Each array's object and memory."""
    return {(id(a), a.ctypes.data) for a in arrays}


def _take_what_was_freed() -> list[np.ndarray]:
    """Small arrays of the result dtypes, to be kept until the next batch: they take the
    objects and memory that arrays freed just before had (numpy and CPython hand those back
    first), so a new array of the next batch with the object and memory of a dropped one
    can only be that array, refilled."""
    return [np.empty(k, dt) for dt in (np.float32, np.float64, np.int64, np.int32, bool) for k in (4, 8) * 20]


@pytest.mark.parametrize("path", ["one call", "general"])
def test_arrays_the_caller_holds_never_change_and_dropped_ones_come_back_refilled(path):
    envs, ref = _pair(pool_infos=True)
    if path == "general":
        envs._one_call = False
    try:
        envs.reset()
        ref.reset()
        held, held_copies, dropped, reused = [], [], set(), 0
        for t in range(300):
            actions = np.full(8, t % 2)
            result, want = envs.step(actions), _copies(ref.step(actions))
            for got, w in zip(result[:4], want):
                np.testing.assert_array_equal(got, w, err_msg=f"step {t}")
                assert got.flags.writeable and got.flags.owndata
            reused += len(_marks(result[:4]) & dropped)
            result[1][:] = -7.0  # writing into a returned array is allowed and changes nothing else
            if t % 10 == 0:  # keep some batches: they must never change
                held.append(result)
                held_copies.append(_copies(result))
            dropped = set() if t % 10 == 0 else _marks(result[:4])
            del result
            sink = _take_what_was_freed()  # noqa: F841 (kept until the next batch)
        for t, (result, copies) in enumerate(zip(held, held_copies)):
            for got, w in zip(result[:4], copies):
                np.testing.assert_array_equal(got, w, err_msg=f"held batch {t}")
        assert reused > 400, f"dropped arrays are refilled: {reused} of 1200 result arrays were"
    finally:
        envs.close()
        ref.close()


HOLDERS = {
    "a view": lambda a: a[2:],
    "a memoryview": memoryview,
    "a list": lambda a: [a],
    "the transpose": lambda a: a.T,
}


@pytest.mark.parametrize("holder", list(HOLDERS))
def test_an_array_held_only_through_something_else_is_not_refilled(holder):
    envs, ref = _pair()
    try:
        envs.reset()
        ref.reset()
        obs = envs.step(np.zeros(8, np.int64))[0]
        want = np.array(obs)
        kept = HOLDERS[holder](obs)
        del obs
        gc.collect()
        for t in range(20):
            envs.step(np.full(8, t % 2))
        np.testing.assert_array_equal(np.asarray(kept), np.asarray(HOLDERS[holder](want)))
    finally:
        envs.close()
        ref.close()


def test_an_array_reachable_by_a_weak_reference_is_never_refilled_and_goes_when_dropped():
    envs, ref = _pair()
    try:
        envs.reset()
        ref.reset()
        obs = envs.step(np.zeros(8, np.int64))[0]
        want, weak = np.array(obs), weakref.ref(obs)
        del obs
        for t in range(10):
            envs.step(np.full(8, t % 2))
            array = weak()
            assert array is None or np.array_equal(array, want), f"step {t}: a dropped array reachable weakly changed"
            del array
        assert weak() is None, "a dropped array with a weak reference is let go of, as without the pool's reuse"
    finally:
        envs.close()
        ref.close()


def test_closing_the_pool_lets_go_of_the_arrays_it_kept():
    envs = shmenv.make_vec("CartPole-v1", 4, num_workers=1, seed=4)
    envs.reset()
    weak = []
    for t in range(5):
        obs = envs.step(np.zeros(4, np.int64))[0]
        weak.append(weakref.ref(obs))
        del obs
    envs.close()
    # The last arrays the pool handed out were weakly referenced: it let go of them.
    gc.collect()
    assert all(w() is None for w in weak)


CHANGES = {
    "made read-only": lambda a: a.setflags(write=False),
    "reshaped in place": lambda a: setattr(a, "shape", (a.size,)),
    "resized": lambda a: a.resize((a.shape[0] + 1, a.shape[1]), refcheck=False),
    "retyped in place": lambda a: setattr(a, "dtype", np.int32),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_an_array_the_caller_changed_is_not_reused(change):
    envs, ref = _pair()
    try:
        envs.reset()
        ref.reset()
        for t in range(30):
            actions = np.full(8, t % 3 == 0, dtype=np.int64)
            obs = envs.step(actions)[0]
            want = ref.step(actions)[0]
            assert obs.shape == (8, 4) and obs.dtype == np.float32 and obs.flags.writeable, (change, t)
            np.testing.assert_array_equal(obs, want, err_msg=f"{change}, step {t}")
            CHANGES[change](obs)
            del obs
    finally:
        envs.close()
        ref.close()


def test_async_batches_refill_what_the_caller_dropped():
    envs = shmenv.make_vec("CartPole-v1", 8, num_workers=1, batch_size=4, seed=4)
    ref = shmenv.make_vec("CartPole-v1", 8, num_workers=1, batch_size=4, seed=4)
    try:
        envs.async_reset()
        ref.async_reset()
        for t in range(200):
            got, want = envs.recv(), ref.recv()
            want = [np.array(x) for x in want[:4]] + [{k: np.array(v) for k, v in want[4].items() if k in ("env_id", "elapsed_step")}]
            for g, w in zip(got[:4], want[:4]):
                np.testing.assert_array_equal(g, w, err_msg=f"batch {t}")
            for key, w in want[4].items():
                np.testing.assert_array_equal(got[4][key], w, err_msg=f"batch {t} {key}")
            ids = np.array(got[4]["env_id"])
            del got
            envs.send(ids % 2, ids)
            ref.send(ids % 2, ids)
    finally:
        envs.close()
        ref.close()


def test_a_tensor_sharing_an_array_keeps_it_from_being_refilled():
    torch = pytest.importorskip("torch", reason="torch is not installed (too big for CI); run locally with torch")
    envs = shmenv.make_vec("CartPole-v1", 8, num_workers=2, seed=4)
    try:
        envs.reset()
        obs, rewards = envs.step(np.zeros(8, np.int64))[:2]
        tensors = [torch.from_numpy(obs), torch.from_numpy(rewards)]
        want = [t.clone() for t in tensors]
        del obs, rewards
        for t in range(20):
            envs.step(np.full(8, t % 2))
        for got, w in zip(tensors, want):
            assert torch.equal(got, w)
    finally:
        envs.close()


def _info_arrays(infos: dict, prefix: str = "") -> dict[str, np.ndarray]:
    """The number arrays of a batch's infos by key, nested ones (``final_info``) included."""
    out = {}
    for key, value in infos.items():
        if isinstance(value, dict):
            out.update(_info_arrays(value, f"{prefix}{key}."))
        elif value.dtype != object:
            out[prefix + key] = value
    return out


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize("config", [{}, {"mixed": True, "many": 20}], ids=["columns", "several dtypes and pickled"])
def test_hosted_envs_info_arrays_held_never_change_and_dropped_ones_come_back_refilled(mode, config):
    """The info arrays of hosted envs (``lives``, ``episode_frame_number``, ..., their masks
    and, under same-step auto-reset, ``final_info``'s) follow the same rule: each batch's
    equal ``SyncVectorEnv``'s, the held ones never change, the dropped ones are reused.
    Also with a key whose values change type (merged from a column per type) and with more
    keys than a worker's columns (the rest fetched pickled, into the arrays' dict)."""
    import gymnasium as gym
    from shmenv_fixtures.infos import LivesEnv
    from test_infos import assert_vector_infos_equal

    n = 4
    ref = gym.vector.SyncVectorEnv(
        [lambda: LivesEnv(**config) for _ in range(n)],
        autoreset_mode=gym.vector.AutoresetMode(mode.title().replace("_", "")),
    )
    envs = shmenv.make_vec("shmenv_fixtures.infos:LivesEnv", n, num_workers=2, autoreset_mode=mode, config=config)
    try:
        envs.reset(seed=1)
        ref.reset(seed=1)
        held, dropped, reused = [], set(), 0
        for t in range(60):
            actions = np.full(n, t % 3)
            infos, want = envs.step(actions)[4], ref.step(actions)[4]
            assert_vector_infos_equal(infos, want, f"step {t}")
            arrays = _info_arrays(infos)
            reused += len(_marks(arrays.values()) & dropped)
            if t % 7 == 0:  # keep some batches' infos: they must never change
                held.append((t, arrays, {k: np.array(v) for k, v in arrays.items()}))
            dropped = set() if t % 7 == 0 else _marks(arrays.values())
            del infos, arrays
            sink = _take_what_was_freed()  # noqa: F841 (kept until the next batch)
        for t, arrays, copies in held:
            for key, copy in copies.items():
                np.testing.assert_array_equal(arrays[key], copy, err_msg=f"held infos of step {t}, key {key}")
        assert reused > 100, f"dropped info arrays are refilled: {reused} were"
    finally:
        envs.close()
        ref.close()
