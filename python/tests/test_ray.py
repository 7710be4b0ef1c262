"""shmenv.ray: pools in Ray actors on a 2-node Ray cluster simulated on this machine
(``ray.cluster_utils.Cluster``), compared step for step with one local pool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

# Ray's nodes on 127.0.0.1 (its simulated nodes then talk over loopback only).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'shmenv[ray]')")

import shmenv  # noqa: E402
import shmenv.ray as shmenv_ray  # noqa: E402
from conftest import alive, wait_gone  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    c.add_node(num_cpus=2)
    ray.init(address=c.address, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def wait_actor_gone(actor, timeout: float = 30.0) -> None:
    """Waits until Ray reports ``actor`` dead (a call to it fails)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.describe.remote(), timeout=1.0)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.05)
    raise AssertionError(f"the killed actor still answered after {timeout} s")


def processes_of(envs) -> list[int]:
    """The actor processes and their pools' worker processes."""
    return [p for a in envs.actors for p in [a["pid"], *a["worker_pids"]]]


def assert_batches_equal(got, want, where: str) -> None:
    assert len(got) == len(want), where
    for name, x, y in zip(("obs", "rewards", "terminations", "truncations"), got[:-1], want[:-1]):
        np.testing.assert_array_equal(x, y, err_msg=f"{where}: {name}")
    gi, wi = got[-1], want[-1]
    assert sorted(gi) == sorted(wi), where
    np.testing.assert_array_equal(gi["env_id"], wi["env_id"], err_msg=where)
    np.testing.assert_array_equal(gi["elapsed_step"], wi["elapsed_step"], err_msg=where)
    if "episode_stats" in wi:
        np.testing.assert_array_equal(gi["_episode_stats"], wi["_episode_stats"], err_msg=where)
        np.testing.assert_array_equal(gi["episode_stats"]["r"], wi["episode_stats"]["r"], err_msg=where)
        np.testing.assert_array_equal(gi["episode_stats"]["l"], wi["episode_stats"]["l"], err_msg=where)
    if "final_obs" in wi:
        for i in np.flatnonzero(wi["_final_obs"]):
            np.testing.assert_array_equal(gi["final_obs"][i], wi["final_obs"][i], err_msg=where)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_sync_steps_equal_one_local_pool(cluster, mode):
    n = 9  # actors of 4 and 5 envs (the engine's shards of 9 envs on 2 workers)
    kwargs = dict(seed=11, autoreset_mode=mode, max_episode_steps=40)
    envs = shmenv_ray.make_vec("CartPole-v1", n, num_actors=2, num_workers=2, placement="strict_spread", **kwargs)
    local = shmenv.make_vec("CartPole-v1", n, num_workers=2, pool_infos=True, **kwargs)
    try:
        assert len({a["node_id"] for a in envs.actors}) == 2, envs.actors
        assert [a["envs"] for a in envs.actors] == [(0, 4), (4, 9)] == [tuple(r) for r in local._pool.shards()]
        assert envs.single_observation_space == local.single_observation_space
        assert envs.observation_space == local.observation_space
        assert envs.metadata["autoreset_mode"] == local.metadata["autoreset_mode"]
        obs, infos = envs.reset()
        want = local.reset()
        assert_batches_equal((obs, infos), want, "reset")
        rng = np.random.default_rng(0)
        ended = 0
        for t in range(150):
            actions = rng.integers(0, 2, n)
            got = envs.step(actions)
            want = local.step(actions)
            assert_batches_equal(got, want, f"step {t}")
            assert got[0].flags.writeable and got[1].flags.writeable, "results are the caller's arrays"
            ended += int(np.sum(want[2] | want[3]))
        assert ended > n, "episodes must end (and auto-reset) during the run"
        # Seeds as lists, and a partial reset: the same on both.
        seeds = [100 + 3 * i for i in range(n)]
        assert_batches_equal(envs.reset(seed=seeds), local.reset(seed=seeds), "reset(seed=list)")
        mask = np.zeros(n, dtype=bool)
        mask[[1, 2]] = True  # both in actor 0: actor 1's rows keep their observations
        options = {"reset_mask": mask}
        assert_batches_equal(envs.reset(seed=7, options=options), local.reset(seed=7, options=options), "reset_mask")
        actions = rng.integers(0, 2, n)
        assert_batches_equal(envs.step(actions), local.step(actions), "after reset_mask")
    finally:
        envs.close()
        local.close()


