"""Variable-size and custom observation leaves (side leaves) carry the observation before
the latest only when the autoreset mode needs it: under same-step autoreset, for the rows
that ended (their final observation); never under next-step or disabled autoreset. Each
test counts the values the real worker processes pickle (a custom space whose values
count their own pickling) and compares every step with ``SyncVectorEnv``."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import shmenv
from test_gymnasium_vector_conformance import assert_same

pytestmark = pytest.mark.timeout(120)

MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP, "disabled": AutoresetMode.DISABLED}


def pickled_by_workers(envs) -> int:
    """How many observation values the pool's workers have pickled so far."""
    return sum(dict(envs.call("pickled")).values())


def fns(n: int):
    from shmenv_fixtures.counted import BlobEnv

    # Episodes of 3 and 4 steps: batches mix rows that ended with rows that did not.
    return [lambda length=3 + i % 2: BlobEnv(length=length) for i in range(n)]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_only_same_step_rows_that_ended_send_the_observation_before(mode, no_leaks):
    n = 4
    ref = SyncVectorEnv(fns(n), autoreset_mode=MODES[mode])
    with shmenv.from_fns(fns(n), num_workers=2, autoreset_mode=mode, episode_stats_key="") as envs:
        before = pickled_by_workers(envs)
        assert_same(envs.reset(seed=7), ref.reset(seed=7), "reset")
        assert pickled_by_workers(envs) - before == n, "a reset sends each env's observation once"
        rng = np.random.default_rng(1)
        ends = 0
        for t in range(13):
            actions = rng.integers(0, 3, size=n)
            before = pickled_by_workers(envs)
            got, want = envs.step(actions), ref.step(actions)
            sent = pickled_by_workers(envs) - before
            for k, what in enumerate(("obs", "rewards", "terminations", "truncations", "infos")):
                a, b = (got[k], want[k].astype(np.float32)) if what == "rewards" else (got[k], want[k])
                assert_same(a, b, f"step {t}: {what}")
            done = got[2] | got[3]
            ends += int(done.sum())
            # Same-step: the final observation of each row that ended, besides every row's.
            assert sent == n + (int(done.sum()) if mode == "same_step" else 0), f"step {t}: {sent} values sent"
            if mode == "disabled" and done.any():
                before = pickled_by_workers(envs)
                assert_same(envs.reset(options={"reset_mask": done}), ref.reset(options={"reset_mask": done}),
                            f"reset after step {t}")  # fmt: skip
                assert pickled_by_workers(envs) - before == n
        assert ends >= 4
    ref.close()


def test_async_batches_send_each_rows_observation_once(no_leaks):
    n, b = 4, 2
    with shmenv.from_fns(fns(n), num_workers=2, batch_size=b, seed=0, episode_stats_key="") as envs:
        before = pickled_by_workers(envs)
        envs.async_reset()
        ends = 0
        for t in range(12):
            obs, _, term, trunc, infos = envs.recv()
            sent = pickled_by_workers(envs) - before
            assert sent == b, f"batch {t}: {sent} values sent for {b} rows"
            assert len(obs["blob"]) == b
            ends += int(np.sum(term | trunc))
            before = pickled_by_workers(envs)
            envs.send(np.ones(b, dtype=np.int64), infos["env_id"])
        assert ends >= 2
        envs.recv()
