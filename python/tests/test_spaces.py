"""Every fixed-size Gymnasium space as observation and action, dtypes kept end to end,
compared with ``SyncVectorEnv`` step for step over real workers; composite (Dict/Tuple)
actions checked before any worker sees them; variable-size spaces refused by name."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import shmenv
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
def test_variable_size_spaces_are_refused_naming_the_space_and_what_to_do(space, name, no_leaks):
    class Varying(SpacesEnv):
        def __init__(self):
            super().__init__("box_u16", "discrete_start")
            self.observation_space = space

    with pytest.raises(shmenv.BuildError) as err:
        shmenv.make_vec(lambda: Varying(), 2, num_workers=1)
    message = str(err.value)
    assert f"{name}" in message and "no fixed size" in message and "AsyncVectorEnv" in message, message
