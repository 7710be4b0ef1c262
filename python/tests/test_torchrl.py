"""shmenv.torchrl.ShmEnv: a TorchRL EnvBase over a shmenv pool, checked against
GymWrapper(gymnasium.vector.SyncVectorEnv(...)) spec by spec and step for step.

Needs torch and torchrl (not installed in CI: torch alone is several GB); skipped without."""

from __future__ import annotations

import gc

import numpy as np
import pytest

torchrl = pytest.importorskip(
    "torchrl", reason="torchrl (and torch) not installed: pip install torchrl to run the TorchRL tests"
)
import torch  # noqa: E402

import gymnasium as gym  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.envs import GymWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

import shmenv  # noqa: E402
from shmenv.torchrl import ShmEnv  # noqa: E402

from conftest import alive, children, wait_gone  # noqa: E402

N = 4  # envs per pool: the machine running the tests may have 2 cores


def gym_wrapper(env_id: str, n: int = N, **kwargs) -> GymWrapper:
    """TorchRL's own route: GymWrapper over Gymnasium's SyncVectorEnv, autoreset disabled."""
    venv = SyncVectorEnv([lambda: gym.make(env_id) for _ in range(n)], autoreset_mode=AutoresetMode.DISABLED)
    return GymWrapper(venv, **kwargs)


def seeded_rollout(env, actions: torch.Tensor, seed: int):
    """set_seed then a rollout of len(actions) steps with those actions, not stopping at
    done: ended envs are reset through TorchRL's '_reset' masks (partial resets)."""
    it = iter(actions)

    def policy(td):
        td.set("action", next(it).clone())
        return td

    env.set_seed(seed)
    return env.rollout(len(actions), policy, break_when_any_done=False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_check_env_specs(env_id):
    with ShmEnv(env_id, N, num_workers=2, seed=0) as env:
        assert env.batch_size == torch.Size([N])
        check_env_specs(env)
        td = env.rollout(10)
        assert td.batch_size[0] == N


@pytest.mark.timeout(60)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("categorical", [False, True])
def test_specs_equal_gym_wrapper(env_id, categorical):
    ref = gym_wrapper(env_id, categorical_action_encoding=categorical)
    with ShmEnv(env_id, N, num_workers=2, categorical_action_encoding=categorical) as env:
        assert env.specs == ref.specs, (env.specs, ref.specs)
        assert env.batch_size == ref.batch_size
        assert env.device == ref.device
        if env_id == "CartPole-v1":
            # Discrete(2): OneHot of shape [N, 2] by default, Categorical [N] when asked.
            kind = torchrl.data.Categorical if categorical else torchrl.data.OneHot
            assert type(env.action_spec) is kind
            assert env.action_spec.shape == ((N,) if categorical else (N, 2))
    ref.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("categorical", [False, True])
def test_discrete_observation_specs_and_steps(categorical):
    """FrozenLake (Discrete observations and actions, a hosted Python env): observations
    are OneHot (or Categorical) as in GymWrapper, and a seeded rollout matches."""
    spec = gym.spec("FrozenLake-v1")
    ref = gym_wrapper("FrozenLake-v1", categorical_action_encoding=categorical)
    with ShmEnv(spec, N, num_workers=1, categorical_action_encoding=categorical) as env:
        assert env.specs == ref.specs
        torch.manual_seed(3)
        actions = torch.stack([ref.action_spec.rand() for _ in range(60)])
        a = seeded_rollout(ref, actions, seed=11)
        b = seeded_rollout(env, actions, seed=11)
        assert (a["next", "done"]).any()  # resets happened in the middle
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
    ref.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "obs, action",
    [("box_f64", "multi_binary"), ("box_i8", "box_f16"), ("multi_binary_2d", "multi_binary_2d"), ("box_bool", "box_bool")],
)
def test_other_spaces_match_gym_wrapper(obs, action):
    """Box observations of several dtypes, MultiBinary and float16/bool Box actions (the
    spaces fixture env, hosted in the workers): specs and a seeded rollout with episode
    ends equal GymWrapper's over SyncVectorEnv, in both action encodings."""
    import functools

    from shmenv_fixtures.spaces import SpacesEnv

    make = functools.partial(SpacesEnv, obs=obs, action=action, length=5)
    for categorical in (False, True):
        ref = GymWrapper(
            SyncVectorEnv([make] * N, autoreset_mode=AutoresetMode.DISABLED),
            categorical_action_encoding=categorical,
        )
        with ShmEnv(make, N, num_workers=1, categorical_action_encoding=categorical) as env:
            assert env.specs == ref.specs
            torch.manual_seed(0)
            actions = torch.stack([ref.action_spec.rand() for _ in range(12)])
            a = seeded_rollout(ref, actions, seed=4)
            b = seeded_rollout(env, actions, seed=4)
            assert a["next", "done"].sum() == 2 * N  # two episodes of 5 steps each
            for key in a.keys(True, True):
                assert torch.equal(a[key], b[key]), key
        ref.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_seeded_rollout_equals_gym_wrapper(env_id):
    """200 steps from the same seed and the same (seeded random) actions: every
    observation, reward and done flag equals GymWrapper(SyncVectorEnv)'s. set_seed(s)
    seeds env i with s + i in both; ended envs are reset by TorchRL's '_reset' masks."""
    ref = gym_wrapper(env_id)
    with ShmEnv(env_id, N, num_workers=2) as env:
        torch.manual_seed(0)
        actions = torch.stack([ref.action_spec.rand() for _ in range(200)])
        a = seeded_rollout(ref, actions, seed=123)
        b = seeded_rollout(env, actions, seed=123)
        assert a.batch_size == b.batch_size == torch.Size([N, 200])
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert a[key].dtype == b[key].dtype, key
            assert torch.equal(a[key], b[key]), key
        assert a["next", "done"].sum() >= N  # episodes ended (CartPole: many partial resets)
        # A different seed gives a different trajectory.
        c = seeded_rollout(env, actions[:5], seed=124)
        assert not torch.equal(c["observation"][:, 0], b["observation"][:, 0])
    ref.close()


