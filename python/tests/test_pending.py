"""``AsyncVectorEnv``'s split calls on a :class:`shmenv.ShmVectorEnv` (:mod:`shmenv.pending`):
``reset_async``/``reset_wait``, ``step_async``/``step_wait`` and ``call_async``/``call_wait``
give what the plain calls give; Gymnasium's errors for a call out of turn; a wait that
times out abandons the call, which still finishes before the next one; ``close()`` with a
call pending warns and lets it finish. Real worker processes, and :class:`PendingCalls` on
its own."""

from __future__ import annotations

import multiprocessing
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

import shmenv
from shmenv.pending import PendingCalls

pytestmark = pytest.mark.timeout(120)

SLOW = "shmenv_fixtures.slow:SlowEnv"


def _same(got: tuple, want: tuple, where: str) -> None:
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, dict):
            assert set(g) == set(w), f"{where}: infos keys {sorted(g)} != {sorted(w)}"
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{where}: item {k}")


@pytest.mark.parametrize("env", ["CartPole-v1", "shmenv_fixtures.counter:CounterEnv"], ids=["native", "hosted"])
def test_split_resets_and_steps_give_what_the_plain_calls_give(env, no_leaks):
    with shmenv.make_vec(env, 4, num_workers=2, seed=5) as split, shmenv.make_vec(env, 4, num_workers=2, seed=5) as plain:
        split.reset_async(seed=9)
        _same(split.reset_wait(timeout=60), plain.reset(seed=9), "reset")
        rng = np.random.default_rng(0)
        for t in range(12):
            actions = rng.integers(0, 2, size=4)
            split.step_async(actions)
            _same(split.step_wait(timeout=60), plain.step(actions), f"step {t}")
        split.reset_async()
        _same(split.reset_wait(), plain.reset(), "unseeded reset")
        # The plain calls work between split ones.
        _same(split.step(np.ones(4, np.int64)), plain.step(np.ones(4, np.int64)), "plain step")


def test_calls_out_of_turn_raise_gymnasiums_errors_and_change_nothing(no_leaks):
    with shmenv.make_vec("CartPole-v1", 3, num_workers=1, seed=0) as envs, shmenv.make_vec(
        "CartPole-v1", 3, num_workers=1, seed=0
    ) as ref:
        with pytest.raises(NoAsyncCallError, match=r"Calling `step_wait` without any prior call to `step_async`"):
            envs.step_wait()
        with pytest.raises(NoAsyncCallError, match=r"`reset_wait` without any prior call to `reset_async`"):
            envs.reset_wait()
        envs.reset_async(seed=1)
        with pytest.raises(AlreadyPendingCallError, match=r"Calling `step_async` while waiting for a pending call to `reset`"):
            envs.step_async(np.zeros(3, np.int64))
        with pytest.raises(AlreadyPendingCallError, match=r"Calling `step` while waiting for a pending call to `reset`"):
            envs.step(np.zeros(3, np.int64))
        with pytest.raises(AlreadyPendingCallError, match=r"Calling `reset` while waiting for a pending call to `reset`"):
            envs.reset()
        with pytest.raises(NoAsyncCallError, match=r"`step_wait` without any prior call to `step_async`"):
            envs.step_wait()  # the wrong kind: the reset stays pending
        _same(envs.reset_wait(timeout=60), ref.reset(seed=1), "the pending reset")
        _same(envs.step(np.zeros(3, np.int64)), ref.step(np.zeros(3, np.int64)), "the step after")


def test_a_wait_that_times_out_abandons_the_call_which_finishes_before_the_next(tmp_path, no_leaks):
    gate = tmp_path / "gate"
    with shmenv.make_vec(SLOW, 2, num_workers=1, seed=0, config={"gate": str(gate)}) as envs:
        envs.reset(seed=0)
        envs.step_async(np.zeros(2, np.int64))
        with pytest.raises(multiprocessing.TimeoutError, match=r"The call to `step_wait` has timed out after 0.05 second"):
            envs.step_wait(timeout=0.05)
        with pytest.raises(NoAsyncCallError):
            envs.step_wait()  # the abandoned call's results are dropped
        gate.touch()
        obs, *_ = envs.step(np.zeros(2, np.int64))  # waits for the abandoned step, then steps
        assert obs[:, 0].tolist() == [2, 2], "the abandoned step ran, and the next one after it"
        envs.step_async(np.zeros(2, np.int64))
        with pytest.raises(multiprocessing.TimeoutError):
            envs.step_wait(timeout=0.0)  # the step takes a round trip at least: not done at once
        envs.reset_async()  # starts once the abandoned step finished
        obs, _ = envs.reset_wait(timeout=60)
        assert obs[:, 0].tolist() == [0, 0]


