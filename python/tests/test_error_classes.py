"""The ``shmenv.errors`` classes the extension raises are named once, by its
``ErrorClass`` enum (``_shmenv.error_class_names()``): each must be a class of
``shmenv.errors``, or a raise of it would fail with an ``AttributeError`` instead. A closed
pool raises Gymnasium's ``ClosedEnvironmentError`` type."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import shmenv
import shmenv.errors
from shmenv import _shmenv


def test_every_class_the_extension_raises_is_a_shmenv_error():
    names = _shmenv.error_class_names()
    assert len(names) == len(set(names)) == 11
    for name in names:
        cls = getattr(shmenv.errors, name)  # ClosedError is made on first use
        assert isinstance(cls, type) and issubclass(cls, shmenv.errors.Error), name
        assert name in shmenv.errors.__all__, name


def test_the_extension_names_every_pool_error_class():
    # The classes only Python raises: the Ray front's and the type errors Gymnasium's vector envs raise.
    python_only = {"Error", "StepError", "ActorDiedError", "InvalidArgumentTypeError", "ActionTypeError"}
    assert set(shmenv.errors.__all__) - python_only == set(_shmenv.error_class_names())


@pytest.mark.timeout(120)
def test_the_extensions_raises_make_the_named_classes(no_leaks):
    with pytest.raises(shmenv.errors.UnknownEnvError):
        shmenv.make_vec("NoSuchEnv-v0", 1)
    env = shmenv.make_vec("CartPole-v1", 2, num_workers=1)
    with pytest.raises(shmenv.errors.UsageError):
        env.step(np.zeros(2, dtype=np.int64))  # step before reset
    env.close()
    with pytest.raises(shmenv.errors.ClosedError):
        env._pool.reset()


@pytest.mark.timeout(60)
def test_closed_error_is_gymnasiums_closed_environment_error(no_leaks):
    envs = shmenv.make_vec("CartPole-v1", 2, num_workers=1, seed=0)
    envs.reset()
    envs.close()
    for call in (lambda: envs.step(np.zeros(2, np.int64)), lambda: envs.reset(), lambda: envs.get_attr("spec")):
        with pytest.raises(gym.error.ClosedEnvironmentError) as e:
            call()
        assert isinstance(e.value, shmenv.ClosedError) and "closed" in str(e.value)
