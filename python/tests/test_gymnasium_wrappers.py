"""Every vector wrapper of ``gymnasium.wrappers.vector`` over ``shmenv.make_vec(...)``
(default settings) steps exactly like the same wrapper over ``gymnasium.vector.SyncVectorEnv``
of the same Gymnasium env: same seed, same actions, episode ends included.

Envs: the native CartPole-v1 and Pendulum-v1 (bit-exact twins of Gymnasium's own) and,
for image and Dict wrappers, the Python fixture envs of ``shmenv_fixtures.images`` hosted
in shmenv's workers and, for the reference, instantiated directly. Wrappers that need
rendering or another array framework are listed with the reason they are skipped; a
wrapper added to ``gymnasium.wrappers.vector.__all__`` and not listed here fails
``test_every_vector_wrapper_is_covered``.

Along the way every observation and reward shmenv returned (through the wrapper) is kept
and checked unchanged at the end: several of these wrappers write into the arrays they
are given (ClipReward, the Vectorize* family, an in-place TransformObservation), so a
shmenv array that aliased a later result would show here.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import gymnasium.wrappers as gw
import gymnasium.wrappers.vector as gwv
import numpy as np
import pytest
from gymnasium import spaces

import shmenv
from shmenv_fixtures.images import ImageEnv, OneKeyDictEnv

N_ENVS = 4
SEED = 1234

pytestmark = pytest.mark.timeout(60)


@dataclass
class Kind:
    """An env run both ways: shmenv's id and the reference env's constructor."""

    shm_id: str
    make_ref: Callable[[], gym.Env]
    steps: int
    obs_atol: float = 0.0  # 0: bit-exact


KINDS = {
    "cartpole": Kind("CartPole-v1", lambda: gym.make("CartPole-v1"), steps=150),
    # 210 steps: past Pendulum's 200-step truncation.
    "pendulum": Kind("Pendulum-v1", lambda: gym.make("Pendulum-v1"), steps=210),
    "image": Kind("shmenv_fixtures.images:ImageEnv", ImageEnv, steps=60),
    "dict_image": Kind("shmenv_fixtures.images:OneKeyDictEnv", OneKeyDictEnv, steps=60),
}


@dataclass
class Case:
    kind: str
    wrap: Callable[[gym.vector.VectorEnv], gym.vector.VectorEnv]
    requires: tuple[str, ...] = ()
    """Modules the wrapper needs; the case is skipped, saying so, when one is missing."""
    check_infos: Callable[[Any, Any, dict], None] | None = None
    """Wrapper-specific infos check: (shmenv infos, reference infos, per-run state)."""
    to_numpy: Callable[[Any], Any] = field(default=lambda x: x)


@dataclass
class Skip:
    reason: str


def _double_in_place(obs):
    """A TransformObservation func that writes into the array it is given."""
    obs *= 2
    obs += 1
    return obs


def _check_episode_stats(shm_infos, ref_infos, state):
    """RecordEpisodeStatistics: same episode returns/lengths at the same steps, and the
    same info keys as SyncVectorEnv's (no shmenv key beside Gymnasium's "episode")."""
    assert set(shm_infos) == set(ref_infos)
    if "_episode" in ref_infos:
        done = ref_infos["_episode"]
        np.testing.assert_array_equal(shm_infos["_episode"], done)
        np.testing.assert_allclose(shm_infos["episode"]["r"], ref_infos["episode"]["r"], rtol=1e-6)
        np.testing.assert_array_equal(shm_infos["episode"]["l"], ref_infos["episode"]["l"])
        state["episodes"] = state.get("episodes", 0) + int(done.sum())


def _check_list_infos(shm_infos, ref_infos, state):
    """DictInfoToList: one dict per env, each exactly the reference's (no shmenv key);
    counts the steps checked, for the run's "at least two" rule."""
    assert isinstance(shm_infos, list) and isinstance(ref_infos, list)
    assert len(shm_infos) == len(ref_infos) == N_ENVS
    for s, r in zip(shm_infos, ref_infos):
        assert set(s) == set(r)  # infos as SyncVectorEnv's
        for key, value in r.items():
            np.testing.assert_equal(s[key], value)
    state["episodes"] = state.get("episodes", 0) + 1


