"""Rendering of hosted Python envs: ``make_vec(..., render_mode=...)`` builds every env
with the mode in its worker, and ``envs.render()`` returns what Gymnasium's vector envs
return (a tuple of each env's ``render()``), compared frame by frame with
``SyncVectorEnv`` of the same envs, seeds and actions. The fixture ``PaintEnv`` renders a
numpy frame (no pygame), so this runs in CI; Gymnasium's CartPole-v1 is compared too when
pygame is installed."""

from __future__ import annotations

import importlib.util
import os

import gymnasium as gym
import gymnasium.wrappers.vector as gwv
import numpy as np
import pytest

import shmenv
import shmenv_fixtures.rendering  # noqa: F401 - registers shmenv_fixtures/Paint-v0

N_ENVS = 3
SEED = 7
PAINT = "shmenv_fixtures.rendering:PaintEnv"

pytestmark = pytest.mark.timeout(60)


def _equal_renders(a, b) -> None:
    assert type(a) is tuple and type(b) is tuple and len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(y, list):  # rgb_array_list: one list of frames per env
            assert isinstance(x, list) and len(x) == len(y)
            for fx, fy in zip(x, y):
                np.testing.assert_array_equal(fx, fy)
                assert fx.dtype == fy.dtype
        else:
            assert isinstance(x, np.ndarray) and x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)


def _compare_with_sync(envs, ref, steps: int) -> int:
    """Steps both with the same actions, comparing ``render()`` after every reset and step;
    returns how many episode ends were crossed."""
    try:
        envs.reset(seed=SEED)
        ref.reset(seed=SEED)
        _equal_renders(envs.render(), ref.render())
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(steps):
            actions = rng.integers(0, 2, size=N_ENVS)
            _, _, term, trunc, _ = envs.step(actions)
            _, _, rterm, rtrunc, _ = ref.step(actions)
            np.testing.assert_array_equal(term, rterm)
            np.testing.assert_array_equal(trunc, rtrunc)
            ends += int(np.sum(term | trunc))
            _equal_renders(envs.render(), ref.render())
        return ends
    finally:
        envs.close()
        ref.close()


@pytest.mark.parametrize("how", ["spec", "entry_point"])
def test_rgb_array_frames_equal_sync_vector_envs(how):
    env = gym.spec("shmenv_fixtures/Paint-v0") if how == "spec" else PAINT
    envs = shmenv.make_vec(env, N_ENVS, num_workers=2, render_mode="rgb_array")
    assert envs.render_mode == "rgb_array"
    assert envs.metadata["render_modes"] == ["rgb_array", "depth_array"]
    assert envs.metadata["render_fps"] == 15
    if how == "spec":
        ref = gym.vector.SyncVectorEnv(
            [lambda: gym.make("shmenv_fixtures/Paint-v0", render_mode="rgb_array")] * N_ENVS
        )
    else:
        ref = gym.vector.SyncVectorEnv([lambda: shmenv_fixtures.rendering.PaintEnv(render_mode="rgb_array")] * N_ENVS)
    assert ref.render_mode == envs.render_mode
    assert _compare_with_sync(envs, ref, 40) > 0


def test_depth_array_and_rgb_array_list_as_sync_vector_env():
    envs = shmenv.make_vec(PAINT, N_ENVS, num_workers=2, render_mode="depth_array")
    ref = gym.vector.SyncVectorEnv([lambda: shmenv_fixtures.rendering.PaintEnv(render_mode="depth_array")] * N_ENVS)
    _compare_with_sync(envs, ref, 10)
    # rgb_array_list: gym.make wraps the env in RenderCollection, in the worker as here.
    spec = gym.spec("shmenv_fixtures/Paint-v0")
    envs = shmenv.make_vec(spec, N_ENVS, num_workers=2, render_mode="rgb_array_list")
    assert envs.render_mode == "rgb_array_list"
    ref = gym.vector.SyncVectorEnv([lambda: gym.make(spec, render_mode="rgb_array_list")] * N_ENVS)
    _compare_with_sync(envs, ref, 25)


def test_config_render_mode_counts_and_a_disagreement_is_refused():
    with shmenv.make_vec(PAINT, 2, num_workers=1, config={"render_mode": "rgb_array"}) as envs:
        assert envs.render_mode == "rgb_array"
        envs.reset(seed=0)
        assert len(envs.render()) == 2
    with pytest.raises(shmenv.InvalidArgumentError, match="disagree"):
        shmenv.make_vec(PAINT, 2, config={"render_mode": "depth_array"}, render_mode="rgb_array")
    with pytest.raises(shmenv.InvalidArgumentError, match="must be a str"):
        shmenv.make_vec(PAINT, 2, render_mode=True)


