"""What ``AsyncVectorEnv(env_fns)`` accepts, through ``shmenv.from_fns(env_fns)``, against
``SyncVectorEnv`` step for step: variable-size and custom spaces (also inside Dict and
Tuple), ``observation_mode``, mismatched spaces, infos exactly as ``SyncVectorEnv``'s,
``reset``'s ``seed=``/``options=`` as Gymnasium's workers pass them, and ``render()``.
Every test runs real worker processes."""

from __future__ import annotations

import re
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_differing_spaces

import shmenv
from shmenv_fixtures.counter import CounterEnv
from shmenv_fixtures.spaces import VARIABLE, SpacesEnv

pytestmark = pytest.mark.timeout(120)


def assert_same(a, b, where: str) -> None:
    """``data_equivalence`` (Gymnasium's own: types, keys, dtypes and values), with both
    sides in the message when it fails. The one allowance: a ``Discrete`` value in
    ``final_obs`` is a Python int whatever integer type the env returned."""
    if isinstance(b, dict) and "final_obs" in b:
        b = dict(b, final_obs=np.array([_ints(o) for o in b["final_obs"]] + [None], dtype=object)[:-1])
    assert data_equivalence(a, b, exact=True), f"{where}:\nshmenv: {a!r}\nsync:   {b!r}"


def _ints(value):
    """``value`` with numpy integer scalars as Python ints."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_ints(v) for v in value)
    return int(value) if isinstance(value, np.integer) else value


def step_both(envs, ref, steps: int, seed: int) -> int:
    """Resets both with ``seed``, then steps both with the same sampled actions, comparing
    everything they return; returns the episodes that ended."""
    assert_same(envs.reset(seed=seed), ref.reset(seed=seed), "reset")
    envs.action_space.seed(seed)
    ends = 0
    for t in range(steps):
        actions = envs.action_space.sample()
        got, want = envs.step(actions), ref.step(actions)
        for k, what in enumerate(("obs", "rewards", "terminations", "truncations", "infos")):
            a, b = got[k], want[k]
            if what == "rewards":
                a, b = a, b.astype(np.float32)
            assert_same(a, b, f"step {t}: {what}")
        ends += int(np.sum(got[2] | got[3]))
    return ends


# --- variable-size and custom spaces ------------------------------------------------------


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("space", sorted(VARIABLE))
def test_variable_size_spaces_step_like_sync(space, mode, no_leaks):
    fns = [partial(SpacesEnv, obs=space, action=space, length=3 + i) for i in range(3)]
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with shmenv.from_fns(fns, num_workers=2, autoreset_mode=mode, episode_stats_key="") as envs:
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.single_action_space == ref.single_action_space
        assert type(envs.observation_space) is type(ref.observation_space)
        assert step_both(envs, ref, 12, seed=7) >= 3
    ref.close()


def test_side_leaves_cost_nothing_without_them(no_leaks):
    """A pool whose spaces are all fixed-size makes no side-channel request per step: its
    worker's side store stays empty."""
    fns = [partial(SpacesEnv, obs="nested", action="composite") for _ in range(2)]
    with shmenv.from_fns(fns, num_workers=1) as envs:
        envs.reset(seed=0)
        envs.step(envs.action_space.sample())
        assert envs._assembly.side_obs == [] and not envs._assembly.packing.side
        assert envs.env_call("side_obs", "", [0, 1]) == [(None, None)] * 2


# --- observation_mode ---------------------------------------------------------------------


def bounded(high: float) -> gym.Env:
    """A CounterEnv-like env whose observation bounds depend on ``high``."""
    env = CounterEnv()
    env.observation_space = spaces.Box(0, high, env.observation_space.shape, env.observation_space.dtype)
    return env