def _torch_to_numpy(x):
    if isinstance(x, dict):
        return {k: _torch_to_numpy(v) for k, v in x.items()}
    return x.cpu().numpy() if hasattr(x, "cpu") else x


def _array_conversion(env):
    import array_api_compat.numpy as xp_np  # noqa: F401 - the Array API namespace of numpy

    return gwv.ArrayConversion(env, env_xp=np, target_xp=np)


def _numpy_to_torch(env):
    return gwv.NumpyToTorch(env)


CASES: dict[str, Case | Skip] = {
    "VectorizeTransformObservation": Case(
        "cartpole",
        lambda e: gwv.VectorizeTransformObservation(
            e, wrapper=gw.TransformObservation, func=lambda o: o * 2 + 1, observation_space=e.single_observation_space
        ),
    ),
    "VectorizeTransformAction": Case(
        "pendulum",
        lambda e: gwv.VectorizeTransformAction(
            e, wrapper=gw.TransformAction, func=lambda a: a * 0.5, action_space=spaces.Box(-4, 4, (1,), np.float32)
        ),
    ),
    "VectorizeTransformReward": Case(
        "cartpole", lambda e: gwv.VectorizeTransformReward(e, wrapper=gw.TransformReward, func=lambda r: 2 * r - 0.5)
    ),
    "DictInfoToList": Case("cartpole", gwv.DictInfoToList, check_infos=_check_list_infos),
    "TransformObservation": Case("cartpole", lambda e: gwv.TransformObservation(e, _double_in_place)),
    "FilterObservation": Case("dict_image", lambda e: gwv.FilterObservation(e, ["image"])),
    "FlattenObservation": Case("image", gwv.FlattenObservation),
    "GrayscaleObservation": Case("image", gwv.GrayscaleObservation),
    "ResizeObservation": Case("image", lambda e: gwv.ResizeObservation(e, (4, 4)), requires=("cv2",)),
    "ReshapeObservation": Case("image", lambda e: gwv.ReshapeObservation(e, (64, 3))),
    "RescaleObservation": Case("pendulum", lambda e: gwv.RescaleObservation(e, np.float32(-1), np.float32(1))),
    "DtypeObservation": Case("cartpole", lambda e: gwv.DtypeObservation(e, np.float64)),
    "NormalizeObservation": Case("cartpole", gwv.NormalizeObservation),
    "TransformAction": Case(
        "pendulum",
        lambda e: gwv.TransformAction(
            e, lambda a: a * 0.5, single_action_space=spaces.Box(-4, 4, (1,), np.float32)
        ),
    ),
    "ClipAction": Case("pendulum", gwv.ClipAction),
    "RescaleAction": Case("pendulum", lambda e: gwv.RescaleAction(e, np.float32(-1), np.float32(1))),
    "TransformReward": Case("cartpole", lambda e: gwv.TransformReward(e, lambda r: r * 0.5 + 0.25)),
    "ClipReward": Case("pendulum", lambda e: gwv.ClipReward(e, -4.0, -0.5)),
    "NormalizeReward": Case("cartpole", lambda e: gwv.NormalizeReward(e, gamma=0.99)),
    "RecordEpisodeStatistics": Case("cartpole", gwv.RecordEpisodeStatistics, check_infos=_check_episode_stats),
    "RecordVideo": Skip("records over the default (render_mode None) pool of the comparison; rendering pools are tested with it in test_render.py (runs fully where moviepy is installed)"),
    "HumanRendering": Skip("needs a display window (pygame and opencv); tested in test_render.py where they are installed"),
    # numpy -> numpy through the Array API: runs when array_api_compat is installed.
    "ArrayConversion": Case("cartpole", _array_conversion, requires=("array_api_compat",)),
    "NumpyToTorch": Case(
        "cartpole", _numpy_to_torch, requires=("torch", "array_api_compat"), to_numpy=_torch_to_numpy
    ),
    "JaxToNumpy": Skip("does not apply: it wraps an env that returns JAX arrays; shmenv returns numpy arrays"),
    "JaxToTorch": Skip("does not apply: it wraps an env that returns JAX arrays; shmenv returns numpy arrays"),
}


