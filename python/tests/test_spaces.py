"""Every fixed-size Gymnasium space as observation and action, dtypes kept end to end,
compared with ``SyncVectorEnv`` step for step over real workers; composite (Dict/Tuple)
actions checked before any worker sees them; variable-size spaces as observations beside
fixed-size actions (test_gymnasium_vector_conformance.py has them as both); Box bounds that
travel compactly (image observations, frame stacks) or are refused naming the space; one-key
Dict observations; wrong action shapes refused naming the expected shape."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence

import shmenv
from conftest import step_alike
from shmenv_fixtures.spaces import LEAVES, SpacesEnv

pytestmark = pytest.mark.timeout(120)

ENTRY = "shmenv_fixtures.spaces:SpacesEnv"


def assert_same(got, want, where: str) -> None:
    """Equal nesting (dict keys, tuple lengths), dtypes, shapes and values."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{where}: {type(got)} {list(got)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), f"{where}: {type(got)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}/{i}")
    else:
        want = np.asarray(want)
        if isinstance(got, int) and want.dtype.kind in "iu" and want.ndim == 0:
            got = np.asarray(got, dtype=want.dtype)  # a final observation's Discrete value is a Python int
        assert got.dtype == want.dtype and got.shape == want.shape, f"{where}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
        np.testing.assert_array_equal(got, want, err_msg=where)


def run_alike(obs: str, action: str, n: int = 4, steps: int = 9, mode: str = "next_step", **kwargs) -> None:
    """The pool and SyncVectorEnv from the same seeds and actions give the same spaces,
    observations (as nested and typed), rewards and flags; under same_step the same final
    observations."""
    config = {"obs": obs, "action": action}
    ref = gym.vector.SyncVectorEnv(
        [lambda: SpacesEnv(**config) for _ in range(n)], autoreset_mode=gym.vector.AutoresetMode(mode.title().replace("_", ""))
    )
    with shmenv.make_vec(ENTRY, n, num_workers=2, config=config, autoreset_mode=mode, **kwargs) as envs:
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.single_action_space == ref.single_action_space
        assert envs.observation_space == ref.observation_space and envs.action_space == ref.action_space
        got, _ = envs.reset(seed=5)
        want, _ = ref.reset(seed=5)
        assert_same(got, want, "reset")
        envs.action_space.seed(1)
        for t in range(steps):
            actions = envs.action_space.sample()
            got = envs.step(actions)
            want = ref.step(actions)
            assert_same(got[0], want[0], f"step {t} obs")
            np.testing.assert_array_equal(got[1], want[1].astype(np.float32), err_msg=f"step {t} rewards")
            np.testing.assert_array_equal(got[2], want[2])
            np.testing.assert_array_equal(got[3], want[3])
            if "final_obs" in want[4]:
                for i in np.flatnonzero(want[4]["_final_obs"]):
                    assert_same(got[4]["final_obs"][i], want[4]["final_obs"][i], f"step {t} final_obs {i}")
    ref.close()


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_every_fixed_size_space_as_observation_and_action_steps_as_sync_vector_env(leaf, no_leaks):
    run_alike(leaf, leaf)


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_nested_dict_and_tuple_observations_with_a_composite_action(mode, no_leaks):
    run_alike("nested", "composite", mode=mode)


def test_tuple_observations_and_dict_actions_as_views(no_leaks):
    run_alike("tuple", "nested", copy=False)


def test_int8_multi_discrete_actions_reach_the_env_as_int8():
    # SpacesEnv raises unless the action has the space's exact dtype (and is in the space).
    with shmenv.make_vec(ENTRY, 2, num_workers=1, config={"obs": "box_u16", "action": "multi_discrete_2d_int8"}) as envs:
        envs.reset(seed=0)
        assert envs.single_action_space.dtype == np.int8
        valid = np.array([[[-1, 0], [1, 100]], [[0, 2], [4, 104]]], dtype=np.int64)  # int64 in range: converted
        envs.step(valid)
        with pytest.raises(shmenv.ActionError, match=r"integers in \[-128, 127\]"):
            envs.step(np.full((2, 2, 2), 300))
        with pytest.raises(shmenv.ActionError, match=r"env 1 \(element 3\) is 105"):
            envs.step(valid + np.array([0, 1])[:, None, None] * np.array([[0, 0], [0, 1]]))
        envs.step(valid)  # the pool is unchanged