@pytest.mark.timeout(60)
def test_partial_reset_mask():
    """A '_reset' mask resets only the masked envs, through the pool's partial reset; the
    others keep their observation. Same result as GymWrapper over SyncVectorEnv."""
    ref = gym_wrapper("CartPole-v1")
    with ShmEnv("CartPole-v1", N, num_workers=2) as env:
        results = []
        for e in (ref, env):
            e.set_seed(5)
            td = e.reset()
            right = torch.nn.functional.one_hot(torch.ones(N, dtype=torch.int64), 2)
            for _ in range(3):
                td = e.step(td.set("action", right))["next"].clone()
            before = td["observation"].clone()
            mask = torch.tensor([True, False, True, False]).view(N, 1)
            td.set("_reset", mask)
            for key in ("done", "terminated", "truncated"):
                td.set(key, torch.zeros(N, 1, dtype=torch.bool))
            out = e.reset(td)
            obs = out["observation"]
            # untouched rows keep their observation; reset rows start anew (|x| <= 0.05)
            assert torch.equal(obs[~mask.view(N)], before[~mask.view(N)])
            assert not torch.equal(obs[mask.view(N)], before[mask.view(N)])
            assert obs[mask.view(N)].abs().max() <= 0.05
            assert not out["done"].any()
            results.append(obs.clone())
            # the envs step on from there
            e.step(out.set("action", right))
        assert torch.equal(results[0], results[1])
        # The pool itself saw a partial reset: masked envs are at step 0, the others at 3.
        _, _, _, _, infos = env.pool.step(np.zeros(N, dtype=np.int64))
        np.testing.assert_array_equal(infos["elapsed_step"], [2, 5, 2, 5])
    ref.close()


@pytest.mark.timeout(120)
def test_collector_collects_the_right_number_of_frames():
    from torchrl.collectors import Collector

    with ShmEnv("CartPole-v1", 8, num_workers=2, seed=0) as env:
        collector = Collector(env, None, frames_per_batch=256, total_frames=3072)
        batches = frames = dones = 0
        for batch in collector:
            assert batch.numel() == 256
            assert batch.batch_size == torch.Size([8, 32])
            batches += 1
            frames += batch.numel()
            dones += int(batch["next", "done"].sum())
            # observations after a done continue from a reset state, never NaN
            assert torch.isfinite(batch["next", "observation"]).all()
        assert (batches, frames) == (12, 3072)
        assert dones > 20  # random CartPole episodes last ~22 steps: many partial resets
        # The Collector closed the env after total_frames; the ShmEnv built its pool, so it
        # starts a new one when used again (as ParallelEnv does), e.g. for an evaluation.
        assert env.is_closed
        old_pids = list(env.pool.worker_pids)
        td = env.rollout(20)
        assert not env.is_closed and td.batch_size[0] == 8
        assert not set(old_pids) & set(env.pool.worker_pids)
        assert not wait_gone(old_pids, timeout=5.0)
        collector.shutdown()


