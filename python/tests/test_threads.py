"""A pool is used from one thread at a time: every call that touches the pool or its call
channel (``step``, ``reset``, ``send``/``recv``, ``get_attr``, ``call``, ``set_attr``,
``render``, ``stats``, ``close``) from a second thread while one is inside raises
``UsageError`` naming that thread; none hangs, none returns another call's data, and the
pool works as before once the threads are done."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import shmenv
from shmenv.errors import UsageError

pytestmark = pytest.mark.timeout(120)

ENV = "shmenv_fixtures.slow:SlowEnv"


def _wait_inside(envs, thread: threading.Thread, limit: float = 60.0) -> None:
    """Waits until ``thread`` is inside a call on ``envs`` (it holds the pool's guard)."""
    deadline = time.monotonic() + limit
    while envs._caller.owner != thread.ident:
        assert thread.is_alive(), "the stepping thread ended before it entered the pool"
        assert time.monotonic() < deadline, "the stepping thread never entered the pool"
        time.sleep(0.001)


@pytest.mark.parametrize("batch_size", [None, 2], ids=["sync", "async"])
def test_a_second_thread_is_refused_while_a_step_is_inside(no_leaks, batch_size, tmp_path):
    gate = tmp_path / "gate"
    with shmenv.make_vec(ENV, 4, num_workers=2, seed=0, batch_size=batch_size, step_timeout=30) as envs:
        infos = envs.reset()[1]
        ids = infos["env_id"] if batch_size else None
        if batch_size:
            envs.recv()  # the other envs' resets: every env is idle now
        envs.set_attr("gate", str(gate))  # the step waits inside the pool until the gate opens
        errors: list[BaseException] = []
        actions = np.zeros(4 if batch_size is None else 2, np.int64)

        def stepping():
            try:
                envs.step(actions, ids)
            except BaseException as e:  # noqa: BLE001 - checked below
                errors.append(e)

        stepper = threading.Thread(target=stepping, name="stepper")
        stepper.start()
        _wait_inside(envs, stepper)
        for attempt in (
            lambda: envs.get_attr("mode"),
            lambda: envs.call("get_wrapper_attr", "mode"),
            lambda: envs.set_attr("mode", "x"),
            envs.stats,
            envs.reset,
            lambda: envs.step(np.zeros(4, np.int64)),
            envs.close,
        ):
            with pytest.raises(UsageError, match="in a call from thread 'stepper'"):
                attempt()
        assert stepper.is_alive(), "the step left the pool before the gate opened"
        gate.touch()
        stepper.join(60)
        assert not stepper.is_alive() and not errors, errors
        envs.set_attr("gate", None)
        assert envs.get_attr("mode") == ("fast",) * 4  # the refused set_attr changed nothing
        envs.step(actions, ids)


def test_concurrent_get_attr_and_step_never_mix_their_answers(no_leaks):
    """A race that used to mix answers: one thread loops ``step`` (string infos over the call channel),
    another loops ``get_attr``; each call either answers its own question or is refused."""
    with shmenv.make_vec(ENV, 4, num_workers=2, seed=0, step_timeout=30) as envs:
        envs.reset()
        stop = threading.Event()
        wrong: list[object] = []
        counts = {"steps": 0, "step_refused": 0, "gets": 0, "get_refused": 0}

        def stepping():
            for _ in range(300):
                try:
                    _, _, _, _, infos = envs.step(np.zeros(4, np.int64))
                    strings = infos.get("s", np.array([], object))[infos.get("_s", np.zeros(0, bool))]
                    if not all(isinstance(s, str) and s.startswith("str") for s in strings):
                        wrong.append(infos)
                    counts["steps"] += 1
                    time.sleep(0.002)  # room for the other thread's calls
                except UsageError:
                    counts["step_refused"] += 1
                    time.sleep(0.001)
                except BaseException as e:  # noqa: BLE001 - any other error is a failure
                    wrong.append(e)
                    break
            stop.set()

        def getting():
            while not stop.is_set():
                try:
                    modes = envs.get_attr("mode")
                    if modes != ("fast",) * 4:
                        wrong.append(modes)
                    counts["gets"] += 1
                except UsageError:
                    counts["get_refused"] += 1
                    time.sleep(0.001)
                except BaseException as e:  # noqa: BLE001 - any other error is a failure
                    wrong.append(e)
                    break

        threads = [threading.Thread(target=stepping, name="stepper"), threading.Thread(target=getting)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(100)
        assert not any(t.is_alive() for t in threads), f"a thread hung: {counts}"
        assert not wrong, f"answers of another call or unexpected errors: {wrong[:3]} ({counts})"
        assert counts["steps"] + counts["step_refused"] == 300
        # Single-threaded again: everything answers.
        assert envs.get_attr("mode") == ("fast",) * 4
        envs.step(np.zeros(4, np.int64))
        assert set(envs.stats()) >= {"verdict"}


def test_reads_from_another_thread_during_a_native_step_are_a_usage_error(no_leaks):
    """Native pools step in one extension call: a read from another thread meanwhile is
    refused with ``UsageError``, not PyO3's bare ``RuntimeError: Already mutably borrowed``.
    The stepping thread steps (each step 20 ms of env code) until the reader has been
    refused once, so the two surely meet, however busy the machine."""
    with shmenv.make_vec("Burn-v0", 2, num_workers=1, config={"step_us": 20_000}, seed=0) as envs:
        envs.reset()
        act = np.zeros((2,) + envs.single_action_space.shape, envs.single_action_space.dtype)
        refused = threading.Event()
        steps = []

        def stepping():
            while not refused.is_set() and len(steps) < 3000:
                envs.step(act)
                steps.append(1)

        stepper = threading.Thread(target=stepping, name="stepper")
        stepper.start()
        others: list[BaseException] = []
        while stepper.is_alive():
            try:
                envs.stats()
                envs.worker_pids
            except UsageError:
                refused.set()
            except BaseException as e:  # noqa: BLE001 - any other error is a failure
                others.append(e)
                refused.set()
        stepper.join()
        assert not others, f"not a UsageError: {others[:1]}"
        assert refused.is_set(), f"the reads never met a step in {len(steps)} steps"
        assert envs.stats()["verdict"]