def per_env_streams(envs, n: int, steps: int) -> dict[int, list]:
    """Runs an EnvPool loop (every received env sent again) until every env has ``steps``
    results; returns each env's results in order. Env ``e``'s ``t``-th action is
    ``(t * 7 + e) % 3 % 2``, whatever the order the envs come back in."""
    streams: dict[int, list] = {e: [] for e in range(n)}
    obs, infos = envs.reset()
    k = len(infos["env_id"])  # reset rows come back as a recv()'s do: reward 0, no flags
    batch = (obs, np.zeros(k, np.float32), np.zeros(k, bool), np.zeros(k, bool), infos)
    while min(len(s) for s in streams.values()) < steps:
        ids = batch[4]["env_id"]
        for r, e in enumerate(ids.tolist()):
            streams[e].append(tuple(np.array(x[r]) for x in batch[:4]))
        actions = np.array([(len(streams[e]) * 7 + e) % 3 % 2 for e in ids.tolist()])
        envs.send(actions, ids)
        batch = envs.recv()
    return {e: s[:steps] for e, s in streams.items()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_actors, batch_size", [(2, 6), (3, 4)])  # actor batches of 3, and of 2 (4 / 3 is not whole)
def test_async_envs_step_as_in_one_local_pool(cluster, num_actors, batch_size):
    n, steps = 12, 60
    envs = shmenv_ray.make_vec("CartPole-v1", n, num_actors=num_actors, num_workers=num_actors, batch_size=batch_size,
                               seed=5, num_cpus_per_actor=1)
    local = shmenv.make_vec("CartPole-v1", n, num_workers=2, batch_size=batch_size, seed=5)
    try:
        assert envs.is_async and envs.observation_space.shape == (batch_size, 4)
        assert envs._actor_batch == {6: 3, 4: 2}[batch_size]
        got, want = per_env_streams(envs, n, steps), per_env_streams(local, n, steps)
        for e in range(n):
            for t, (g, w) in enumerate(zip(got[e], want[e])):
                for x, y in zip(g, w):
                    np.testing.assert_array_equal(x, y, err_msg=f"env {e}, result {t}")
        ended = sum(bool(r[2] or r[3]) for e in range(n) for r in want[e][1:])
        assert ended >= n // 2, "episodes must end (and auto-reset) during the run"
    finally:
        envs.close()
        local.close()


@pytest.mark.timeout(120)
def test_large_batches_step_as_in_one_local_pool(cluster):
    from shmenv.ray.channel import SMALL_MESSAGE

    n = 8  # 4 envs per actor of 84x84x4 u8: 113 KB per actor batch, header and body sent apart
    kwargs = dict(seed=3, config={"obs_shape": [84, 84, 4], "obs_dtype": "u8", "episode_len": 5})
    envs = shmenv_ray.make_vec("Burn-v0", n, num_actors=2, num_workers=2, **kwargs)
    local = shmenv.make_vec("Burn-v0", n, num_workers=2, pool_infos=True, **kwargs)
    try:
        assert local.single_observation_space.shape == (84, 84, 4)
        assert (n // 2) * 84 * 84 * 4 > SMALL_MESSAGE
        assert_batches_equal(envs.reset(), local.reset(), "reset")
        for t in range(12):
            actions = local.action_space.sample()
            got = envs.step(actions)
            assert_batches_equal(got, local.step(actions), f"step {t}")
            assert got[0].flags.writeable, "results are the caller's arrays"
    finally:
        envs.close()
        local.close()


@pytest.mark.timeout(120)
def test_bad_actions_are_refused_before_any_actor_steps(cluster):
    envs = shmenv_ray.make_vec("CartPole-v1", 4, num_actors=2, num_workers=2, seed=1)
    local = shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=1, pool_infos=True)
    try:
        envs.reset()
        local.reset()
        with pytest.raises(shmenv.ActionError, match="env 3"):
            envs.step(np.array([0, 1, 0, 2]))
        with pytest.raises(shmenv.ActionError, match="shape"):
            envs.step(np.array([0, 1]))
        with pytest.raises(shmenv.UsageError, match="sync"):
            envs.recv()
        actions = np.array([1, 0, 1, 1])
        assert_batches_equal(envs.step(actions), local.step(actions), "after refused actions")
    finally:
        envs.close()
        local.close()


def test_arguments_are_checked_before_any_actor_starts():
    with pytest.raises(shmenv.InvalidArgumentError, match="smallest of the 3 actors has 1: lower num_actors"):
        shmenv_ray.make_vec("CartPole-v1", 4, num_actors=3, batch_size=2)
    with pytest.raises(shmenv.InvalidArgumentError, match="more than num_envs"):
        shmenv_ray.make_vec("CartPole-v1", 2, num_actors=3)
    with pytest.raises(TypeError, match="num_wokers"):
        shmenv_ray.make_vec("CartPole-v1", 2, num_actors=1, num_wokers=2)


@pytest.mark.timeout(120)
def test_a_killed_actor_raises_a_typed_error_naming_it(cluster):
    envs = shmenv_ray.make_vec("CartPole-v1", 6, num_actors=2, num_workers=2, seed=2, placement="strict_spread")
    victim = envs.actors[1]
    pids = processes_of(envs)
    envs.reset()
    for _ in range(5):
        envs.step(np.zeros(6, dtype=np.int64))
    ray.kill(envs._actors.handles[1])
    with pytest.raises(shmenv.ActorDiedError) as info:
        for _ in range(50):  # the kill lands within a step or two
            envs.step(np.zeros(6, dtype=np.int64))
    err = info.value
    assert isinstance(err, shmenv.WorkerDiedError)
    assert (err.actor, err.node_id, err.pid, err.env_ids) == (1, victim["node_id"], victim["pid"], [3, 4, 5])
    message = str(err)
    assert "actor 1" in message and victim["node_id"] in message and "3..5" in message and "max_restarts" in message
    assert envs.closed
    with pytest.raises(shmenv.ClosedError):
        envs.step(np.zeros(6, dtype=np.int64))
    assert wait_gone(pids, timeout=20) == [], "the actors and their workers must be gone"


@pytest.mark.timeout(120)
def test_an_actor_killed_as_it_reports_its_workers_death_raises_actor_died(cluster, monkeypatch):
    """Killing an actor may kill its pool's workers first: the actor can answer a step with
    their death just before it dies itself. The actor's death is the error then; while
    the actor lives, its workers' death is raised as it is."""
    envs = shmenv_ray.make_vec("CartPole-v1", 6, num_actors=2, num_workers=2, seed=2)
    victim = envs.actors[1]
    envs.reset()
    get = envs._actors.get

    def killed_while_answering(ref):
        try:
            return get(ref)
        except shmenv.WorkerDiedError:
            ray.kill(envs._actors.handles[1])  # the order seen on a loaded machine
            # ray.kill returns before the actor is gone; the case is an actor already dead
            # when the env asks it what happened (a live actor's answer is its own).
            wait_actor_gone(envs._actors.handles[1])
            raise

    monkeypatch.setattr(envs._actors, "get", killed_while_answering)
    for pid in victim["worker_pids"]:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(shmenv.ActorDiedError) as info:
        envs.step(np.zeros(6, dtype=np.int64))
    assert (info.value.actor, info.value.pid, info.value.env_ids) == (1, victim["pid"], [3, 4, 5])
    assert envs.closed

    envs = shmenv_ray.make_vec("CartPole-v1", 6, num_actors=2, num_workers=2, seed=2)
    envs.reset()
    os.kill(envs.actors[0]["worker_pids"][0], signal.SIGKILL)
    with pytest.raises(shmenv.WorkerDiedError) as info:
        envs.step(np.zeros(6, dtype=np.int64))
    assert not isinstance(info.value, shmenv.ActorDiedError), "the actor lives: its worker died"
    assert envs.closed


@pytest.mark.timeout(150)
def test_a_killed_actor_is_recreated_under_a_budget_sync(cluster):
    n = 6
    envs = shmenv_ray.make_vec("CartPole-v1", n, num_actors=2, num_workers=2, seed=4, max_restarts=1)
    local = shmenv.make_vec("CartPole-v1", n, num_workers=2, seed=4, pool_infos=True)
    try:
        envs.reset()
        local.reset()
        rng = np.random.default_rng(1)
        old = envs.actors[1]
        ray.kill(envs._actors.handles[1], no_restart=False)
        restarted = None
        for t in range(60):
            actions = rng.integers(0, 2, n)
            got, want = envs.step(actions), local.step(actions)
            # Actor 0's envs never notice.
            for x, y in zip(got[:4], want[:4]):
                np.testing.assert_array_equal(x[:3], y[:3], err_msg=f"step {t}")
            if "restarted_envs" in got[4]:
                assert restarted is None, "restarted envs are reported once"
                restarted = got[4]["restarted_envs"]
                assert restarted == [3, 4, 5]
                assert got[3][3:].all() and not got[2][3:].any() and (got[1][3:] == 0).all()
                np.testing.assert_array_equal(got[4]["elapsed_step"][3:], 0)
        assert restarted == [3, 4, 5]
        assert envs.restarts == [0, 1]
        assert envs.actors[1]["pid"] != old["pid"]
        assert wait_gone([old["pid"], *old["worker_pids"]], timeout=20) == []
    finally:
        envs.close()
        local.close()


@pytest.mark.timeout(150)
def test_a_killed_actor_is_recreated_under_a_budget_async(cluster):
    n = 8
    envs = shmenv_ray.make_vec("CartPole-v1", n, num_actors=2, num_workers=2, batch_size=4, seed=4, max_restarts=1)
    try:
        obs, infos = envs.reset()
        ids = infos["env_id"]
        counts = np.zeros(n, dtype=int)
        restarted: list[int] = []
        back = False  # every restarted env came back (counts then start again from 0)
        deadline = time.monotonic() + 60
        for t in range(100_000):
            if t == 10:
                ray.kill(envs._actors.handles[0], no_restart=False)
            envs.send(np.zeros(len(ids), dtype=np.int64), ids)
            obs, rew, term, trunc, infos = envs.recv()
            ids = infos["env_id"]
            assert len(ids) == 4 and len(set(ids.tolist())) == 4
            counts[ids] += 1
            for e in infos.get("restarted_envs", []):
                row = ids.tolist().index(e)
                assert trunc[row] and not term[row] and infos["elapsed_step"][row] == 0
                restarted.append(e)
            if not back and len(restarted) == 4:
                back, counts[:] = True, 0
            # Ray notices the death within a second or two; actor 1's envs step meanwhile. How
            # the batches split between the actors follows their CPU share (async mode returns
            # whichever rows come first): on a busy machine the recreated actor's envs may come
            # back less often, so it runs until each has stepped 10 times, not a number of recvs.
            if (back and counts.min() >= 10) or time.monotonic() > deadline:
                break
        assert sorted(restarted) == [0, 1, 2, 3], "every env of the recreated actor comes back once, marked"
        assert envs.restarts == [1, 0]
        assert counts.min() >= 10, f"every env steps after the restart: {counts}"
    finally:
        envs.close()


@pytest.mark.timeout(120)
def test_close_leaves_no_process_or_placement_group(cluster):
    from ray.util import placement_group_table

    before = {k for k, v in placement_group_table().items() if v["state"] != "REMOVED"}
    envs = shmenv_ray.make_vec("CartPole-v1", 4, num_actors=2, num_workers=2, batch_size=2, seed=0)
    pids = processes_of(envs)
    assert len(pids) == 4 and all(alive(p) for p in pids)
    envs.reset()
    envs.close()
    envs.close()  # twice is fine
    assert wait_gone(pids, timeout=20) == [], "actors and workers must be gone after close()"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = {k for k, v in placement_group_table().items() if v["state"] != "REMOVED"} - before
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"placement groups left: {left}"


DRIVER = textwrap.dedent(
    """
    import json, sys, time
    import ray
    import shmenv.ray
    ray.init(address=sys.argv[1], log_to_driver=False)
    envs = shmenv.ray.make_vec("CartPole-v1", 4, num_actors=2, num_workers=2, seed=0)
    envs.reset()
    print(json.dumps([p for a in envs.actors for p in [a["pid"], *a["worker_pids"]]]), flush=True)
    time.sleep(600)
    """
)


@pytest.mark.timeout(150)
def test_a_driver_that_dies_takes_its_actors_and_workers_along(cluster):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, cluster.address], stdout=subprocess.PIPE, env=env)
    try:
        pids = json.loads(driver.stdout.readline())
        assert len(pids) == 4 and all(alive(p) for p in pids)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(30)
    assert wait_gone(pids, timeout=60) == [], "a dead driver's actors and workers must end"


