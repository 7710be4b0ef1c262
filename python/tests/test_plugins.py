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


SPEC_ROWS = [
    # (env id of tests/plugins/specs.c, words the BuildError must hold)
    ("TooLongSpec-v0", ["spec_json returned", "more than the 65536"]),
    ("Overflow-v0", ["shape [2305843009213693953] of f64", "1 GiB"]),
    ("NaNBound-v0", ["(low NaN, high 1) is NaN"]),
    ("LowAboveHigh-v0", ["(low 2, high 1) has low above high"]),
    ("U8Range-v0", ["(low -5, high 1000)", "u8 bounds are 0..=255"]),
    ("UnknownKey-v0", ['unknown key "max_episode_step" in the spec']),
    ("EpisodeLimit-v0", ["spec_json sets max_episode_steps 3", "info table says none"]),
]


@pytest.fixture(scope="module")
def specs(tmp_path_factory) -> str:
    return compile_plugin("tests/plugins/specs.c", tmp_path_factory.mktemp("plugins"))


@pytest.mark.parametrize("env_id,words", SPEC_ROWS, ids=[r[0] for r in SPEC_ROWS])
def test_plugin_specs_are_validated_like_configs(specs, env_id, words, no_leaks):
    with pytest.raises(shmenv.BuildError) as info:
        shmenv.make_vec(env_id, 4, num_workers=2, plugin=specs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


def test_a_long_valid_plugin_spec_is_read_whole(specs):
    with shmenv.make_vec("LongSpec-v0", 2, num_workers=1, plugin=specs) as envs:
        assert envs.single_observation_space.shape == (2000,)
        assert envs.single_observation_space.low[1999] == -2000.5
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (2, 2000)


def test_shapes_whose_size_overflows_are_a_config_error():
    config = {"obs_shape": [2**32, 2**32], "obs_dtype": "u8"}
    with pytest.raises(shmenv.errors.ConfigError) as info:
        shmenv.make_vec("Burn-v0", 1, num_workers=1, config=config)
    assert 'config key "obs_shape": shape [4294967296, 4294967296] of u8' in str(info.value)
    assert "(1 GiB)" in str(info.value)