def test_invalid_composite_actions_are_refused_naming_the_part_and_the_pool_goes_on(no_leaks):
    with shmenv.make_vec(ENTRY, 3, num_workers=2, config={"obs": "box_u16", "action": "composite"}, seed=0) as envs:
        envs.reset()
        envs.action_space.seed(0)
        good = envs.action_space.sample()
        bad_discrete = (good[0], np.array([0, 3, 0]), good[2])  # Discrete(5, start=-2) takes -2..2
        with pytest.raises(shmenv.ActionError, match=r"action 1: action for env 1 .* is 3, expected an integer in -2..3"):
            envs.step(bad_discrete)
        half = good[0]["h"].copy()
        half[2, 1] = np.nan
        with pytest.raises(shmenv.ActionError, match=r"action 0/h: action for env 2 \(element 1\) is NaN"):
            envs.step(({"md": good[0]["md"], "h": half}, good[1], good[2]))
        with pytest.raises(shmenv.ActionError, match=r"action 0/md is missing"):
            envs.step(({"h": good[0]["h"]}, good[1], good[2]))
        with pytest.raises(shmenv.ActionError, match=r"action 2 have shape \(3, 3\)"):
            envs.step((good[0], good[1], np.zeros((3, 3), dtype=bool)))
        with pytest.raises(shmenv.ActionError, match="0 or 1"):
            envs.step((good[0], good[1], np.full((3, 2, 3), 2)))
        envs.step(good)


@pytest.mark.parametrize(
    "space, name",
    [
        (gym.spaces.Text(8), "Text"),
        (gym.spaces.Sequence(gym.spaces.Discrete(3)), "Sequence"),
        (gym.spaces.Dict({"ok": gym.spaces.Discrete(2), "graph": gym.spaces.Graph(gym.spaces.Discrete(2), None)}), "Graph"),
        (gym.spaces.OneOf((gym.spaces.Discrete(2), gym.spaces.Box(0, 1))), "OneOf"),
    ],
)
def test_variable_size_observations_travel_beside_fixed_size_actions(space, name, no_leaks):
    class Varying(SpacesEnv):
        def __init__(self):
            super().__init__("box_u16", "discrete_start")
            self.observation_space = space

    fns = [Varying] * 3
    ref = gym.vector.SyncVectorEnv(fns)
    with shmenv.from_fns(fns, num_workers=2, episode_stats_key="") as envs:
        assert envs.single_observation_space == space and envs.observation_space == ref.observation_space
        got, want = envs.reset(seed=4), ref.reset(seed=4)
        assert got[0] in envs.observation_space and data_equivalence(got, want, exact=True), (name, got, want)
        for t in range(6):
            actions = np.array([-2, 0, 2])
            got, want = envs.step(actions), ref.step(actions)
            assert data_equivalence(got[0], want[0], exact=True), (name, t, got[0], want[0])
    ref.close()


# --- the cost of the spaces: independent of the observation size when bounds are uniform ---


@pytest.mark.parametrize(
    "dtype, low, high, want",
    [
        ("u8", 0, 255, (0, 255)),
        ("i64", "-inf", "inf", (np.iinfo(np.int64).min, np.iinfo(np.int64).max)),
        ("u64", 0, 2.0**64, (0, np.iinfo(np.uint64).max)),  # float64 rounds the top up: the limit
        ("f16", -1e6, 1e6, (-np.inf, np.inf)),  # past float16's range: infinite, as the engine stores it
        ("f32", -4.8, 4.8, (np.float32(-4.8), np.float32(4.8))),
        ("bool", 0, 1, (False, True)),
    ],
)
def test_a_uniform_box_is_two_scalars_and_acts_as_gymnasiums_box(dtype, low, high, want):
    import copy
    import pickle

    from gymnasium.vector.utils import batch_space

    from shmenv.spaces import UniformBox, space_from_json

    shape = (3, 4)
    box = space_from_json({"type": "Box", "dtype": dtype, "shape": list(shape), "low": [low], "high": [high]})
    low, high = (np.full(shape, w, dtype=box.dtype) for w in want)
    plain = gym.spaces.Box(low, high, dtype=box.dtype)
    assert isinstance(box, UniformBox) and box.dtype == plain.dtype and box.shape == shape
    assert box == plain and plain == box and repr(box) == repr(plain)
    for bound in (box.low, box.high, box.bounded_below, box.bounded_above):
        assert bound.shape == shape and bound.strides == (0, 0) and not bound.flags.writeable
    np.testing.assert_array_equal(box.low, plain.low)
    np.testing.assert_array_equal(box.high, plain.high)
    np.testing.assert_array_equal(box.bounded_below, plain.bounded_below)
    assert all(box.is_bounded(m) == plain.is_bounded(m) for m in ("both", "below", "above"))
    box.seed(3)
    assert box.contains(box.sample()) and plain.contains(box.sample())
    batched = batch_space(box, 5)
    assert isinstance(batched, UniformBox) and batched.low.strides == (0, 0, 0)
    assert batched == batch_space(plain, 5) and repr(batched) == repr(batch_space(plain, 5))
    # Pickled, it is Gymnasium's own Box (loading needs no shmenv), random state included.
    loaded = pickle.loads(pickle.dumps(box))
    assert type(loaded) is gym.spaces.Box and loaded == box
    assert np.array_equal(loaded.sample(), copy.deepcopy(box).sample())
    assert isinstance(copy.deepcopy(box), UniformBox)


