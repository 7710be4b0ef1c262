"""``shmenv.envpool.make(..., env_type="dm")``: EnvPool 1.2.5's dm_env API.

Compared with real EnvPool where it is installed: the specs, and the structure (namedtuple
types and fields, dtypes, shapes) of every ``TimeStep`` through episode ends and
auto-resets, sync and async, for CartPole-v1 and Pong-v5 (hosted Gymnasium Atari and the
native ALE plugin); with the plugin, whose frames equal EnvPool's, every value too
(Pong with a time limit, Breakout with episodic life and zero discount on life loss).
The step types and discounts are also checked against shmenv's own Gymnasium-type results
for the same seed and actions."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import pytest

dm_env = pytest.importorskip("dm_env", reason="dm_env is not installed (pip install dm-env)")

import shmenv.libs.envpool as envpool  # noqa: E402
from shmenv.libs.envpool import DmEnvNotInstalledError  # noqa: E402

from test_envpool_make import PLUGIN, atari_backends, has, real_envpool  # noqa: E402

FIRST, MID, LAST = 0, 1, 2


def structure(x):
    """Namedtuple type names and fields, dtypes and shapes, recursively (values left out)."""
    if hasattr(x, "_fields"):
        return (type(x).__name__, [(f, structure(getattr(x, f))) for f in x._fields])
    if isinstance(x, np.ndarray):
        return ("ndarray", x.dtype.str, x.shape)
    return type(x).__name__


def without_ram(x):
    """EnvPool's Atari State has ``ram``, which shmenv does not report (docs/envpool.md)."""
    obs = x.observation
    if "ram" not in obs._fields:
        return x
    fields = [f for f in obs._fields if f != "ram"]
    import collections

    state = collections.namedtuple(type(obs).__name__, fields)(*(getattr(obs, f) for f in fields))
    return x._replace(observation=state)


def spec_without_ram(spec):
    fields = [f for f in spec._fields if f != "ram"]
    return [(f, repr(getattr(spec, f))) for f in fields]


def assert_equal_timesteps(got, want, where: str) -> None:
    want = without_ram(want)
    assert structure(got) == structure(want), where
    for name in ("step_type", "reward", "discount"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"{name} {where}")
    for f in got.observation._fields:
        g, w = getattr(got.observation, f), getattr(want.observation, f)
        if hasattr(g, "_fields"):
            g, w = g.env_id, w.env_id
        np.testing.assert_array_equal(g, w, err_msg=f"observation.{f} {where}")


def make_both(task_id: str, **kw):
    real = real_envpool()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = real.make(task_id, env_type="dm", **{k: v for k, v in kw.items() if k != "plugin"})
    return envpool.make(task_id, env_type="dm", **kw), ref


@pytest.mark.timeout(120)
def test_cartpole_specs_and_timesteps_are_envpools():
    ours, ref = make_both("CartPole-v1", num_envs=4, seed=7, max_episode_steps=15)
    try:
        assert isinstance(ours, dm_env.Environment)
        assert repr(ours.observation_spec()) == repr(ref.observation_spec())
        assert ours.observation_spec() == ref.observation_spec()
        assert repr(ours.action_spec()) == repr(ref.action_spec())
        assert list(ours.config) == list(ref.config) and ours.config["max_episode_steps"] == 15
        assert len(ours) == len(ref) and ours.is_async == ref.is_async
        got, want = ours.reset(), ref.reset()
        assert structure(got) == structure(want)
        assert (got.step_type == FIRST).all() and (got.discount == 1).all() and (got.reward == 0).all()
        kinds = set()
        rng = np.random.default_rng(0)
        for t in range(120):  # time limits, terminations and the FIRST rows after them
            a = rng.integers(0, 2, 4).astype(np.int32)
            got, want = ours.step(a), ref.step(a)
            assert structure(got) == structure(want), t
            kinds |= set(got.step_type.tolist())
        assert kinds == {FIRST, MID, LAST}
        got, want = ours.reset(np.array([1, 3])), ref.reset(np.array([1, 3]))
        assert structure(got) == structure(want)
        np.testing.assert_array_equal(got.observation.env_id, [1, 3])
        np.testing.assert_array_equal(got.step_type, want.step_type)
        # send/recv in sync mode is one step
        ours.send(np.zeros(4, np.int32)), ref.send(np.zeros(4, np.int32))
        assert structure(ours.recv()) == structure(ref.recv())
    finally:
        ours.close(), ref.close()


