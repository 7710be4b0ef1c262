"""A closed pool whose zero-copy views (``copy=False``) are still alive keeps the memory
mapped for them, but no fd: the memfd closes with the pool."""

from __future__ import annotations

import os

import numpy as np
import pytest

import shmenv

pytestmark = pytest.mark.timeout(60)


def memfds() -> list[str]:
    """This process's open fds that are shmenv regions (``memfd:shmenv``)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own fd, gone already
        if target.startswith("/memfd:shmenv"):
            found.append(f"{fd} -> {target}")
    return found


@pytest.mark.parametrize("env", ["CartPole-v1", "python"], ids=["native", "hosted"])
def test_views_outlive_the_pool_but_its_memfd_does_not(no_leaks, env):
    import gymnasium as gym

    before = memfds()
    envs = shmenv.make_vec(gym.spec("CartPole-v1") if env == "python" else env, 4, num_workers=2, copy=False, seed=0)
    try:
        obs, _ = envs.reset()
        assert len(memfds()) > len(before), "an open pool holds its memfd (workers may be respawned)"
        kept = obs.copy()
    finally:
        envs.close()
    assert memfds() == before, f"a closed pool left its memfd open: {memfds()}"
    np.testing.assert_array_equal(obs, kept)  # the view still reads the mapping