@pytest.mark.timeout(60)
def test_wrap_existing_pool():
    pool = shmenv.make_vec("CartPole-v1", N, num_workers=2, seed=7, autoreset_mode="disabled")
    env = ShmEnv.from_pool(pool, categorical_action_encoding=True)
    assert env.pool is pool
    check_env_specs(env)
    td = env.rollout(50, break_when_any_done=False)
    assert td.batch_size == torch.Size([N, 50])
    assert td["action"].dtype == torch.int64 and td["action"].shape == (N, 50)
    env.close()
    assert pool.closed
    with pytest.raises(shmenv.errors.ClosedError):
        env.reset()
    # A wrapper that is garbage-collected leaves the caller's pool open.
    pool = shmenv.make_vec("CartPole-v1", N, num_workers=1, autoreset_mode="disabled")
    ShmEnv(pool=pool).reset()
    gc.collect()
    assert not pool.closed
    pool.reset()
    pool.close()


@pytest.mark.timeout(60)
def test_refuses_pools_it_cannot_drive():
    with shmenv.make_vec("CartPole-v1", N, num_workers=1) as pool:  # next_step autoreset
        with pytest.raises(ValueError, match="autoreset_mode='disabled'"):
            ShmEnv.from_pool(pool)
    with shmenv.make_vec("CartPole-v1", N, num_workers=1, batch_size=2, autoreset_mode="disabled") as pool:
        with pytest.raises(ValueError, match="sync pool"):
            ShmEnv.from_pool(pool)
    with pytest.raises(ValueError, match="autoreset_mode='disabled'"):
        ShmEnv("CartPole-v1", N, autoreset_mode="same_step")
    with pytest.raises(TypeError):
        ShmEnv.from_pool(gym.make("CartPole-v1"))


@pytest.mark.timeout(60)
def test_zero_copy_pool_observations_are_copied():
    """With copy=False the pool hands out views that later steps overwrite; ShmEnv copies
    them once, so a rollout equals the default pool's."""
    torch.manual_seed(1)
    actions = torch.nn.functional.one_hot(torch.randint(0, 2, (60, N)), 2)
    with ShmEnv("CartPole-v1", N, num_workers=2) as env:
        a = seeded_rollout(env, actions, seed=3)
    with ShmEnv("CartPole-v1", N, num_workers=2, copy=False) as env:
        b = seeded_rollout(env, actions, seed=3)
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key


@pytest.mark.timeout(60)
def test_default_tensors_share_the_returned_arrays():
    """With the default pool the observation tensor is torch.from_numpy over the array the
    pool returned (no second copy), and writable."""
    with ShmEnv("CartPole-v1", N, num_workers=1, seed=0) as env:
        td = env.reset()
        obs = td["observation"]
        assert obs.is_contiguous() and obs.dtype == torch.float32
        obs += 1.0  # the caller's to modify
        td = env.rand_step(td)
        assert torch.isfinite(td["next", "observation"]).all()


@pytest.mark.timeout(60)
def test_close_leaves_no_worker_process():
    before = children()
    env = ShmEnv("CartPole-v1", N, num_workers=2, seed=0)
    pids = list(env.pool.worker_pids)
    assert len(pids) == 2 and all(alive(p) for p in pids)
    assert set(pids) <= children()
    env.rollout(20)
    env.close()
    assert env.is_closed
    assert not wait_gone(pids, timeout=5.0), f"workers left alive: {pids}"
    gc.collect()
    extra = children() - before
    assert not extra, f"child processes left behind (zombies included): {extra}"


@pytest.mark.timeout(60)
def test_rollout_and_reset_with_tensordict_keys():
    """reset(seed=...) reaches the pool; rollout with a TensorDictModule policy."""
    from tensordict.nn import TensorDictModule

    with ShmEnv("Pendulum-v1", N, num_workers=2) as env:
        first = env.reset(seed=9)["observation"]
        again = env.reset(seed=9)["observation"]
        assert torch.equal(first, again)
        policy = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
        with torch.no_grad():
            td = env.rollout(30, policy)
        assert td.batch_size == torch.Size([N, 30])
        assert isinstance(td, TensorDict)


NO_GUARD_SCRIPT = """
import shmenv.torchrl
from torchrl.collectors import Collector

print("script body", flush=True)
env = shmenv.torchrl.ShmEnv("CartPole-v1", 4, num_workers=2, seed=0)
collector = Collector(env, None, frames_per_batch=64, total_frames=256)
print("frames", sum(batch.numel() for batch in collector), flush=True)
collector.shutdown()
"""


@pytest.mark.timeout(120)
def test_script_without_main_guard(tmp_path):
    """A training script without `if __name__ == "__main__":` runs a Collector over a
    ShmEnv once: shmenv's workers are exec'd programs that never re-import the script."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(NO_GUARD_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=100
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("script body") == 1, proc.stdout
    assert "frames 256" in proc.stdout, proc.stdout
