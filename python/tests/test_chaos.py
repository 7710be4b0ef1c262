"""Chaos under the restart policy (``max_restarts``), with real worker processes: SIGKILL
storms on hosted Python envs (random kills, and replacements killed as soon as they show
up in ``worker_pids``, often while they take their call channel) must cost no batch and no
env, in async and sync mode; a call right after a kill restarts the worker as a step
would. ``SHMENV_CHAOS_SECONDS`` sets each storm's length (default 20 s)."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import numpy as np
import pytest
from conftest import children, wait_gone

import shmenv
from shmenv.channel.trainer import CallChannel

SECONDS = float(os.environ.get("SHMENV_CHAOS_SECONDS", "20"))
NUM_ENVS, NUM_WORKERS = 8, 3

pytestmark = pytest.mark.timeout(int(SECONDS) + 120)


def trivial_env_factory():
    """A factory of a trivial env (Box(3) float64 observations, Discrete(2) actions),
    pickled by value (the workers never import this module)."""

    def make():
        import gymnasium as gym
        import numpy as np
        from gymnasium import spaces

        class Trivial(gym.Env):
            observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float64)
            action_space = spaces.Discrete(2)
            t = 0

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.t = 0
                return np.zeros(3), {}

            def step(self, action):
                self.t += 1
                return np.full(3, float(self.t)), 1.0, False, self.t >= 50, {}

            def steps(self) -> int:
                return self.t

        return Trivial()

    return make


def shard(w: int) -> list[int]:
    """The envs of worker ``w`` (the engine's split)."""
    return list(range(w * NUM_ENVS // NUM_WORKERS, (w + 1) * NUM_ENVS // NUM_WORKERS))


def make(batch_size: int | None = None, max_restarts: int | None = 100_000, step_timeout: float | None = 5.0):
    return shmenv.make_vec(
        trivial_env_factory(), NUM_ENVS, num_workers=NUM_WORKERS, batch_size=batch_size, seed=0,
        max_restarts=max_restarts, step_timeout=step_timeout, pool_infos=True,  # env_id in sync mode too
    )


class Killer(threading.Thread):
    """SIGKILLs a random worker (a child of this process) every 0.5-2.5 s; after every
    other kill, also the replacement as soon as it shows up in ``worker_pids``."""

    def __init__(self, envs, seed: int):
        super().__init__(daemon=True, name="chaos-killer")
        self.envs, self.rng, self.done = envs, random.Random(seed), threading.Event()
        self.kills = self.chased = 0

    def pids(self, tries: int = 1_000_000) -> list[int] | None:
        """The pool's worker pids; None once stopped or after ``tries`` failed reads
        (reading them fails while the main thread is inside a pool call)."""
        for _ in range(tries):
            if self.done.is_set():
                return None
            try:
                return list(self.envs.worker_pids)
            except RuntimeError:  # the pool is in a call of the main thread
                time.sleep(0.0005)
        return None

    def kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
            self.kills += 1
        except ProcessLookupError:
            pass

    def chase(self, w: int, old: int) -> None:
        """Kills worker ``w``'s replacement (of ``old``) once ``worker_pids`` shows it."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = self.pids()
            if pids is None:
                return
            if pids[w] != old:
                self.kill(pids[w])
                self.chased += 1
                return
            time.sleep(0.0005)

    def run(self) -> None:
        while not self.done.wait(self.rng.uniform(0.5, 2.5)):
            workers = sorted(children())
            if not workers:
                continue
            victim = self.rng.choice(workers)
            pids = self.pids(tries=400) or []
            self.kill(victim)
            if victim in pids and self.rng.random() < 0.5:
                self.chase(pids.index(victim), victim)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)
        assert not self.is_alive()


def test_async_storm_loses_no_batch_and_no_env(no_leaks):
    sent = np.zeros(NUM_ENVS, np.int64)
    got = np.zeros(NUM_ENVS, np.int64)
    with make(batch_size=2) as envs:
        envs.async_reset()
        sent += 1
        killer = Killer(envs, seed=1)
        killer.start()
        try:
            deadline = time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                obs, _, _, _, infos = envs.recv()
                ids = infos["env_id"]
                assert obs.shape == (2, 3) and len(ids) == 2
                np.add.at(got, ids, 1)
                assert (got <= sent).all(), "an env came back more often than it was sent"
                envs.send(np.zeros(len(ids), np.int64), ids)
                np.add.at(sent, ids, 1)
        finally:
            killer.stop()
        for _ in range(NUM_ENVS):  # every env sent comes back, none disappears
            if (got == sent).all():
                break
            np.add.at(got, envs.recv()[4]["env_id"], 1)
        np.testing.assert_array_equal(got, sent)
        assert killer.kills > 0 and sum(envs.restarts) > 0
        print(f"async storm: {got.sum()} rows, {killer.kills} kills ({killer.chased} replacements), {envs.restarts}")
        _still_usable_async(envs)
        pids = list(envs.worker_pids)
    assert not wait_gone(pids)
    assert not [p for p in children() if p in pids]


def _still_usable_async(envs) -> None:
    envs.send(np.zeros(NUM_ENVS, np.int64), np.arange(NUM_ENVS))
    seen = []
    for _ in range(NUM_ENVS // 2):
        seen += envs.recv()[4]["env_id"].tolist()
    assert sorted(seen) == list(range(NUM_ENVS))
    assert len(envs.call("steps")) == NUM_ENVS


def test_sync_storm_every_step_returns_every_env(no_leaks):
    with make() as envs:
        envs.reset()
        killer = Killer(envs, seed=2)
        killer.start()
        steps = restarted = 0
        try:
            deadline = time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                obs, _, _, trunc, infos = envs.step(np.zeros(NUM_ENVS, np.int64))
                assert obs.shape == (NUM_ENVS, 3)
                np.testing.assert_array_equal(infos["env_id"], np.arange(NUM_ENVS))
                if "restarted_envs" in infos:
                    assert trunc[infos["restarted_envs"]].all()
                    restarted += 1
                steps += 1
        finally:
            killer.stop()
        assert killer.kills > 0 and sum(envs.restarts) > 0 and restarted > 0
        print(f"sync storm: {steps} steps, {killer.kills} kills ({killer.chased} replacements), {envs.restarts}")
        envs.step(np.zeros(NUM_ENVS, np.int64))
        assert len(envs.call("steps")) == NUM_ENVS
        pids = list(envs.worker_pids)
    assert not wait_gone(pids)
    assert not [p for p in children() if p in pids]


@pytest.mark.parametrize("batch_size", [None, 2], ids=["sync", "async"])
def test_replacements_dying_while_they_take_their_call_channel_cost_nothing(no_leaks, monkeypatch, batch_size):
    """The first two replacements of worker 1 die while being sent the info area (the
    pool's refresh after a restart): the step path carries on and the third one serves."""
    with make(batch_size=batch_size) as envs:
        ids = envs.reset()[1]["env_id"]
        original, victims = CallChannel._send_shared, []

        def dying(channel, w):
            if len(victims) < 2:
                victims.append(channel._peers[w])
                os.kill(victims[-1], signal.SIGKILL)
                assert not wait_gone(victims[-1:])
            return original(channel, w)

        monkeypatch.setattr(CallChannel, "_send_shared", dying)
        os.kill(envs.worker_pids[1], signal.SIGKILL)
        assert not wait_gone(envs.worker_pids[1:2])
        seen = _step_until_restarted(envs, ids, shard(1), lambda: len(victims) == 2)
        assert set(seen) >= set(shard(1))
        assert len(envs.call("steps")) == NUM_ENVS  # the call restarts the worker if no step did
        assert envs.restarts == [0, 3, 0]


def _step_until_restarted(envs, ids, expected: list[int], also=lambda: True, limit: int = 3000) -> list[int]:
    """Steps (EnvPool style in async mode, sending ``ids`` first) until every env of
    ``expected`` came back restarted and ``also()`` holds; returns the restarted envs seen."""
    seen: list[int] = []
    for _ in range(limit):
        if envs.is_async:
            envs.send(np.zeros(len(ids), np.int64), ids)
            obs, _, _, trunc, infos = envs.recv()
            ids = infos["env_id"]
        else:
            obs, _, _, trunc, infos = envs.step(np.zeros(NUM_ENVS, np.int64))
        rows = [list(infos["env_id"]).index(e) for e in infos.get("restarted_envs", [])]
        assert trunc[rows].all()
        seen += infos.get("restarted_envs", [])
        if set(seen) >= set(expected) and also():
            return seen
    raise AssertionError(f"envs {expected} never came back restarted (seen {seen})")


@pytest.mark.parametrize("batch_size", [None, 2], ids=["sync", "async"])
def test_a_call_right_after_a_kill_restarts_the_worker(no_leaks, batch_size):
    with make(batch_size=batch_size, max_restarts=5, step_timeout=None) as envs:
        ids = envs.reset()[1]["env_id"]
        victim = envs.worker_pids[1]
        os.kill(victim, signal.SIGKILL)
        assert envs.call("steps") == (0,) * NUM_ENVS  # no WorkerDiedError: the worker is restarted
        assert envs.restarts == [0, 1, 0] and envs.worker_pids[1] != victim
        assert not wait_gone([victim])
        # Its envs come back as restarted episodes through the step path, as after any death.
        assert set(_step_until_restarted(envs, ids, shard(1))) == set(shard(1))
        assert len(envs.get_attr("t")) == NUM_ENVS


@pytest.mark.parametrize("max_restarts", [0, None], ids=["budget-spent", "no-policy"])
def test_a_call_after_a_kill_with_no_restart_left_closes_the_pool(no_leaks, max_restarts):
    with make(max_restarts=max_restarts) as envs:
        envs.reset()
        os.kill(envs.worker_pids[0], signal.SIGKILL)
        with pytest.raises(shmenv.WorkerDiedError) as e:
            envs.call("steps")
        assert e.value.worker == 0 and e.value.env_ids and 0 in e.value.env_ids
        with pytest.raises(shmenv.ClosedError):
            envs.step(np.zeros(NUM_ENVS, np.int64))


def test_a_call_after_a_kill_before_the_first_reset_says_to_reset(no_leaks):
    with make(max_restarts=5) as envs:
        os.kill(envs.worker_pids[2], signal.SIGKILL)
        with pytest.raises(shmenv.UsageError, match=r"reset\(\) first"):
            envs.call("steps")
        envs.reset()
        assert len(envs.call("steps")) == NUM_ENVS
        assert envs.restarts == [0, 0, 1]
