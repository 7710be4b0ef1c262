"""How :mod:`shmenv.ray` splits envs (and workers) among its actors: the engine's shard
rule, so actor ``k`` hosts the envs worker ``k`` of one pool would. Needs no Ray
(``shmenv.ray.host`` imports it only inside the actor)."""

from __future__ import annotations

import pytest

import shmenv
from shmenv._shmenv import shard
from shmenv.ray.host import split_evenly


def test_five_envs_on_two_actors_split_as_the_engine_splits_them():
    # The engine gives the larger shard to the last worker: (0, 2), (2, 5).
    assert split_evenly(5, 2) == [(0, 2), (2, 5)]


@pytest.mark.parametrize("total", range(1, 40))
def test_every_split_is_the_engine_shard_rule(total):
    for parts in range(1, total + 1):
        assert split_evenly(total, parts) == [shard(k, total, parts) for k in range(parts)]


@pytest.mark.timeout(120)
def test_actors_get_the_shards_a_running_pool_gives_its_workers():
    # A real pool of 5 envs on 2 workers: its workers' shards are the actors' split.
    env = shmenv.make_vec("CartPole-v1", 5, num_workers=2)
    try:
        assert [tuple(r) for r in env._pool.shards()] == split_evenly(5, 2)
    finally:
        env.close()
