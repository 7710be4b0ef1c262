"""Sub-env infos whose user keys clash with the names Gymnasium's vector envs use for
their own infos (``final_info``): they come back as ``SyncVectorEnv`` returns them, with
real worker processes, whichever path each value takes (numbers through the shared info
columns, strings pickled over the call channel)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import shmenv
from test_infos import assert_vector_infos_equal

pytestmark = pytest.mark.timeout(90)

ENTRY = "shmenv_fixtures.edge_infos:FinalInfoKeyEnv"


def _without_int_keys(infos: dict) -> dict:
    """``SyncVectorEnv``'s same-step infos with the integer keys its ``_add_info`` writes
    into ``infos["final_info"]`` when a reset info has a ``"final_info"`` key of its own
    (it indexes the dict as if it were an array): an artefact of the clash, left out."""
    out = dict(infos)
    if isinstance(out.get("final_info"), dict):
        out["final_info"] = {k: v for k, v in out["final_info"].items() if isinstance(k, str)}
    return out


@pytest.mark.parametrize("mode", ["next_step", "disabled", "same_step"])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_numeric_final_info_key_with_other_keys_comes_back_as_sync_vector_env_gives_it(mode, num_workers, no_leaks):
    from shmenv_fixtures.edge_infos import FinalInfoKeyEnv

    n = 4
    enum = {"next_step": gym.vector.AutoresetMode.NEXT_STEP, "disabled": gym.vector.AutoresetMode.DISABLED,
            "same_step": gym.vector.AutoresetMode.SAME_STEP}[mode]  # fmt: skip
    # Episodes of 3 and 4 steps: some batches mix rows that ended with rows that did not.
    # Not under same-step autoreset, where SyncVectorEnv itself mixes the clashing key's
    # values and masks into its ``final_info`` dict on such batches: there every episode
    # has 3 steps.
    lengths = [3 if mode == "same_step" else 3 + i % 2 for i in range(n)]
    fns = [lambda length=length: FinalInfoKeyEnv(length=length) for length in lengths]
    ref = gym.vector.SyncVectorEnv(fns, autoreset_mode=enum)
    with shmenv.from_fns(fns, num_workers=num_workers, autoreset_mode=mode) as envs:
        _, infos = envs.reset(seed=4)
        _, r_infos = ref.reset(seed=4)
        assert_vector_infos_equal(infos, r_infos, "reset")
        assert infos["final_info"].dtype == np.float64 and infos["name"].dtype == object
        rng = np.random.default_rng(0)
        for t in range(14):
            actions = rng.integers(0, 3, size=n)
            _, _, term, trunc, infos = envs.step(actions)
            _, _, r_term, r_trunc, r_infos = ref.step(actions)
            np.testing.assert_array_equal(term | trunc, r_term | r_trunc)
            assert_vector_infos_equal(infos, _without_int_keys(r_infos), f"step {t}")
            done = term | trunc
            if mode == "disabled" and done.any():
                _, infos = envs.reset(options={"reset_mask": done})
                _, r_infos = ref.reset(options={"reset_mask": done})
                assert_vector_infos_equal(infos, r_infos, f"reset after step {t}")
    ref.close()
