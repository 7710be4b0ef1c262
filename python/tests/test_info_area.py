"""The trainer's reader of the info area (``Pool.attach_infos`` / ``Pool.take_infos``):
what it does with an area that does not fit the pool, or with key tables a worker wrote
wrongly. The area is shared with the workers, so nothing in it is trusted."""

from __future__ import annotations

import numpy as np
import pytest

import shmenv
from shmenv.infos import _ENTRY, _NAME_BYTES, SLOTS


def _lives_pool():
    return shmenv.make_vec("shmenv_fixtures.infos:LivesEnv", 4, num_workers=2, seed=0)


def test_an_area_too_small_for_the_pool_is_refused(no_leaks):
    with _lives_pool() as envs:
        layout = envs._infos._area.layout
        with pytest.raises(ValueError, match="does not fit 2 workers of 2 envs"):
            envs._pool.attach_infos(np.zeros(64, np.uint8), layout)
        for bad in ({"cells": 3}, {"pickled": 2**62}, {"slot_bytes": 2**63}, {"entries": 2**64 - 1}):
            with pytest.raises(ValueError, match="does not fit"):
                envs._pool.attach_infos(envs._infos._area.bytes, {**layout, **bad})
        # The pool still reads its own area.
        envs.reset()
        *_, infos = envs.step(np.zeros(4, np.int64))
        assert infos["lives"].tolist() == [3, 3, 3, 3]


@pytest.mark.parametrize("name, dtype", [(b"\xff\xfe", b"<i8"), (b"lives", b"<c16"), (b"lives", b">i8"), (b"x", b"")])
def test_a_key_table_a_worker_wrote_wrongly_is_an_error_naming_it(name, dtype, no_leaks):
    with _lives_pool() as envs:
        envs.reset()
        envs.step(np.zeros(4, np.int64))
        area = envs._infos._area
        at = area.entries + (1 * SLOTS + 0) * _ENTRY  # worker 1's first key
        area.mm[at : at + _ENTRY] = name.ljust(_NAME_BYTES, b"\0") + dtype.ljust(_ENTRY - _NAME_BYTES, b"\0")
        envs._infos.forget_tables()  # as after a restart: the tables are read again
        with pytest.raises(ValueError, match="worker 1's info key 0 is not a UTF-8 name"):
            envs.step(np.zeros(4, np.int64))


def test_a_key_count_past_the_table_reads_the_table_only(no_leaks):
    with _lives_pool() as envs:
        envs.reset()
        *_, before = envs.step(np.zeros(4, np.int64))
        area = envs._infos._area
        named = int(area.counts[0])
        area.counts[0] = 255  # entries past the worker's named ones are zero: not names
        envs._infos.forget_tables()
        with pytest.raises(ValueError, match=f"worker 0's info key {named} is not a UTF-8 name"):
            envs.step(np.zeros(4, np.int64))
        area.counts[0] = named
        envs._infos.forget_tables()
        *_, after = envs.step(np.zeros(4, np.int64))
        assert sorted(after) == sorted(before)


def test_a_pool_with_a_trainer_shard_counts_its_shard_as_a_part_of_the_area(no_leaks):
    with _lives_pool() as hosted:
        layout = hosted._infos._area.layout  # 2 parts of 2 envs
    # The trainer's envs 0..3 and the worker's 3..6: 2 parts of 3 envs.
    with shmenv.make_vec("CartPole-v1", 6, num_workers=1, trainer_shard=True) as envs:
        with pytest.raises(ValueError, match="does not fit 2 workers of 3 envs"):
            envs._pool.attach_infos(np.zeros(4096, np.uint8), layout)