@pytest.mark.timeout(120)
def test_cartpole_async_timesteps_are_envpools():
    ours, ref = make_both("CartPole-v1", num_envs=4, batch_size=2, seed=7)
    try:
        assert ours.is_async and ref.is_async
        ours.async_reset(), ref.async_reset()
        firsts = 0
        for t in range(60):
            got, want = ours.recv(), ref.recv()
            assert structure(got) == structure(want), t
            firsts += int((got.step_type == FIRST).sum())
            a = np.ones(2, np.int32)
            ours.send(a, got.observation.env_id), ref.send(a, want.observation.env_id)
        assert firsts > 4  # the first resets and the restarts after episode ends
    finally:
        ours.close(), ref.close()


def _check_against_gymnasium_type(task_id: str, steps: int, n_actions: int, **kw) -> None:
    """The dm results equal shmenv's own Gymnasium-type results for the same seed and actions,
    with EnvPool's rules: LAST where terminated or truncated (discount 0), FIRST on the row
    after (reward 0, discount 1), MID otherwise (discount 1)."""
    dm = envpool.make(task_id, env_type="dm", **kw)
    gym_type = envpool.make(task_id, env_type="gymnasium", **kw)
    try:
        ts = dm.reset()
        obs, info = gym_type.reset()
        np.testing.assert_array_equal(ts.observation.obs, obs)
        ended = np.zeros(len(dm), bool)
        rng = np.random.default_rng(1)
        counts = np.zeros(3, np.int64)
        for t in range(steps):
            a = rng.integers(0, n_actions, len(dm)).astype(np.int32)
            ts = dm.step(a)
            obs, rew, term, trunc, info = gym_type.step(a)
            np.testing.assert_array_equal(ts.observation.obs, obs, err_msg=f"obs at {t}")
            np.testing.assert_array_equal(ts.reward, rew, err_msg=f"reward at {t}")
            np.testing.assert_array_equal(ts.observation.env_id, info["env_id"])
            want = np.where(ended, FIRST, np.where(term | trunc, LAST, MID))
            np.testing.assert_array_equal(ts.step_type, want, err_msg=f"step_type at {t}")
            if "zero_discount_on_life_loss" not in kw:
                np.testing.assert_array_equal(ts.discount, (want != LAST).astype(np.float32))
            assert ts.reward[ended].sum() == 0
            ended = term | trunc
            counts += np.bincount(ts.step_type, minlength=3)
        assert counts.min() > 0, counts
    finally:
        dm.close(), gym_type.close()


@pytest.mark.timeout(120)
def test_cartpole_step_types_follow_the_gymnasium_results():
    _check_against_gymnasium_type("CartPole-v1", 150, 2, num_envs=4, seed=3, max_episode_steps=20)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", atari_backends())
def test_pong_specs_timesteps_and_step_types(backend):
    kw = dict(num_envs=2, seed=3, reward_clip=True, max_episode_steps=60)
    ours, ref = make_both("Pong-v5", **kw, **backend)
    try:
        assert spec_without_ram(ours.observation_spec()) == spec_without_ram(ref.observation_spec())
        assert repr(ours.action_spec()) == repr(ref.action_spec())
        assert list(ours.observation_spec()._fields) == [f for f in ref.observation_spec()._fields if f != "ram"]
        got, want = ours.reset(), ref.reset()
        assert structure(got) == structure(without_ram(want))
        rng = np.random.default_rng(2)
        for t in range(130):  # two time limits: LAST (discount 0), then FIRST
            a = rng.integers(0, 6, 2).astype(np.int32)
            got, want = ours.step(a), ref.step(a)
            if backend:  # the native plugin: EnvPool's frames, so every value
                assert_equal_timesteps(got, want, f"at step {t}")
            else:
                assert structure(got) == structure(without_ram(want)), t
                np.testing.assert_array_equal(got.step_type, want.step_type, err_msg=f"step_type at {t}")
                np.testing.assert_array_equal(got.discount, want.discount, err_msg=f"discount at {t}")
    finally:
        ours.close(), ref.close()
    _check_against_gymnasium_type("Pong-v5", 70, 6, num_envs=2, seed=4, max_episode_steps=30, **backend)