def test_a_uniform_box_costs_the_same_for_any_observation_size():
    import tracemalloc

    from gymnasium.vector.utils import batch_space

    from shmenv.spaces import space_from_json

    tracemalloc.start()
    try:
        box = space_from_json({"type": "Box", "dtype": "f32", "shape": [1 << 15, 1 << 15], "low": [-1], "high": ["inf"]})
        batched = batch_space(box, 64)  # 2**36 elements: 256 GiB of float32 bounds if they were arrays
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert batched.shape == (64, 1 << 15, 1 << 15) and not batched.is_bounded() and batched.is_bounded("below")
    assert peak < 1 << 20, f"building a 2**30-element Box and its batch of 64 allocated {peak} bytes"


def test_per_element_bounds_are_built_in_the_box_dtype_without_a_float64_copy():
    import tracemalloc

    from shmenv.spaces import space_from_json

    n = 8 << 20
    values = [0.0, 1.0, 2.0, 3.0] * (n // 4)
    spec = {"type": "Box", "dtype": "u8", "shape": [n // 64, 64], "low": values, "high": [255.0] + values[1:]}
    tracemalloc.start()
    try:
        box = space_from_json(spec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert box.low.dtype == np.uint8 and box.low.shape == (n // 64, 64) and box.high[0, 0] == 255
    assert box.low[0, :4].tolist() == [0, 1, 2, 3] and box.high[-1, -4:].tolist() == [0, 1, 2, 3]
    # Gymnasium's Box itself peaks at 6 bytes an element for uint8 (its copies of the bounds,
    # its masks, np.isneginf); ours add the two arrays handed to it and one chunk. Through
    # float64 arrays this Box peaked at 27.8 bytes an element.
    assert peak < 10 * n, f"building a Box of {n} uint8 elements peaked at {peak / n:.1f} bytes an element"


def test_per_element_bounds_keep_integer_limits_and_infinities():
    from shmenv.spaces import space_from_json

    box = space_from_json({"type": "Box", "dtype": "i64", "shape": [3], "low": ["-inf", 0, -5], "high": ["inf", 2.0**63, 7]})
    assert box.low.tolist() == [np.iinfo(np.int64).min, 0, -5]
    assert box.high.tolist() == [np.iinfo(np.int64).max, np.iinfo(np.int64).max, 7]
    box = space_from_json({"type": "Box", "dtype": "f32", "shape": [2], "low": ["-inf", -1.5], "high": [1.0, "inf"]})
    assert box.low.dtype == np.float32 and box.low.tolist() == [-np.inf, -1.5] and box.high.tolist() == [1.0, np.inf]


BIG_OBS = """
import json, sys, time
import numpy as np
import shmenv
n = int(sys.argv[1])
start = time.perf_counter()
envs = shmenv.make_vec("Burn-v0", 1, num_workers=1, copy=False, config={"obs_shape": [n], "obs_dtype": "u8", "step_us": 0})
built = time.perf_counter() - start
region = envs.mapping_range[1] - envs.mapping_range[0]
obs, _ = envs.reset(seed=0)
envs.step(np.zeros(1, dtype=np.int64))
assert obs.shape == (1, n) and envs.observation_space.shape == (1, n)
# VmHWM, this program's own peak: ru_maxrss would carry the parent's peak across fork and exec.
peak = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"built": built, "region": region, "peak": peak}))
envs.close()
"""


@pytest.mark.timeout(240)
def test_a_256_mib_observation_pool_builds_in_seconds_within_its_region_plus_a_constant():
    # Bounds as float64 arrays, tiled again by batch_space, peaked at 5.9 GB for this pool
    # (and took 27 s to build); a 1 GiB observation got the trainer OOM-killed.
    import json
    import subprocess
    import sys

    n = 256 << 20
    out = subprocess.run([sys.executable, "-c", BIG_OBS, str(n)], capture_output=True, text=True, timeout=200)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    allowed = got["region"] + 200e6
    assert got["peak"] < allowed, f"peak RSS {got['peak'] / 1e6:.0f} MB, region {got['region'] / 1e6:.0f} MB: {got}"
    assert got["built"] < 30, f"a 256 MiB-observation pool took {got['built']:.1f} s to build"


@pytest.mark.timeout(60)
def test_one_key_dict_observations_stay_dicts(no_leaks):
    from shmenv_fixtures.images import OneKeyDictEnv

    n = 3
    ref = gym.vector.SyncVectorEnv([OneKeyDictEnv for _ in range(n)], autoreset_mode="SameStep")
    with shmenv.make_vec("shmenv_fixtures.images:OneKeyDictEnv", n, num_workers=2, autoreset_mode="same_step") as envs:
        assert isinstance(envs.single_observation_space, spaces.Dict)
        assert list(envs.single_observation_space.spaces) == ["image"]
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.observation_space == ref.observation_space
        obs, _ = envs.reset(seed=9)
        r_obs, _ = ref.reset(seed=9)
        assert isinstance(obs, dict) and list(obs) == ["image"] and obs["image"].shape == (n, 6, 6, 3)
        np.testing.assert_array_equal(obs["image"], r_obs["image"])
        ends = 0
        for t in range(40):
            actions = np.arange(n) % 2
            obs, rew, term, trunc, infos = envs.step(actions)
            r_obs, r_rew, r_term, r_trunc, r_infos = ref.step(actions)
            assert isinstance(obs, dict) and list(obs) == ["image"]
            np.testing.assert_array_equal(obs["image"], r_obs["image"], err_msg=f"step {t}")
            np.testing.assert_array_equal(term, r_term)
            np.testing.assert_array_equal(trunc, r_trunc)
            for i in np.flatnonzero(term | trunc):
                final = infos["final_obs"][i]
                assert isinstance(final, dict) and list(final) == ["image"]
                np.testing.assert_array_equal(final["image"], r_infos["final_obs"][i]["image"])
                ends += 1
        assert ends >= 2
    ref.close()


@pytest.mark.timeout(60)
def test_wrong_action_shapes_are_refused_naming_the_expected_shape(no_leaks):
    with shmenv.make_vec("Pendulum-v1", 1, num_workers=1, seed=0) as envs:
        envs.reset()
        for bad in (np.zeros(4, np.float32), np.zeros(1, np.float32)):
            with pytest.raises(shmenv.ActionError, match=r"\(1, 1\)"):
                envs.step(bad)
        obs, *_ = envs.step(np.zeros((1, 1), np.float32))
        assert obs.shape == (1, 3)
    with shmenv.make_vec("CartPole-v1", 4, num_workers=2, seed=0) as envs:
        envs.reset()
        with pytest.raises(shmenv.ActionError, match=r"\(4,\)"):
            envs.step(np.zeros((2, 2), np.int64))
        obs, *_ = envs.step(np.zeros(4, np.int64))
        assert obs.shape == (4, 4)


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


@pytest.mark.timeout(60)
def test_atari_like_frame_stack_starts_and_steps_like_sync(no_leaks):
    from shmenv_fixtures.images import FrameStackEnv

    ends = assert_steps_like_sync("shmenv_fixtures.images:FrameStackEnv", FrameStackEnv, 3, 40, seed=5)
    assert ends >= 2


@pytest.mark.timeout(60)
def test_96x96x3_image_env_starts_and_steps_like_sync(no_leaks):
    from shmenv_fixtures.images import ImageEnv

    ends = assert_steps_like_sync(
        "shmenv_fixtures.images:ImageEnv", ImageEnv, 3, 30, seed=2, shape=[96, 96, 3], length=8
    )
    assert ends >= 2


@pytest.mark.timeout(60)
def test_small_box_with_varying_bounds_keeps_every_bound(no_leaks):
    from shmenv_fixtures.images import VaryingBoundsImageEnv

    ends = assert_steps_like_sync(
        "shmenv_fixtures.images:VaryingBoundsImageEnv", VaryingBoundsImageEnv, 2, 20, seed=1, shape=[8, 8, 3]
    )
    assert ends >= 1


@pytest.mark.timeout(60)
def test_large_box_with_varying_bounds_is_refused_naming_the_space(no_leaks):
    with pytest.raises(shmenv.BuildError) as e:
        shmenv.make_vec("shmenv_fixtures.images:VaryingBoundsImageEnv", 2, num_workers=1)
    message = str(e.value)
    assert "observation \"obs\"" in message and "[96,96,3]" in message, message
    assert "uniform bounds" in message and "65536" in message, message
