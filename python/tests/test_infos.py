"""Sub-env infos (:mod:`shmenv.infos`) reach the trainer as ``SyncVectorEnv`` gives them, in
sync and async batches: numbers through the shared columns without a call, other values
pickled over the call channel, and nothing at all for envs that return no infos."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import shmenv

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


def assert_infos_step_alike(envs, ref, n: int, steps: int = 23) -> None:
    """Resets (seed 4) and steps ``envs`` and ``ref`` with the same random actions of
    ``InfoEnv`` (0..2), checking every step's infos against the reference's."""
    _, infos = envs.reset(seed=4)
    _, r_infos = ref.reset(seed=4)
    assert_vector_infos_equal(infos, r_infos, "reset")
    rng = np.random.default_rng(0)
    for t in range(steps):
        actions = rng.integers(0, 3, size=n)
        *_, infos = envs.step(actions)
        *_, r_infos = ref.step(actions)
        assert_vector_infos_equal(infos, r_infos, f"step {t}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_sub_env_infos_reach_the_trainer_as_sync_vector_env_gives_them(mode, no_leaks):
    from shmenv_fixtures.infos import InfoEnv

    n, mode_enum = 4, gym.vector.AutoresetMode(mode.title().replace("_", ""))
    ref = gym.vector.SyncVectorEnv([InfoEnv for _ in range(n)], autoreset_mode=mode_enum)
    with shmenv.make_vec("shmenv_fixtures.infos:InfoEnv", n, num_workers=2, autoreset_mode=mode) as envs:
        assert_infos_step_alike(envs, ref, n)
    ref.close()


@pytest.mark.timeout(60)
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


@pytest.mark.timeout(60)
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


@pytest.mark.timeout(60)
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


@pytest.mark.timeout(60)
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
