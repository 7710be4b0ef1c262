"""shmenv.make_vec as a Gymnasium VectorEnv: API, zero-copy contract, autoreset modes,
async send/recv. Every pool here runs real worker processes (python -m shmenv.worker)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

import shmenv
from conftest import step_alike


def test_spaces_metadata_and_shapes(no_leaks):
    with shmenv.make_vec("CartPole-v1", 6, num_workers=2, seed=1) as envs:
        assert isinstance(envs, VectorEnv)
        assert envs.num_envs == 6
        assert envs.single_observation_space == spaces.Box(
            low=np.array([-4.8, -np.inf, -0.41887903, -np.inf], dtype=np.float32),
            high=np.array([4.8, np.inf, 0.41887903, np.inf], dtype=np.float32),
            dtype=np.float32,
        )
        assert envs.single_action_space == spaces.Discrete(2)
        assert envs.observation_space.shape == (6, 4)
        assert envs.action_space == spaces.MultiDiscrete([2] * 6)
        assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
        obs, infos = envs.reset()
        assert obs.shape == (6, 4) and obs.dtype == np.float32
        assert infos == {}  # as SyncVectorEnv's: CartPole returns no infos
        _, infos = envs.reset(options={"reset_mask": np.ones(6, bool)})  # still none
        assert infos == {}
        assert envs.observation_space.contains(obs)
        obs, rewards, term, trunc, infos = envs.step(envs.action_space.sample())
        assert obs.shape == (6, 4)
        assert rewards.shape == (6,) and rewards.dtype == np.float32
        assert term.dtype == np.bool_ and trunc.dtype == np.bool_
        assert len(envs.worker_pids) == 2
    assert envs.closed


def test_box_actions_and_config(no_leaks):
    with shmenv.make_vec("Pendulum-v1", 4, num_workers=2, seed=0, config={"g": 9.81}) as envs:
        assert envs.single_action_space == spaces.Box(-2.0, 2.0, (1,), np.float32)
        envs.reset()
        # Lists and float64 are converted to the action dtype.
        obs, rewards, *_ = envs.step([[0.5]] * 4)
        assert obs.shape == (4, 3) and np.all(rewards <= 0)


def test_zero_copy_observations_are_views_of_the_region(no_leaks):
    with shmenv.make_vec("CartPole-v1", 8, num_workers=2, seed=3, copy=False, pool_infos=True) as envs:
        start, end = envs.mapping_range
        obs0, _ = envs.reset()
        assert not obs0.flags.writeable and not obs0.flags.owndata
        seen = set()
        actions = np.zeros(8, dtype=np.int64)
        for _ in range(10):
            obs, rewards, term, trunc, infos = envs.step(actions)
            assert start <= obs.ctypes.data < end, "observations are not in the shared mapping"
            assert isinstance(obs.base, shmenv._shmenv.Lease)
            # Everything else is always the caller's.
            for a in (rewards, term, trunc, infos["env_id"], infos["elapsed_step"]):
                assert a.flags.writeable and not isinstance(a.base, shmenv._shmenv.Lease)
                assert not start <= a.ctypes.data < end
            seen.add(obs.ctypes.data)
        # Results alternate between two blocks: the same two buffers, never a new one.
        assert len(seen) == 2


def test_previous_zero_copy_observation_survives_the_next_step(no_leaks):
    with shmenv.make_vec("CartPole-v1", 8, num_workers=2, seed=5, copy=False) as envs:
        obs, _ = envs.reset()
        actions = np.ones(8, dtype=np.int64)
        for _ in range(20):
            snapshot = obs.copy()
            next_obs, *_ = envs.step(actions)
            # The DQN pattern: (obs, next_obs) both valid after the step.
            np.testing.assert_array_equal(obs, snapshot)
            assert next_obs.ctypes.data != obs.ctypes.data
            obs = next_obs


def test_arrays_are_owned_by_default(no_leaks):
    with shmenv.make_vec("CartPole-v1", 4, num_workers=1, seed=0) as envs:
        start, end = envs.mapping_range
        obs, _ = envs.reset()
        obs2, rewards, term, trunc, infos = envs.step(np.zeros(4, dtype=np.int64))
        for a in (obs, obs2, rewards, term, trunc):
            assert a.flags.writeable and not isinstance(a.base, shmenv._shmenv.Lease)
            assert not start <= a.ctypes.data < end
        obs2[:] = 0  # ours to write


def test_views_stay_readable_after_close():
    envs = shmenv.make_vec("CartPole-v1", 4, num_workers=1, seed=0)
    obs, _ = envs.reset()
    expected = obs.copy()
    envs.close()
    del envs
    import gc

    gc.collect()
    # The mapping lives as long as a view does: no use-after-unmap.
    np.testing.assert_array_equal(obs, expected)


def test_same_step_mode_puts_final_observations_in_infos(no_leaks):
    with shmenv.make_vec(
        "CartPole-v1", 4, num_workers=2, seed=0, autoreset_mode="same_step", episode_stats_key="episode_stats"
    ) as envs:
        assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        obs, _ = envs.reset()
        ended = 0
        for _ in range(60):
            prev = obs.copy()
            obs, rewards, term, trunc, infos = envs.step(np.ones(4, dtype=np.int64))
            if term.any() or trunc.any():
                done = term | trunc
                np.testing.assert_array_equal(infos["_final_obs"], done)
                for i in np.flatnonzero(done):
                    final = infos["final_obs"][i]
                    assert final.shape == (4,)
                    # The final observation is a step away from the previous one; the
                    # returned one is a fresh episode's first observation (|x| < 0.05).
                    assert abs(final[2]) > 0.2 or abs(final[0]) > 2.4
                    assert np.all(np.abs(obs[i]) < 0.05)
                    assert not np.array_equal(final, prev[i])
                    ended += 1
                for i in np.flatnonzero(~done):
                    assert infos["final_obs"][i] is None
                assert infos["episode_stats"]["l"][done].min() > 0
        assert ended > 0


def test_next_step_mode_resets_on_the_following_step(no_leaks):
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1, seed=0, episode_stats_key="episode_stats") as envs:
        envs.reset()
        for _ in range(100):
            obs, rewards, term, trunc, infos = envs.step(np.ones(2, dtype=np.int64))
            if term[0]:
                assert infos["_episode_stats"][0] and infos["episode_stats"]["r"][0] > 0
                obs, rewards, term, trunc, _ = envs.step(np.ones(2, dtype=np.int64))
                # The reset step: reward 0, not done, a fresh observation.
                assert rewards[0] == 0 and not term[0] and not trunc[0]
                assert np.all(np.abs(obs[0]) < 0.05)
                return
        pytest.fail("no episode ended in 100 steps")


def test_disabled_mode_refuses_to_step_an_ended_env(no_leaks):
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1, seed=0, autoreset_mode="disabled", pool_infos=True) as envs:
        envs.reset()
        for _ in range(100):
            _, _, term, trunc, _ = envs.step(np.ones(2, dtype=np.int64))
            if term.any() or trunc.any():
                break
        with pytest.raises(shmenv.UsageError, match="call reset"):
            envs.step(np.ones(2, dtype=np.int64))
        ended = term | trunc
        # Only the ended envs are reset; the other keeps its episode.
        obs, _ = envs.reset(options={"reset_mask": ended})
        _, _, _, _, infos = envs.step(np.ones(2, dtype=np.int64))
        assert (infos["elapsed_step"][ended] == 1).all()
        assert (infos["elapsed_step"][~ended] > 1).all()
        with pytest.raises(shmenv.InvalidArgumentError, match=r"shape `\(2,\)`"):
            envs.reset(options={"reset_mask": np.array([True])})


def test_reset_seed_reproduces_and_seeds_each_env_differently(no_leaks):
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2) as envs:
        a, _ = envs.reset(seed=123)
        a = a.copy()
        envs.step(np.zeros(4, dtype=np.int64))
        b, _ = envs.reset(seed=123)
        np.testing.assert_array_equal(a, b)
        assert len({tuple(r) for r in a}) == 4
        c, _ = envs.reset(seed=[123, 124, 125, 126])
        np.testing.assert_array_equal(a, c)
        d, _ = envs.reset(seed=[123, 123, 123, 123])  # any list, as Gymnasium (test_seeding.py)
        assert all(np.array_equal(r, a[0]) for r in d)
        with pytest.raises(shmenv.InvalidArgumentError, match="seed"):
            envs.reset(seed=[1, 1, 1])


def test_async_send_recv_returns_every_env_exactly_once(no_leaks):
    n, b = 8, 4
    with shmenv.make_vec("CartPole-v1", n, num_workers=2, batch_size=b, seed=0) as envs:
        assert envs.is_async and envs.observation_space.shape == (b, 4)
        obs, infos = envs.reset()
        got = list(infos["env_id"])
        obs, rew, term, trunc, infos = envs.recv()
        ids = infos["env_id"]
        got += list(ids)
        assert sorted(got) == list(range(n))
        counts = np.zeros(n, dtype=int)
        ids = np.array(got[-b:])
        for _ in range(200):
            envs.send(np.ones(len(ids), dtype=np.int64), ids)
            obs, rew, term, trunc, infos = envs.recv()
            ids = infos["env_id"]
            assert obs.shape == (b, 4) and len(ids) == b and len(set(ids.tolist())) == b
            np.testing.assert_array_equal(infos["env_id"], ids)
            counts[ids] += 1
        # The envs not resent stay in flight; nobody is lost or duplicated.
        assert counts.sum() == 200 * b
        # EnvPool style: step(actions, env_ids) = send + recv.
        obs, *_ = envs.step(np.ones(b, dtype=np.int64), ids)
        assert obs.shape == (b, 4)


def test_gymnasium_vector_wrappers_run_on_shmenv():
    from gymnasium.wrappers.vector import NormalizeObservation, RecordEpisodeStatistics

    envs = RecordEpisodeStatistics(
        NormalizeObservation(shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=0, episode_stats_key="episode_stats"))
    )
    obs, _ = envs.reset(seed=0)
    episodes = 0
    for _ in range(200):
        obs, rewards, term, trunc, infos = envs.step(envs.action_space.sample())
        assert obs.shape == (4, 4)
        if "episode" in infos:
            episodes += int(infos["_episode"].sum())
            # The wrapper's count agrees with shmenv's own stats.
            np.testing.assert_array_equal(infos["episode"]["l"], infos["episode_stats"]["l"])
    assert episodes > 0 and len(envs.return_queue) == min(episodes, 100)
    envs.close()


def test_stats_report_what_the_pool_did(no_leaks):
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=0) as envs:
        envs.reset()
        for _ in range(20):
            envs.step(np.zeros(4, dtype=np.int64))
        stats = envs.stats()
        assert stats["steps"] == 80 and stats["batches"] == 21
        assert [w["steps"] for w in stats["workers"]] == [40, 40]
        assert [w["pid"] for w in stats["workers"]] == envs.worker_pids
        assert 0 < stats["trainer_wait_share"] <= 1
        assert stats["verdict"] in ("contended", "oversubscribed", "env-bound", "trainer-bound", "sync-bound")
        assert stats["cores"] >= 1 and 0 <= stats["others_share"] <= 1


def _pause():
    """~0.3 ms during which the workers may run ahead (async) and overwrite what they may."""
    end = time.perf_counter() + 0.0003
    while time.perf_counter() < end:
        pass


@pytest.mark.timeout(60)
@pytest.mark.parametrize("trainer_shard", [False, True], ids=["workers", "trainer-shard"])
def test_zero_copy_sync_previous_observation_survives_the_next_step(trainer_shard, no_leaks):
    """With a trainer shard too: its rows are written into the same alternating blocks."""
    rng = np.random.default_rng(1)
    with shmenv.make_vec(
        "CartPole-v1", 8, num_workers=2, seed=0, copy=False, trainer_shard=trainer_shard
    ) as envs:
        obs, _ = envs.reset()
        assert not obs.flags.writeable
        for t in range(3000):
            prev, snap = obs, obs.copy()
            obs, rew, term, trunc, infos = envs.step(rng.integers(0, 2, 8))
            _pause()
            assert not obs.flags.writeable
            np.testing.assert_array_equal(prev, snap, err_msg=f"step {t}: the previous batch changed")


@pytest.mark.timeout(60)
def test_zero_copy_async_previous_batch_survives_the_next_recv(no_leaks):
    """Async, copy=False: a batch stays intact until the second ``recv`` after it begins,
    i.e. the previous batch is intact next to the current one while workers run ahead."""
    rng = np.random.default_rng(2)
    with shmenv.make_vec("CartPole-v1", 8, num_workers=2, batch_size=4, seed=0, copy=False) as envs:
        envs.async_reset()
        obs, rew, term, trunc, info = envs.recv()
        for t in range(3000):
            prev, snap = obs, obs.copy()
            ids = info["env_id"]
            envs.send(rng.integers(0, 2, len(ids)), ids)
            obs, rew, term, trunc, info = envs.recv()
            cur = obs.copy()
            _pause()  # the envs just sent to step meanwhile, into a third block
            np.testing.assert_array_equal(prev, snap, err_msg=f"recv {t}: the previous batch changed")
            np.testing.assert_array_equal(obs, cur, err_msg=f"recv {t}: the current batch changed")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("batch_size", [None, 4], ids=["sync", "async"])
def test_default_arrays_are_owned_writable_and_never_reused(batch_size, no_leaks):
    rng = np.random.default_rng(3)
    with shmenv.make_vec("CartPole-v1", 8, num_workers=2, batch_size=batch_size, seed=0, pool_infos=True) as envs:
        start, end = envs.mapping_range
        kept = []
        if envs.is_async:
            envs.async_reset()
            obs, rew, term, trunc, info = envs.recv()
        else:
            obs, info = envs.reset()
            rew = np.zeros(8, np.float32)
        for t in range(3000):
            for arr in (obs, rew, info["env_id"], info["elapsed_step"]):
                assert arr.flags.writeable and not start <= arr.ctypes.data < end
            kept.append((obs, obs.copy()))
            ids = info["env_id"]
            actions = rng.integers(0, 2, len(ids))
            if envs.is_async:
                envs.send(actions, ids)
                obs, rew, term, trunc, info = envs.recv()
            else:
                obs, rew, term, trunc, info = envs.step(actions)
            if t % 100 == 0:
                _pause()
        for k, (arr, snap) in enumerate(kept):
            np.testing.assert_array_equal(arr, snap, err_msg=f"observation {k} changed afterwards (aliasing)")


@pytest.mark.timeout(60)
def test_cleanrl_envpool_async_loop_matches_sync_per_env_trajectories(no_leaks):
    n, iters = 8, 2000
    rng = np.random.default_rng(4)
    rows: list[list[tuple]] = [[] for _ in range(n)]  # per env: (obs, rew, term, trunc, elapsed)
    sent: list[list[int]] = [[] for _ in range(n)]  # per env: the actions it was sent, in order
    envs = shmenv.make_vec("CartPole-v1", n, num_workers=2, batch_size=4, seed=0)
    try:
        envs.async_reset()
        elapsed = np.full(n, -1)  # -1: the next row of that env is a reset row
        for it in range(iters):
            result = envs.recv()
            assert len(result) == 5
            obs, rew, term, trunc, info = result
            env_id = info["env_id"]
            assert env_id.dtype == np.int32 and info["elapsed_step"].dtype == np.int32
            assert obs.shape == (4, 4) and len(set(env_id.tolist())) == 4
            action = rng.integers(0, 2, len(env_id))  # the policy
            envs.send(action, env_id)
            for k, i in enumerate(env_id):
                e = int(info["elapsed_step"][k])
                want = 0 if elapsed[i] < 0 else elapsed[i] + 1
                assert e == want, f"recv {it}: env {i} elapsed_step {e}, expected {want}"
                elapsed[i] = -1 if (term[k] or trunc[k]) else e
                rows[i].append((obs[k].copy(), rew[k], term[k], trunc[k], e))
                sent[i].append(int(action[k]))
    finally:
        envs.close()
    assert all(len(r) > 100 for r in rows)
    assert sum(1 for r in rows for x in r if x[4] == 0) > n + 20, "too few episode ends"

    # The reference: a sync pool of the same seed, env i given env i's action sequence.
    depth = max(len(r) for r in rows)
    with shmenv.make_vec("CartPole-v1", n, num_workers=2, seed=0, pool_infos=True) as ref:
        obs, info = ref.reset()
        steps = [(obs, np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool), info["elapsed_step"])]
        for k in range(depth - 1):
            actions = np.array([sent[i][k] if k < len(sent[i]) else 0 for i in range(n)])
            o, r, te, tr, inf = ref.step(actions)
            steps.append((o, r, te, tr, inf["elapsed_step"]))
    for i in range(n):
        for k, (o, r, te, tr, e) in enumerate(rows[i]):
            ro, rr, rte, rtr, re = (x[i] for x in steps[k])
            np.testing.assert_array_equal(o, ro, err_msg=f"env {i} row {k}")
            assert (r, te, tr, e) == (rr, rte, rtr, re), f"env {i} row {k}: {(r, te, tr, e)} vs {(rr, rte, rtr, re)}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_envs,batch_size,num_workers", [(8, 4, 2), (16, 5, 3)])
def test_async_scheduling_is_fair(num_envs, batch_size, num_workers, no_leaks):
    iters = 20_000
    rng = np.random.default_rng(5)
    counts = np.zeros(num_envs, dtype=np.int64)
    last_seen = np.zeros(num_envs, dtype=np.int64)
    longest_absence = np.zeros(num_envs, dtype=np.int64)
    with shmenv.make_vec(
        "CartPole-v1", num_envs, num_workers=num_workers, batch_size=batch_size, seed=0
    ) as envs:
        envs.async_reset()
        for k in range(1, iters + 1):
            _, _, _, _, info = envs.recv()
            ids = info["env_id"]
            counts[ids] += 1
            longest_absence[ids] = np.maximum(longest_absence[ids], k - last_seen[ids])
            last_seen[ids] = k
            envs.send(rng.integers(0, 2, len(ids)), ids)
    longest_absence = np.maximum(longest_absence, iters + 1 - last_seen)
    mean = counts.mean()
    assert counts.sum() == iters * batch_size
    assert np.all(np.abs(counts - mean) <= 0.1 * mean), f"counts {counts.tolist()} (mean {mean})"
    bound = 6 * num_envs / batch_size + 2
    assert longest_absence.max() <= bound, f"longest absences {longest_absence.tolist()} > {bound} recv calls"


@pytest.mark.timeout(60)
def test_reset_mask_resets_only_the_masked_envs_like_sync_vector_env(no_leaks):
    n = 4
    rng = np.random.default_rng(6)
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])
    with shmenv.make_vec("CartPole-v1", n, num_workers=2, pool_infos=True) as envs:
        obs, _ = envs.reset(seed=11)
        r_obs, _ = ref.reset(seed=11)
        np.testing.assert_array_equal(obs, r_obs)
        partial = 0
        for t in range(200):
            if t % 7 == 3:
                mask = rng.random(n) < 0.5
                mask[rng.integers(n)] = True
                before = obs.copy()
                obs, infos = envs.reset(options={"reset_mask": mask})
                r_obs, _ = ref.reset(options={"reset_mask": mask.copy()})
                np.testing.assert_array_equal(obs, r_obs, err_msg=f"partial reset at step {t}, mask {mask}")
                np.testing.assert_array_equal(obs[~mask], before[~mask])
                assert (infos["elapsed_step"][mask] == 0).all()
                partial += 1
                continue
            actions = rng.integers(0, 2, n)
            obs, *_ = step_alike(envs, ref, actions, f"step {t}")
        assert partial > 20
        with pytest.raises(shmenv.InvalidArgumentError, match=r"shape `\(4,\)`"):
            envs.reset(options={"reset_mask": np.ones(3, bool)})
        with pytest.raises(shmenv.InvalidArgumentError, match="bool"):
            envs.reset(options={"reset_mask": np.ones(n, np.int64)})
        envs.step(np.zeros(n, np.int64))  # still usable
    ref.close()
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, batch_size=2) as envs:
        envs.reset()
        with pytest.raises(shmenv.UsageError, match="sync mode"):
            envs.reset(options={"reset_mask": np.array([True, False, False, False])})