@pytest.mark.timeout(300)
def test_plugin_breakout_lives_and_discounts_equal_envpool():
    """Episodic life with ``zero_discount_on_life_loss``: LAST at every lost life, FIRST
    after it, discount 0 there; without episodic life, discount 0 on a MID step where a
    life is lost. Every value equals EnvPool's."""
    if not (os.path.exists(PLUGIN) and has("ale_py")):
        pytest.skip(f"the native ALE plugin is not built ({PLUGIN}) or ale-py is missing")
    for episodic in (True, False):
        kw = dict(num_envs=2, seed=5, episodic_life=episodic, zero_discount_on_life_loss=True, num_threads=1)
        ours, ref = make_both("Breakout-v5", plugin=PLUGIN, **kw)
        try:
            assert_equal_timesteps(ours.reset(), ref.reset(), "at reset")
            zero_mid = 0
            actions = np.random.default_rng(0).integers(0, 4, (900, 2)).astype(np.int32)
            for t, a in enumerate(actions):
                got, want = ours.step(a), ref.step(a)
                assert_equal_timesteps(got, want, f"at step {t} (episodic_life={episodic})")
                zero_mid += int(((got.discount == 0) & (got.step_type == MID)).sum())
            assert (zero_mid > 0) == (not episodic), zero_mid
        finally:
            ours.close(), ref.close()


@pytest.mark.timeout(300)
def test_hosted_breakout_zero_discount_where_a_life_is_lost():
    if not has("ale_py"):
        pytest.skip("ale-py is not installed")
    envs = envpool.make("Breakout-v5", env_type="dm", num_envs=2, seed=1, zero_discount_on_life_loss=True)
    try:
        lives = envs.reset().observation.lives.copy()
        assert (lives == 5).all()
        lost = 0
        rng = np.random.default_rng(0)
        for _ in range(500):
            ts = envs.step(rng.integers(0, 4, 2).astype(np.int32))
            now = ts.observation.lives
            drop = (now < lives) & (ts.step_type != FIRST)
            np.testing.assert_array_equal(ts.discount == 0, drop | (ts.step_type == LAST))
            lost += int(drop.sum())
            lives = now.copy()
        assert lost > 0, "random Breakout play loses lives within 500 steps"
    finally:
        envs.close()


@pytest.mark.timeout(120)
def test_make_spec_dm_specs_and_make_dm():
    real = real_envpool()
    spec = envpool.make_spec("CartPole-v1", num_envs=2)
    ref = real.make_spec("CartPole-v1", num_envs=2)
    assert repr(spec.observation_spec()) == repr(ref.observation_spec())
    assert repr(spec.action_spec()) == repr(ref.action_spec())
    with envpool.make_dm("Pendulum-v1", num_envs=2, seed=0) as env:
        ts = env.reset()
        assert ts.observation.obs.shape == (2, 3) and repr(env.action_spec()).startswith("BoundedArray")
        ts = env.step(np.zeros((2, 1), np.float32))
        assert (ts.step_type == MID).all() and ts.first().sum() == 0


@pytest.mark.timeout(60)
def test_missing_dm_env_raises_a_typed_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "dm_env", None)  # what `import dm_env` does when absent
    monkeypatch.delitem(sys.modules, "shmenv.libs.envpool.dm", raising=False)
    for call in (lambda: envpool.make("CartPole-v1", env_type="dm"), lambda: envpool.make_dm("CartPole-v1")):
        with pytest.raises(DmEnvNotInstalledError, match=r"pip install dm-env") as info:
            call()
        assert isinstance(info.value, ImportError)
    with pytest.raises(ImportError, match="pip install dm-env"):
        envpool.make_spec("CartPole-v1").observation_spec()


def test_specs_of_other_spaces():
    """Spaces beyond CartPole's and Atari's, mapped as EnvPool's ``dm_spec_transform`` maps
    them: a Dict observation's entries become fields of State; Tuple spaces are refused."""
    from dm_env import specs
    from gymnasium import spaces

    from shmenv.libs.envpool.dm import action_spec, observation_spec
    from shmenv.errors import InvalidArgumentError

    obs = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "cell": spaces.Discrete(5),
                       "goal": spaces.Dict({"xy": spaces.MultiDiscrete([3, 4])})})
    state = observation_spec("hosted", obs)
    assert state._fields == ("env_id", "players", *obs.spaces)  # the Dict space's order
    assert state.pos == specs.BoundedArray((2,), np.float32, -1, 1) and state.pos.name == "pos"
    assert isinstance(state.cell, specs.DiscreteArray) and state.cell.num_values == 5
    assert state.goal._fields == ("xy",)
    np.testing.assert_array_equal(state.goal.xy.maximum, [2, 3])
    shifted = action_spec(spaces.Discrete(3, start=-1))
    assert type(shifted) is specs.BoundedArray and (shifted.minimum, shifted.maximum) == (-1, 1)
    assert action_spec(spaces.Discrete(4)).dtype == np.int32
    with pytest.raises(InvalidArgumentError, match="Tuple"):
        observation_spec("hosted", spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))))
