"""shmenv.multiagent.torchrl.MultiAgentShmEnv: TorchRL's multi-agent layout over envs in
shmenv workers, checked against TorchRL's own PettingZooWrapper over the same PettingZoo
envs: the same keys, shapes and dtypes, and the same rollouts from the same seeds.

Needs torch, torchrl and pettingzoo (not installed in CI: torch is several GB); skipped
without."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

pytest.importorskip("torchrl", reason="torchrl (and torch) not installed: pip install torchrl to run these tests")
pytest.importorskip("pettingzoo", reason="pettingzoo is not installed: pip install pettingzoo")

import torch  # noqa: E402
from torchrl.envs.libs.pettingzoo import PettingZooWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

from conftest import wait_gone  # noqa: E402
from shmenv.libs.torchrl_multiagent import MultiAgentShmEnv  # noqa: E402
from shmenv_fixtures.multiagent import Leaving  # noqa: E402

N = 2


def _spread():
    spread = pytest.importorskip("mpe2.simple_spread_v3", reason="mpe2 is not installed: pip install mpe2")
    return functools.partial(spread.parallel_env, N=3, max_cycles=6)


def _wrapper(env, **kwargs) -> PettingZooWrapper:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchRL warns that it was tested with another PettingZoo
        return PettingZooWrapper(env, **kwargs)


def _leaves(spec) -> dict:
    """Spec leaves by key: (shape without the batch dimension, dtype)."""
    return {key: (tuple(leaf.shape[1:]), leaf.dtype) for key, leaf in spec.items(True, True)}


def _rollout(env, actions: torch.Tensor, group: str, seed: int):
    it = iter(actions)

    def policy(td):
        td.set((group, "action"), next(it).clone())
        return td

    env.set_seed(seed)
    return env.rollout(len(actions), policy, break_when_any_done=False, auto_reset=True)


@pytest.mark.timeout(120)
def test_layout_is_pettingzoo_wrappers(no_leaks):
    make = _spread()
    theirs = _wrapper(make())
    with MultiAgentShmEnv(make, N, num_workers=2, seed=0) as ours:
        assert ours.group_map == theirs.group_map == {"agent": ["agent_0", "agent_1", "agent_2"]}
        check_env_specs(ours)
        for name in ("observation_spec", "action_spec", "reward_spec", "full_done_spec"):
            want = {k: (s, d) for k, (s, d) in _leaves(getattr(theirs, name).expand(N)).items()}
            assert _leaves(getattr(ours, name)) == want, name
        pids = ours.envs.worker_pids
    theirs.close()
    assert wait_gone(pids) == []


@pytest.mark.timeout(120)
def test_rollouts_equal_pettingzoo_wrapper(no_leaks):
    make = _spread()
    steps = 14  # 6-step episodes: TorchRL resets each env twice
    actions = torch.from_numpy(np.random.default_rng(5).integers(0, 5, (steps, N, 3)))
    with MultiAgentShmEnv(make, N, num_workers=2) as ours:
        td = _rollout(ours, actions, "agent", seed=30)
    for i in range(N):
        theirs = _wrapper(make(), done_on_any=False)
        ref = _rollout(theirs, actions[:, i], "agent", seed=30 + i)
        theirs.close()
        for key in [("agent", "observation"), ("next", "agent", "observation"), ("next", "agent", "reward"),
                    ("next", "agent", "done"), ("next", "done"), ("next", "truncated")]:
            torch.testing.assert_close(td[i].get(key), ref.get(key), msg=lambda m: f"env {i} {key}: {m}")
    assert td.get(("next", "done")).sum() == 2 * N


@pytest.mark.timeout(120)
def test_agents_that_leave_are_masked_and_stay_done(no_leaks):
    steps = 11
    actions = torch.ones(steps, N, 3, dtype=torch.int64)
    with MultiAgentShmEnv("shmenv_fixtures.multiagent:leaving", N, num_workers=1, use_mask=True) as ours:
        check_env_specs(ours)
        td = _rollout(ours, actions, "walker", seed=2)
    theirs = _wrapper(Leaving(strict=False), use_mask=True, done_on_any=False)
    ref = _rollout(theirs, actions[:, 0], "walker", seed=2)
    theirs.close()
    for key in [("next", "walker", "observation"), ("next", "walker", "reward"), ("next", "walker", "mask"),
                ("next", "walker", "done"), ("next", "done")]:
        torch.testing.assert_close(td[0].get(key), ref.get(key), msg=lambda m: f"{key}: {m}")
    mask = td[0].get(("next", "walker", "mask"))
    assert mask[2].tolist() == [False, True, True] and mask[7].tolist() == [False, False, False]
    done = td[0].get(("next", "walker", "done")).squeeze(-1)
    assert done[5].tolist() == [True, True, False]  # walker_0 and walker_1 have left: they stay done
    # How they left: walker_0 terminated, walker_1 truncated (PettingZooWrapper reports both flags for gone agents).
    assert td[0].get(("next", "walker", "terminated"))[5].squeeze(-1).tolist() == [True, False, False]
    assert td[0].get(("next", "walker", "truncated"))[5].squeeze(-1).tolist() == [False, True, False]


@pytest.mark.timeout(120)
def test_discrete_actions_with_a_start_are_shifted(no_leaks):
    pytest.importorskip("dmlab2d", reason="dmlab2d is not installed (pip install dmlab2d)")
    from shmenv.multiagent.lab2d import Lab2dParallelEnv

    make = functools.partial(Lab2dParallelEnv, "commons_harvest", num_players=2)
    with MultiAgentShmEnv(make, 2, num_workers=1, seed=0) as env:
        # turn is -1..1: TorchRL samples 0..2, the env must get -1..1 (the pool refuses 2).
        td = env.rollout(20, break_when_any_done=False)
        assert td.get(("player", "action"))[..., 1].max() == 2
        assert td.get(("next", "player", "observation", "RGB")).shape == (2, 20, 2, 88, 88, 3)
