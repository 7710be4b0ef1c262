"""The integrations live in :mod:`shmenv.libs`; the import paths users write
(``shmenv.sb3``, ``shmenv.torchrl``, ``shmenv.rllib``, ``shmenv.envpool``,
``shmenv.multiagent.sb3``, ``shmenv.multiagent.torchrl``) re-export each one's public names,
the same objects. Modules whose library is not installed here are skipped."""

from __future__ import annotations

import importlib
import pickle

import pytest

pytestmark = pytest.mark.timeout(120)

ALIASES = {
    "shmenv.sb3": "shmenv.libs.sb3",
    "shmenv.torchrl": "shmenv.libs.torchrl",
    "shmenv.rllib": "shmenv.libs.rllib",
    "shmenv.envpool": "shmenv.libs.envpool",
    "shmenv.multiagent.sb3": "shmenv.libs.sb3_multiagent",
    "shmenv.multiagent.torchrl": "shmenv.libs.torchrl_multiagent",
}


@pytest.mark.parametrize("alias, lib", sorted(ALIASES.items()))
def test_each_user_path_re_exports_its_libs_modules_public_names(alias, lib):
    try:
        code = importlib.import_module(lib)
    except ImportError as e:
        pytest.skip(f"{lib} needs a library not installed here: {e}")
    short = importlib.import_module(alias)
    assert sorted(short.__all__) == sorted(code.__all__), f"{alias} re-exports other names than {lib}"
    for name in code.__all__:
        assert getattr(short, name) is getattr(code, name), f"{alias}.{name} is not {lib}.{name}"


def test_the_envpool_drop_in_makes_and_pickles_through_the_user_path(no_leaks):
    import numpy as np

    import shmenv.envpool as envpool

    assert "CartPole-v1" in envpool.list_all_envs()
    env = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=2, seed=0)
    try:
        assert isinstance(env, envpool.EnvPoolEnv)
        obs, _ = env.reset()
        assert obs.shape == (2, 4)
        spec = envpool.make_spec("CartPole-v1", num_envs=2)
        assert pickle.loads(pickle.dumps(spec)).config.num_envs == 2
        env.step(np.zeros(2, np.int64))
    finally:
        env.close()


def test_the_asset_paths():
    import shmenv.assets

    assert shmenv.assets.gymnasium_model("half_cheetah.xml").endswith("assets/half_cheetah.xml")