def test_a_factory_binds_its_own_render_mode():
    with pytest.raises(shmenv.InvalidArgumentError, match="bind the mode inside it"):
        shmenv.make_vec(lambda: shmenv_fixtures.rendering.PaintEnv(), 2, render_mode="rgb_array")
    envs = shmenv.make_vec(lambda: shmenv_fixtures.rendering.PaintEnv(render_mode="rgb_array"), 2, num_workers=1)
    with envs:
        assert envs.render_mode == "rgb_array"  # env 0's, as Gymnasium's vector envs take it
        envs.reset(seed=0)
        frames = envs.render()
        assert len(frames) == 2 and frames[0].shape == (6, 16, 3)


def test_an_env_that_ignores_render_mode_is_refused():
    with pytest.raises(shmenv.InvalidArgumentError, match="ignores the render_mode keyword"):
        shmenv.make_vec("shmenv_fixtures.rendering:IgnoresRenderMode", 2, num_workers=1, render_mode="rgb_array")


def test_render_without_a_mode_says_how_to_enable_it():
    with shmenv.make_vec(PAINT, 2, num_workers=1) as envs:
        assert envs.render_mode is None
        assert envs.metadata["render_modes"] == ["rgb_array", "depth_array"]
        envs.reset(seed=0)
        with pytest.raises(shmenv.UsageError, match=r"render_mode='rgb_array'"):
            envs.render()
        assert envs.call("render") == (None, None)  # the envs' own answer, as SyncVectorEnv's call


def test_native_envs_refuse_a_render_mode():
    with pytest.raises(shmenv.InvalidArgumentError, match="native envs do not render"):
        shmenv.make_vec("CartPole-v1", 2, render_mode="rgb_array")
    with shmenv.make_vec("CartPole-v1", 2, num_workers=1) as envs:
        assert envs.render_mode is None and envs.metadata["render_modes"] == []
        with pytest.raises(shmenv.UsageError, match="native envs do not render"):
            envs.render()


def test_record_video_and_human_rendering_accept_the_pool(tmp_path):
    with shmenv.make_vec(PAINT, 2, num_workers=1) as envs:
        with pytest.raises(ValueError, match="incompatible with RecordVideo"):
            gwv.RecordVideo(envs, str(tmp_path))
        with pytest.raises(ValueError, match="render_mode"):
            gwv.HumanRendering(envs)
    envs = shmenv.make_vec(PAINT, 2, num_workers=1, render_mode="rgb_array")
    with envs:
        human = gwv.HumanRendering(envs)  # its checks: render_mode and render_fps; pygame comes at the first frame
        assert human.render_mode == "human"
        if importlib.util.find_spec("moviepy") is None:
            # RecordVideo's render_mode check passed: what stops it is the missing moviepy.
            with pytest.raises(gym.error.DependencyNotInstalled, match="moviepy"):
                gwv.RecordVideo(envs, str(tmp_path))
        else:
            rec = gwv.RecordVideo(envs, str(tmp_path), episode_trigger=lambda e: True, video_length=5)
            rec.reset(seed=0)
            for _ in range(6):
                rec.step(np.ones(2, dtype=np.int64))
            rec.close()
            assert any(name.endswith(".mp4") for name in os.listdir(tmp_path))


def test_human_rendering_shows_the_frames_when_pygame_and_opencv_are_installed(monkeypatch):
    pytest.importorskip("pygame")
    pytest.importorskip("cv2")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    envs = gwv.HumanRendering(shmenv.make_vec(PAINT, 2, num_workers=1, render_mode="rgb_array"))
    try:
        envs.reset(seed=0)
        for _ in range(3):
            envs.step(np.ones(2, dtype=np.int64))
        assert envs.window is not None
    finally:
        envs.close()


def test_cartpole_frames_equal_sync_vector_env_when_pygame_is_installed():
    pytest.importorskip("pygame")
    spec = gym.spec("CartPole-v1")
    envs = shmenv.make_vec(spec, N_ENVS, num_workers=2, render_mode="rgb_array")
    assert envs.render_mode == "rgb_array" and envs.metadata["render_fps"] == 50
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", render_mode="rgb_array")] * N_ENVS)
    _compare_with_sync(envs, ref, 30)
