"""Hosting what Gymnasium's vector envs host: image observations whose bounds
must travel compactly, hosted envs closed at ``close()``, Gymnasium's error types and
seeding, and sub-env infos. Every test runs real worker processes and compares with
``SyncVectorEnv`` where Gymnasium defines the behaviour."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

import shmenv
from conftest import step_alike

pytestmark = pytest.mark.timeout(60)


def assert_steps_like_sync(entry_point: str, env_cls, n: int, steps: int, seed: int, **kwargs) -> int:
    """Steps a shmenv pool of ``entry_point`` and a ``SyncVectorEnv`` of ``env_cls`` with
    the same seeds and actions; returns how many episodes ended."""
    ref = gym.vector.SyncVectorEnv([lambda: env_cls(**kwargs) for _ in range(n)])
    ends = 0
    with shmenv.make_vec(entry_point, n, num_workers=2, config=kwargs) as envs:
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.observation_space == ref.observation_space
        obs, _ = envs.reset(seed=seed)
        r_obs, _ = ref.reset(seed=seed)
        np.testing.assert_array_equal(obs, r_obs)
        rng = np.random.default_rng(seed)
        for t in range(steps):
            actions = rng.integers(0, envs.single_action_space.n, size=n)
            *_, done = step_alike(envs, ref, actions, f"step {t}")
            ends += int(np.sum(done))
    ref.close()
    return ends


# --- 1. bounds that scale -----------------------------------------------------------------


def test_atari_like_frame_stack_starts_and_steps_like_sync(no_leaks):
    from shmenv_fixtures.images import FrameStackEnv

    ends = assert_steps_like_sync("shmenv_fixtures.images:FrameStackEnv", FrameStackEnv, 3, 40, seed=5)
    assert ends >= 2


def test_96x96x3_image_env_starts_and_steps_like_sync(no_leaks):
    from shmenv_fixtures.images import ImageEnv

    ends = assert_steps_like_sync(
        "shmenv_fixtures.images:ImageEnv", ImageEnv, 3, 30, seed=2, shape=[96, 96, 3], length=8
    )
    assert ends >= 2


def test_small_box_with_varying_bounds_keeps_every_bound(no_leaks):
    from shmenv_fixtures.images import VaryingBoundsImageEnv

    ends = assert_steps_like_sync(
        "shmenv_fixtures.images:VaryingBoundsImageEnv", VaryingBoundsImageEnv, 2, 20, seed=1, shape=[8, 8, 3]
    )
    assert ends >= 1


def test_large_box_with_varying_bounds_is_refused_naming_the_space(no_leaks):
    with pytest.raises(shmenv.BuildError) as e:
        shmenv.make_vec("shmenv_fixtures.images:VaryingBoundsImageEnv", 2, num_workers=1)
    message = str(e.value)
    assert "observation \"obs\"" in message and "[96,96,3]" in message, message
    assert "uniform bounds" in message and "65536" in message, message


# --- 2. closing -------------------------------------------------------------------------


def test_close_closes_every_hosted_env(tmp_path, no_leaks):
    envs = shmenv.make_vec("shmenv_fixtures.closing:ClosingEnv", 5, num_workers=2, config={"directory": str(tmp_path)})
    pids = envs.worker_pids
    envs.reset(seed=0)
    for _ in range(3):
        envs.step(np.zeros(5, dtype=np.int64))
    envs.close()
    closed = sorted(p.name for p in tmp_path.iterdir())
    assert len(closed) == 5, closed
    assert {int(name.split("-")[1]) for name in closed} == set(pids)
    assert all((tmp_path / name).read_text() == "3" for name in closed)


def test_a_failing_close_does_not_stop_the_others(tmp_path, no_leaks):
    config = {"directory": str(tmp_path), "fail_close": True}
    with shmenv.make_vec("shmenv_fixtures.closing:ClosingEnv", 4, num_workers=2, config=config) as envs:
        envs.reset(seed=0)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert sum(n.startswith("failed-") for n in names) == 2, names  # the first env of each worker
    assert sum(n.startswith("closed-") for n in names) == 2, names


def test_a_close_that_hangs_is_cut_short_and_the_worker_killed(tmp_path, no_leaks):
    import time

    config = {"directory": str(tmp_path), "close_delay": 30.0}
    envs = shmenv.make_vec("shmenv_fixtures.closing:ClosingEnv", 2, num_workers=2, config=config)
    envs.reset(seed=0)
    start = time.monotonic()
    envs.close()
    took = time.monotonic() - start
    # Cut short: the pool did not wait for the env's 30 s close (and the env never finished it).
    assert took < config["close_delay"], f"close took {took:.1f} s, the env's whole close_delay"
    assert list(tmp_path.iterdir()) == []


# --- 3. errors and seeds as Gymnasium ---------------------------------------------------


def image_pair(n: int):
    """A shmenv pool of the small image env and its SyncVectorEnv twin."""
    from shmenv_fixtures.images import ImageEnv

    envs = shmenv.make_vec("shmenv_fixtures.images:ImageEnv", n, num_workers=2)
    return envs, gym.vector.SyncVectorEnv([ImageEnv for _ in range(n)])


def assert_resets_alike(envs, ref, **kwargs) -> None:
    obs, _ = envs.reset(**kwargs)
    r_obs, _ = ref.reset(**kwargs)
    np.testing.assert_array_equal(obs, r_obs, err_msg=str(kwargs))
    actions = np.arange(envs.num_envs) % 2
    np.testing.assert_array_equal(envs.step(actions)[0], ref.step(actions)[0], err_msg=str(kwargs))
    assert envs.np_random_seed == ref.np_random_seed, kwargs


def test_closed_error_is_gymnasiums_closed_environment_error(no_leaks):
    envs = shmenv.make_vec("CartPole-v1", 2, num_workers=1, seed=0)
    envs.reset()
    envs.close()
    for call in (lambda: envs.step(np.zeros(2, np.int64)), lambda: envs.reset(), lambda: envs.get_attr("spec")):
        with pytest.raises(gym.error.ClosedEnvironmentError) as e:
            call()
        assert isinstance(e.value, shmenv.ClosedError) and "closed" in str(e.value)


def test_reset_without_seed_continues_each_envs_stream(no_leaks):
    envs, ref = image_pair(3)
    with envs:
        assert_resets_alike(envs, ref, seed=3)
        for _ in range(2):
            assert_resets_alike(envs, ref)  # seed=None: every env continues its own stream
    ref.close()


def test_any_list_of_seeds_seeds_each_env_as_sync_does(no_leaks):
    envs, ref = image_pair(4)
    with envs:
        assert_resets_alike(envs, ref, seed=[1, 0, 7, 7])  # the first reset, not consecutive
        assert_resets_alike(envs, ref, seed=[9, None, 2**64 - 1, 5])
        mask = np.array([True, False, True, True])
        assert_resets_alike(envs, ref, seed=[4, 100, None, 3], options={"reset_mask": mask})
        assert_resets_alike(envs, ref, seed=11)
    ref.close()


def test_native_envs_report_their_seeds(no_leaks):
    with shmenv.make_vec("CartPole-v1", 3, num_workers=1, seed=10) as envs:
        assert envs.np_random_seed == (None, None, None)
        envs.reset()
        assert envs.np_random_seed == (10, 11, 12)
        envs.reset(seed=[4, 1, 8])
        assert envs.np_random_seed == (4, 1, 8)
        envs.reset()
        assert envs.np_random_seed == (4, 1, 8)
        envs.reset(seed=5, options={"reset_mask": np.array([False, True, False])})
        assert envs.np_random_seed == (4, 6, 8)


def test_misuse_raises_the_exception_types_of_async_vector_env(no_leaks):
    with shmenv.make_vec("CartPole-v1", 3, num_workers=1, seed=0) as envs:
        with pytest.raises(ValueError, match="length must match num_envs=3"):
            envs.reset(seed=[1, 2])
        envs.reset()
        with pytest.raises(TypeError, match=re.escape("`options['reset_mask']` must have `dtype=np.bool_`, got int64")):
            envs.reset(options={"reset_mask": np.array([1, 0, 1])})
        with pytest.raises(ValueError, match=re.escape("`options['reset_mask']` must have shape `(3,)`, got (2,)")):
            envs.reset(options={"reset_mask": np.array([True, False])})
        with pytest.raises(ValueError, match="at least one True"):
            envs.reset(options={"reset_mask": np.zeros(3, bool)})
        with pytest.raises(TypeError, match="single value 0"):
            envs.step(0)
        envs.step(np.zeros(3, np.int64))  # none of the above changed the pool
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, batch_size=2) as envs:
        with pytest.raises(ValueError, match=r"async pool seeds env i with seed \+ i"):
            envs.reset(seed=[1, 0, 2, 3])
        envs.reset(seed=[5, 6, 7, 8])


# --- 4. sub-env infos -------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_reset_options_reach_the_envs_reset_as_sync_does(no_leaks):
    from shmenv_fixtures.counter import CounterEnv

    n = 4
    ref = gym.vector.SyncVectorEnv([CounterEnv for _ in range(n)])
    with shmenv.make_vec("shmenv_fixtures.counter:CounterEnv", n, num_workers=2) as envs:
        for seed, options in [(1, {"start": 42}), (None, None), (None, {"start": 7, "reset_mask": [1, 0, 1, 0]})]:
            if options is not None and "reset_mask" in options:
                options["reset_mask"] = np.array(options["reset_mask"], dtype=bool)
            obs, _ = envs.reset(seed=seed, options=None if options is None else dict(options))
            want, _ = ref.reset(seed=seed, options=None if options is None else dict(options))
            np.testing.assert_array_equal(obs, want)
            envs.step(np.ones(n, dtype=np.int64))
            ref.step(np.ones(n, dtype=np.int64))
        assert list(obs[:, 2]) == [7, want[1, 2], 7, want[3, 2]]  # the masked envs took the option
    ref.close()
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1) as native:
        with pytest.raises(shmenv.InvalidArgumentError, match="native shmenv env.*no options"):
            native.reset(options={"start": 1})


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
        # Copies of each env's generator, in the state the env's own draws left it.
        got = [g.integers(0, 2**31) for g in envs.np_random]
        want = [g.integers(0, 2**31) for g in ref.np_random]
        assert got == want
    ref.close()
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1) as native:
        with pytest.raises(AttributeError, match="native shmenv env"):
            native.np_random


SHMENV_KEYS = {"env_id", "elapsed_step", "episode_stats", "_episode_stats", "final_obs", "_final_obs"}


def assert_vector_infos_equal(got: dict, want: dict, where: str) -> None:
    """A shmenv batch's infos equal ``SyncVectorEnv``'s, leaving out the keys shmenv adds
    (and ``final_obs``, compared with the observations)."""
    strip = lambda infos: {k: v for k, v in infos.items() if k not in SHMENV_KEYS}  # noqa: E731
    assert_infos_equal(strip(got), strip(want), where)


def assert_infos_equal(got: dict, want: dict, where: str) -> None:
    """Gymnasium vector infos (arrays, masks, nested dicts) equal, dtypes included."""
    assert set(got) == set(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
    for key, value in want.items():
        if isinstance(value, dict):
            assert_infos_equal(got[key], value, f"{where}.{key}")
        else:
            assert got[key].dtype == value.dtype, f"{where}.{key}: dtype {got[key].dtype} != {value.dtype}"
            if value.dtype == object:
                assert got[key].tolist() == value.tolist(), f"{where}.{key}"
            else:
                np.testing.assert_array_equal(got[key], value, err_msg=f"{where}.{key}")


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_sub_env_infos_reach_the_trainer_as_sync_vector_env_gives_them(mode, no_leaks):
    from shmenv_fixtures.infos import InfoEnv

    n, mode_enum = 4, gym.vector.AutoresetMode(mode.title().replace("_", ""))
    ref = gym.vector.SyncVectorEnv([InfoEnv for _ in range(n)], autoreset_mode=mode_enum)
    with shmenv.make_vec("shmenv_fixtures.infos:InfoEnv", n, num_workers=2, autoreset_mode=mode) as envs:
        _, infos = envs.reset(seed=4)
        _, r_infos = ref.reset(seed=4)
        assert_vector_infos_equal(infos, r_infos, "reset")
        rng = np.random.default_rng(0)
        for t in range(23):
            actions = rng.integers(0, 3, size=n)
            *_, infos = envs.step(actions)
            *_, r_infos = ref.step(actions)
            assert_vector_infos_equal(infos, r_infos, f"step {t}")
    ref.close()


def test_infos_in_async_batches_follow_their_rows(no_leaks):
    n, b = 6, 3
    with shmenv.make_vec("shmenv_fixtures.infos:InfoEnv", n, num_workers=2, batch_size=b, seed=0) as envs:
        _, infos = envs.reset()
        steps = np.zeros(n, dtype=int)
        for _ in range(40):
            ids = infos["env_id"]
            assert infos.get("_start", np.zeros(b, bool)).tolist() == (infos["elapsed_step"] == 0).tolist()
            has_step_info = infos["elapsed_step"] > 0
            assert infos.get("_lives", np.zeros(b, bool)).tolist() == has_step_info.tolist()
            if "t" in infos:
                np.testing.assert_array_equal(infos["t"][has_step_info], infos["elapsed_step"][has_step_info])
            steps[ids] += 1
            *_, infos = envs.step(np.zeros(b, dtype=np.int64), ids)
        assert steps.min() > 0


def test_envs_without_infos_cost_no_calls(no_leaks):
    with shmenv.make_vec("shmenv_fixtures.infos:InfoEnv", 4, num_workers=2, config={"quiet": True}) as envs:
        calls = []
        request = envs._calls.request
        envs._calls.request = lambda *a, **k: calls.append(a) or request(*a, **k)
        _, infos = envs.reset(seed=0)
        for _ in range(30):
            *_, infos = envs.step(np.zeros(4, dtype=np.int64))
            assert set(infos) <= SHMENV_KEYS
        assert calls == []
    with shmenv.make_vec("shmenv_fixtures.infos:InfoEnv", 4, num_workers=2, config={"rarely": True}) as envs:
        envs.reset(seed=0)
        seen = sum("lives" in envs.step(np.zeros(4, dtype=np.int64))[4] for _ in range(30))
        assert 3 <= seen <= 16, seen


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize("mixed, many", [(False, 0), (True, 0), (False, 20)])
def test_numeric_infos_go_through_columns_without_calls_as_sync_vector_env_gives_them(mode, mixed, many, no_leaks):
    from shmenv_fixtures.infos import LivesEnv

    n, mode_enum = 5, gym.vector.AutoresetMode(mode.title().replace("_", ""))
    ref = gym.vector.SyncVectorEnv(
        [lambda: LivesEnv(mixed=mixed, many=many) for _ in range(n)], autoreset_mode=mode_enum
    )
    config = {"mixed": mixed, "many": many}
    with shmenv.make_vec("shmenv_fixtures.infos:LivesEnv", n, num_workers=2, config=config, autoreset_mode=mode) as envs:
        calls = []
        request = envs._calls.request
        envs._calls.request = lambda *a, **k: calls.append(a[2]) or request(*a, **k)
        _, infos = envs.reset(seed=4)
        _, r_infos = ref.reset(seed=4)
        assert_vector_infos_equal(infos, r_infos, "reset")
        rng = np.random.default_rng(0)
        for t in range(17):
            actions = rng.integers(0, 3, size=n)
            *_, term, trunc, infos = envs.step(actions)
            *_, r_term, r_trunc, r_infos = ref.step(actions)
            assert_vector_infos_equal(infos, r_infos, f"step {t}")
            if mode == "disabled" and (term | trunc).any():
                mask = term | trunc
                _, infos = envs.reset(options={"reset_mask": mask})
                _, r_infos = ref.reset(options={"reset_mask": mask})
                assert_vector_infos_equal(infos, r_infos, f"reset {t}")
        # Numbers never leave shared memory (a key whose values change type has a column per
        # type), unless a worker's 16 columns are taken: the others go pickled.
        assert (calls == []) == (many == 0), calls
    ref.close()


def test_numeric_infos_in_async_batches_follow_their_rows(no_leaks):
    n, b = 6, 3
    with shmenv.make_vec("shmenv_fixtures.infos:LivesEnv", n, num_workers=2, batch_size=b, seed=0) as envs:
        _, infos = envs.reset()
        for _ in range(40):
            ids = infos["env_id"]
            reset_rows = infos["elapsed_step"] == 0
            assert infos["_lives"].all() and infos["lives"].dtype == np.int64 if not reset_rows.any() else True
            assert infos.get("_start", np.zeros(b, bool)).tolist() == reset_rows.tolist()
            stepped = ~reset_rows
            np.testing.assert_array_equal(infos["lives"][stepped], 3 - infos["elapsed_step"][stepped] // 2)
            assert infos.get("_episode_frame_number", np.zeros(b, bool)).tolist() == stepped.tolist()
            *_, infos = envs.step(np.zeros(b, dtype=np.int64), ids)