def test_observation_mode_different_steps_like_sync(no_leaks):
    fns = [partial(bounded, float(i + 5)) for i in range(3)]
    ref = SyncVectorEnv(fns, observation_mode="different")
    with shmenv.from_fns(fns, num_workers=2, observation_mode="different", episode_stats_key="") as envs:
        assert envs.single_observation_space == ref.single_observation_space == fns[0]().observation_space
        each = [f().observation_space for f in fns]
        assert envs.observation_space == ref.observation_space == batch_differing_spaces(each)
        step_both(envs, ref, 20, seed=3)
    ref.close()


def test_observation_mode_tuple_and_invalid(no_leaks):
    single = spaces.Box(0, 10, CounterEnv().observation_space.shape, CounterEnv().observation_space.dtype)
    given = (spaces.Box(0, 10, (2, *single.shape), single.dtype), single)
    with shmenv.from_fns([partial(bounded, 5.0), partial(bounded, 6.0)], observation_mode=given) as envs:
        assert envs.observation_space == given[0] and envs.single_observation_space == single
        envs.reset(seed=0)
    message = "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch observation"
    with pytest.raises(ValueError, match=re.escape(message)):
        shmenv.from_fns([CounterEnv], observation_mode="invalid")


@pytest.mark.parametrize("num_workers", [1, 2], ids=["one worker", "across workers"])
def test_mismatched_spaces_raise_what_async_vector_env_raises(num_workers, no_leaks):
    fns = [partial(bounded, 5.0), partial(bounded, 7.0)]
    with pytest.raises(RuntimeError, match=r"observation spaces are not equivalent\. Env 1 has Box.*7\.0.*env 0 has"):
        shmenv.from_fns(fns, num_workers=num_workers)
    fns = [CounterEnv, partial(SpacesEnv, obs="text", action="text")]
    with pytest.raises(RuntimeError, match="do not share a common shape and dtype"):
        shmenv.from_fns(fns, num_workers=num_workers, observation_mode="different")


# --- infos, reset arguments, render -------------------------------------------------------


class Recorder(gym.Env):
    """Remembers every ``reset``'s arguments; infos at reset and every third step."""

    observation_space = spaces.Discrete(10)
    action_space = spaces.Discrete(3)

    def __init__(self):
        self.resets: list[tuple] = []
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.resets.append((seed, options))
        self.t = 0
        return 0, {"reset": True, "seed": -1 if seed is None else seed}

    def step(self, action):
        self.t += 1
        info = {"action": int(action), "half": self.t / 2} if self.t % 3 == 0 else {}
        return self.t, float(action), self.t >= 4, False, info


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_infos_and_reset_arguments_are_sync_vector_envs(mode, no_leaks):
    fns = [Recorder] * 3
    ref = SyncVectorEnv(fns, autoreset_mode=mode)
    with shmenv.from_fns(fns, num_workers=2, autoreset_mode=mode, episode_stats_key="") as envs:
        assert_same(envs.reset(), ref.reset(), "unseeded first reset")
        step_both(envs, ref, 9, seed=11)
        assert_same(envs.reset(options={"level": 2}), ref.reset(options={"level": 2}), "reset with options")
        assert_same(envs.get_attr("resets"), ref.get_attr("resets"), "every reset's (seed, options)")
    ref.close()


def test_pool_infos_adds_env_id_and_elapsed_step(no_leaks):
    with shmenv.from_fns([Recorder] * 2, pool_infos=True) as envs:
        _, infos = envs.reset(seed=0)
        np.testing.assert_array_equal(infos["env_id"], [0, 1])
        _, _, _, _, infos = envs.step(np.zeros(2, np.int64))
        np.testing.assert_array_equal(infos["elapsed_step"], [1, 1])
    with shmenv.from_fns([Recorder] * 2) as envs:
        assert "env_id" not in envs.reset(seed=0)[1]


def test_render_returns_what_sync_vector_env_returns(no_leaks):
    fns = [partial(gym.make, "CartPole-v1", render_mode="rgb_array")] * 2
    ref = SyncVectorEnv(fns)
    with shmenv.from_fns(fns) as envs:
        envs.reset(seed=1)
        ref.reset(seed=1)
        assert_same(envs.render(), ref.render(), "render()")
    ref.close()