@pytest.mark.timeout(120)
def test_from_fns_builds_env_i_with_fns_i_in_the_actor_hosting_it(cluster):
    import functools

    import gymnasium as gym

    # 5 envs over 2 actors (3 + 2): each actor builds its own envs' factories.
    fns = [functools.partial(gym.make, "CartPole-v1", max_episode_steps=3 + i) for i in range(5)]
    with shmenv_ray.from_fns(fns, num_actors=2, num_workers=2, seed=0) as envs, shmenv.from_fns(fns, num_workers=2, seed=0, pool_infos=True) as local:
        assert_batches_equal(envs.reset(), local.reset(), "reset")
        first = [0] * 5
        for t in range(1, 10):
            actions = np.full(5, t % 2, dtype=np.int64)
            got = envs.step(actions)
            assert_batches_equal(got, local.step(actions), f"step {t}")
            for i in np.flatnonzero(got[3]):
                first[i] = first[i] or t
        assert first == [3, 4, 5, 6, 7]
    with pytest.raises(shmenv.InvalidArgumentTypeError, match="not a callable"):
        shmenv_ray.from_fns([fns[0], "CartPole-v1"], num_actors=1)


def test_importing_shmenv_ray_does_not_import_ray():
    code = "import sys, shmenv, shmenv.ray, shmenv.vector; assert 'ray' not in sys.modules, 'ray was imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("batch_size", [None, 3])
