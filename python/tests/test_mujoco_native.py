"""Native MuJoCo envs through the plugin ABI (``examples/c/mujoco_locomotion.c``, built
against the ``mujoco`` wheel's C API): from the same initial qpos/qvel, HalfCheetahC-v5
HopperC-v5 and AntC-v5 follow Gymnasium's HalfCheetah-v5, Hopper-v5 and Ant-v5 step for step (same MuJoCo
library), and bad config is refused with a message. Skipped when ``mujoco`` (or
Gymnasium's MuJoCo envs) cannot be imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import shmenv

pytest.importorskip("mujoco", reason="the mujoco package is not installed (pip install 'gymnasium[mujoco]')")
pytest.importorskip("gymnasium.envs.mujoco", reason="Gymnasium's MuJoCo envs cannot be imported (pip install 'gymnasium[mujoco]')")

import gymnasium as gym  # noqa: E402

from shmenv.assets import gymnasium_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def in_tmp_dir(tmp_path, monkeypatch):
    """MuJoCo appends its warnings (Gymnasium's models use a deprecated attribute) to
    MUJOCO_LOG.TXT in the working directory: keep it out of the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.fail("no C compiler to build the MuJoCo plugin (set CC)")
    out = str(tmp_path_factory.mktemp("plugins") / "libmujoco_locomotion.so")
    script = os.path.join(ROOT, "examples", "c", "build_mujoco.sh")
    subprocess.run(["bash", script, out], check=True, env={**os.environ, "PYTHON": sys.executable})
    return out


@pytest.mark.parametrize(
    ("native", "reference", "model"),
    [
        ("HalfCheetahC-v5", "HalfCheetah-v5", "half_cheetah.xml"),
        ("HopperC-v5", "Hopper-v5", "hopper.xml"),
        ("AntC-v5", "Ant-v5", "ant.xml"),
    ],
)
def test_native_trajectory_equals_gymnasium(library, no_leaks, native, reference, model):
    config = {"model": gymnasium_model(model), "reset_noise_scale": 0.0}
    ref = gym.make(reference, reset_noise_scale=0.0)
    with shmenv.make_vec(native, 1, num_workers=1, seed=0, plugin=library, config=config) as envs:
        assert envs.single_observation_space == ref.observation_space
        assert envs.single_action_space == ref.action_space
        obs, _ = envs.reset()
        want, _ = ref.reset(seed=0)
        np.testing.assert_allclose(obs[0], want, rtol=1e-9, atol=0)
        rng = np.random.default_rng(1)
        for t in range(200):
            action = rng.uniform(-1, 1, ref.action_space.shape).astype(np.float32)
            got_obs, got_reward, got_term, got_trunc, _ = envs.step(action[None])
            exp_obs, exp_reward, exp_term, exp_trunc, _ = ref.step(action)
            np.testing.assert_allclose(got_obs[0], exp_obs, rtol=1e-9, atol=0, err_msg=f"step {t}")
            # Rewards are float32 in shmenv: Gymnasium's float64 reward rounded once.
            assert got_reward[0] == np.float32(exp_reward), f"step {t}"
            assert (bool(got_term[0]), bool(got_trunc[0])) == (exp_term, exp_trunc), f"step {t}"
            if exp_term:
                break
        assert t > 5, "the comparison covers several steps"


def test_native_spec_time_limit_and_seeding(library, no_leaks):
    config = {"model": gymnasium_model("half_cheetah.xml")}
    runs = []
    for _ in range(2):
        with shmenv.make_vec("HalfCheetahC-v5", 2, num_workers=2, seed=7, plugin=library, config=config) as envs:
            obs, _ = envs.reset()
            assert obs.shape == (2, 17) and obs.dtype == np.float64
            assert not np.array_equal(obs[0], obs[1]), "each env starts from its own noise"
            steps = [envs.step(np.full((2, 6), 0.5, np.float32))[0] for _ in range(999)]
            _, _, term, trunc, _ = envs.step(np.zeros((2, 6), np.float32))
            assert trunc.all() and not term.any(), "HalfCheetah-v5 is cut at 1000 steps"
            runs.append(np.stack([obs, *steps]))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_bad_config_is_refused_with_a_message(library, no_leaks):
    with pytest.raises(shmenv.BuildError, match='config "model" is required'):
        shmenv.make_vec("HalfCheetahC-v5", 1, num_workers=1, plugin=library)
    with pytest.raises(shmenv.BuildError, match='unknown config key "frame_skip"'):
        shmenv.make_vec(
            "HalfCheetahC-v5", 1, num_workers=1, plugin=library,
            config={"model": gymnasium_model("half_cheetah.xml"), "frame_skip": 3},
        )
    with pytest.raises(shmenv.BuildError, match="cannot load the model /no/such.xml"):
        shmenv.make_vec("HopperC-v5", 1, num_workers=1, plugin=library, config={"model": "/no/such.xml"})
