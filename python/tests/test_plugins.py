"""Envs from a C plugin library (``make_vec(id, n, plugin=path)``): the C CartPole from
``examples/c`` steps exactly as Gymnasium's CartPole-v1, every worker loads the library
for itself, and loading errors are raised before any step."""

from __future__ import annotations

import os
import shutil
import subprocess

import gymnasium as gym
import numpy as np
import pytest

import shmenv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.timeout(120)


def compile_plugin(source: str, out_dir) -> str:
    """Builds `source` (relative to the repository) into a shared library in `out_dir`."""
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        pytest.fail(f"no C compiler {compiler!r} to build the plugin (set CC)")
    out = os.path.join(out_dir, "lib" + os.path.splitext(os.path.basename(source))[0] + ".so")
    include = os.path.join(ROOT, "worker", "include")
    subprocess.run(
        [compiler, "-std=c99", "-O2", "-shared", "-fPIC", "-I", include, "-o", out, os.path.join(ROOT, source), "-lm"],
        check=True,
    )
    return out


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    return compile_plugin("examples/c/cartpole.c", tmp_path_factory.mktemp("plugins"))


def test_c_cartpole_steps_as_gymnasium_cartpole(cartpole, no_leaks):
    n = 4
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n)
    with shmenv.make_vec("CartPoleC-v1", n, num_workers=2, seed=3, plugin=cartpole) as envs:
        assert envs.single_observation_space == ref.single_observation_space
        assert envs.single_action_space == gym.spaces.Discrete(2)
        obs, _ = envs.reset()
        want, _ = ref.reset(seed=[3 + i for i in range(n)])
        np.testing.assert_array_equal(obs, want)
        assert len(set(envs.worker_pids)) == 2
        rng = np.random.default_rng(0)
        ends = 0
        for t in range(300):
            actions = rng.integers(0, 2, size=n)
            got = envs.step(actions)
            exp = ref.step(actions)
            for a, b in zip(got[:4], exp[:4]):
                np.testing.assert_array_equal(a, b, err_msg=f"step {t}")
            ends += int(np.sum(exp[2]))
        assert ends > 0, "the comparison covers episode ends"
    ref.close()


def test_plugin_errors_are_raised_before_any_step(cartpole, tmp_path, no_leaks):
    with pytest.raises(shmenv.BuildError, match="No such file"):
        shmenv.make_vec("CartPoleC-v1", 2, plugin=str(tmp_path / "missing.so"))
    with pytest.raises(shmenv.errors.UnknownEnvError, match='did you mean "CartPoleC-v1"'):
        shmenv.make_vec("CartPole-v2", 2, num_workers=1, plugin=cartpole)
    with pytest.raises(shmenv.BuildError, match="takes no config keys"):
        shmenv.make_vec("CartPoleC-v1", 2, num_workers=1, config={"x": 1}, plugin=cartpole)
    with pytest.raises(shmenv.errors.InvalidArgumentError, match="plugin must be the path"):
        shmenv.make_vec("CartPoleC-v1", 2, plugin=3)