def test_close_with_a_call_pending_warns_and_lets_it_finish(tmp_path, no_leaks):
    gate = tmp_path / "gate"
    envs = shmenv.make_vec(SLOW, 2, num_workers=1, seed=0, config={"gate": str(gate)})
    envs.reset(seed=0)
    envs.step_async(np.zeros(2, np.int64))
    opener = threading.Timer(0.3, gate.touch)
    opener.start()
    with pytest.warns(UserWarning, match=r"Calling `close` while waiting for a pending call to `step` to complete"):
        envs.close()
    opener.join()
    assert envs.closed and gate.exists(), "close() returned only after the pending step could finish"
    with pytest.raises(NoAsyncCallError):
        envs.step_wait()
    with pytest.raises(shmenv.ClosedError):
        envs.step_async(np.zeros(2, np.int64))
    with pytest.raises(shmenv.ClosedError):
        envs.reset_async()


def test_pending_calls_on_their_own():
    """The state machine without a pool: one call at a time, kinds matched, a timed-out
    call abandoned and finished before the next, ``busy`` while one is pending or abandoned."""
    split = PendingCalls()
    assert not split.busy
    release = threading.Event()
    split.start("step", lambda: release.wait(60) and "stepped")
    assert split.busy
    with pytest.raises(AlreadyPendingCallError):
        split.start("reset", lambda: None)
    with pytest.raises(AlreadyPendingCallError, match=r"Calling `step` while waiting for a pending call to `step`"):
        split.refuse("step")
    with pytest.raises(multiprocessing.TimeoutError):
        split.wait("step", 0.01)
    assert split.busy and split.pending is None and split.abandoned is not None
    release.set()
    split.refuse("step")  # waits for the abandoned call
    assert not split.busy
    split.start("reset", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        split.wait("reset", 60)
    split.start("reset", lambda: (time.sleep(0.01), "done")[1])
    assert split.wait("reset", 60) == "done" and not split.busy
    split.call_async(lambda: ("a", "b"))
    assert split.call_wait() == ("a", "b")


@pytest.mark.timeout(60)
def test_call_async_call_wait_and_np_random_as_async_vector_env(no_leaks):
    from shmenv_fixtures.counter import CounterEnv

    ref = gym.vector.SyncVectorEnv([CounterEnv for _ in range(4)])
    with shmenv.make_vec("shmenv_fixtures.counter:CounterEnv", 4, num_workers=2) as envs:
        envs.reset(seed=3)
        ref.reset(seed=3)
        envs.call_async("bump", 2)
        with pytest.raises(gym.error.AlreadyPendingCallError):
            envs.call_async("bump", 2)
        assert envs.call_wait(timeout=1) == ref.call("bump", 2)
        with pytest.raises(gym.error.NoAsyncCallError):
            envs.call_wait()
        envs.call_async("no_such_method")
        with pytest.raises(shmenv.WorkerError, match="no_such_method"):
            envs.call_wait()
        # A call pending does not hold the pool: steps go on meanwhile.
        envs.call_async("bump", 1)
        envs.step(np.zeros(4, np.int64))
        ref.step(np.zeros(4, np.int64))
        assert envs.call_wait() == ref.call("bump", 1)
        # Copies of each env's generator, in the state the env's own draws left it.
        got = [g.integers(0, 2**31) for g in envs.np_random]
        want = [g.integers(0, 2**31) for g in ref.np_random]
        assert got == want
    ref.close()
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1) as native:
        with pytest.raises(AttributeError, match="native shmenv env"):
            native.np_random