def test_a_call_that_finds_an_actor_dead_recreates_it_under_a_budget(cluster, batch_size):
    n = 6
    envs = shmenv_ray.make_vec("CartPole-v1", n, num_actors=2, num_workers=2, seed=1, max_restarts=1,
                               batch_size=batch_size)
    try:
        obs, infos = envs.reset()
        old = envs.actors[1]
        ray.kill(envs._actors.handles[1], no_restart=False)
        deadline = time.monotonic() + 30
        while alive(old["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert envs.get_attr("spec") == tuple([envs.spec] * n), "the call is answered by every env"
        assert envs.restarts == [0, 1] and envs.actors[1]["pid"] != old["pid"]
        restarted: list[int] = []
        ids = infos["env_id"]
        for _ in range(6):  # sync: the next step reports them; async: the batches that hold their rows
            if envs.is_async:
                envs.send(np.zeros(len(ids), dtype=np.int64), ids)
                *_, trunc, infos = envs.recv()
            else:
                *_, trunc, infos = envs.step(np.zeros(n, dtype=np.int64))
            ids = infos["env_id"]
            for e in infos.get("restarted_envs", []):
                assert trunc[ids.tolist().index(e)]
                restarted.append(e)
        assert sorted(restarted) == [3, 4, 5], "each env of the recreated actor is reported restarted once"
        assert envs.restarts == [0, 1], "one death counts once"
    finally:
        envs.close()