def test_every_vector_wrapper_is_covered():
    """A wrapper Gymnasium adds must be added to CASES (run, or skipped with a reason)."""
    exported = set(gwv.__all__)
    missing = sorted(exported - set(CASES))
    assert not missing, f"gymnasium.wrappers.vector has wrappers this test does not cover: {missing}"
    stale = sorted(set(CASES) - exported)
    assert not stale, f"listed but no longer in gymnasium.wrappers.vector: {stale}"
    # The in-place ones called out in the test plan are run, not skipped.
    for name in ("ClipReward", "FlattenObservation", "TransformObservation", "NormalizeObservation",
                 "NormalizeReward", "RecordEpisodeStatistics", "DictInfoToList"):
        assert isinstance(CASES[name], Case), name


def _actions(space: spaces.Space, rng: np.random.Generator) -> np.ndarray:
    """Actions for the wrapped env: Discrete uniform, Box uniform within its bounds (or
    +-4 where unbounded, which ClipAction then clips)."""
    single = space
    if isinstance(single, spaces.Discrete):
        return rng.integers(single.start, single.start + single.n, size=N_ENVS)
    assert isinstance(single, spaces.Box), single
    low = np.where(np.isfinite(single.low), single.low, -4.0)
    high = np.where(np.isfinite(single.high), single.high, 4.0)
    return rng.uniform(low, high, size=(N_ENVS, *single.shape)).astype(single.dtype)


def _assert_same(a, b, atol: float, what: str):
    if isinstance(b, dict):
        assert isinstance(a, dict) and a.keys() == b.keys(), f"{what}: {a!r} vs {b!r}"
        for k in b:
            _assert_same(a[k], b[k], atol, f"{what}[{k!r}]")
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs {b.dtype}"
    if atol:
        np.testing.assert_allclose(a, b, rtol=0, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


def _snapshot(x):
    if isinstance(x, dict):
        return {k: _snapshot(v) for k, v in x.items()}
    return np.array(x, copy=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_wrapper_over_shmenv_matches_sync_vector_env(name, no_leaks):
    case = CASES[name]
    if isinstance(case, Skip):
        pytest.skip(f"{name}: {case.reason}")
    for module in case.requires:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{name} needs {module}, which is not installed")
    kind = KINDS[case.kind]
    ref = case.wrap(gym.vector.SyncVectorEnv([kind.make_ref for _ in range(N_ENVS)]))
    shm = case.wrap(shmenv.make_vec(kind.shm_id, N_ENVS))
    conv = case.to_numpy
    try:
        assert shm.single_observation_space == ref.single_observation_space
        assert shm.single_action_space == ref.single_action_space
        assert shm.observation_space == ref.observation_space and shm.action_space == ref.action_space
        obs, infos = shm.reset(seed=SEED)
        r_obs, r_infos = ref.reset(seed=SEED)
        _assert_same(conv(obs), conv(r_obs), kind.obs_atol, "reset obs")
        kept = [(obs, _snapshot(conv(obs)))]
        rng = np.random.default_rng(7)
        state: dict = {}
        ends = 0
        for t in range(kind.steps):
            actions = _actions(ref.single_action_space, rng)
            # Each side gets its own copy: action wrappers may write into them.
            obs, rew, term, trunc, infos = shm.step(actions.copy())
            r_obs, r_rew, r_term, r_trunc, r_infos = ref.step(actions.copy())
            _assert_same(conv(obs), conv(r_obs), kind.obs_atol, f"obs at step {t}")
            np.testing.assert_allclose(conv(rew), conv(r_rew), rtol=1e-6, atol=1e-6, err_msg=f"reward at step {t}")
            np.testing.assert_array_equal(conv(term), conv(r_term), err_msg=f"terminated at step {t}")
            np.testing.assert_array_equal(conv(trunc), conv(r_trunc), err_msg=f"truncated at step {t}")
            if case.check_infos is not None:
                case.check_infos(infos, r_infos, state)
            kept.append((obs, _snapshot(conv(obs))))
            kept.append((rew, _snapshot(conv(rew))))
            ends += int(np.sum(conv(term)) + np.sum(conv(trunc)))
        assert ends >= 2, f"only {ends} episode ends in {kind.steps} steps: the run must cross episode ends"
        if case.check_infos is not None:
            assert state.get("episodes", 0) >= 2
        for k, (value, snap) in enumerate(kept):
            _assert_same(conv(value), snap, 0.0, f"kept result {k} changed afterwards (aliasing)")
    finally:
        shm.close()
        ref.close()
