"""shmenv.torchrl.ShmEnv: a TorchRL EnvBase over a shmenv pool, checked against
GymWrapper(gymnasium.vector.SyncVectorEnv(...)) and SerialEnv(n, GymEnv) spec by spec and
step for step; with TorchRL's Collector and its multi-process collectors.

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
from shmenv.libs.torchrl import ShmEnv  # noqa: E402

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
    with ShmEnv("CartPole-v1", N, num_workers=2, pool_infos=True) as env:  # infos["elapsed_step"] below
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
        with pytest.raises(ValueError, match="autoreset_mode='same_step' or 'disabled'.*NEXT_STEP"):
            ShmEnv.from_pool(pool)
    with shmenv.make_vec("CartPole-v1", N, num_workers=1, batch_size=2, autoreset_mode="disabled") as pool:
        with pytest.raises(ValueError, match="sync pool"):
            ShmEnv.from_pool(pool)
    with pytest.raises(ValueError, match="autoreset_mode='same_step'.*got autoreset_mode='next_step'"):
        ShmEnv("CartPole-v1", N, autoreset_mode="next_step")
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


def serial_env_seeds(seed: int, n: int) -> list[int]:
    """The seeds SerialEnv.set_seed(seed) gives its n envs: TorchRL chains them, env i + 1
    seeded seed_generator(seed of env i) (not seed + i)."""
    from torchrl._utils import seed_generator

    seeds = [seed]
    for _ in range(n - 1):
        seeds.append(seed_generator(seeds[-1]))
    return seeds


def _gym_env_cartpole():
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env", ["CartPole-v1", gym.spec("CartPole-v1")], ids=["native", "gymnasium"])
def test_rollout_equals_serial_env_from_its_seeds(env):
    """SerialEnv(n, GymEnv) seeds its envs with TorchRL's seed chain; a ShmEnv reset with
    that list of seeds then gives the same 300-step rollout (same actions): observations,
    rewards, done/terminated/truncated, through the partial resets after each episode end."""
    from torchrl.envs import SerialEnv

    ref = SerialEnv(N, _gym_env_cartpole)
    try:
        torch.manual_seed(0)
        actions = torch.stack([ref.action_spec.rand() for _ in range(300)])
        a = rollout_after(ref, actions, lambda e: e.set_seed(123))
        with ShmEnv(env, N, num_workers=2, device="cpu") as shm:
            for key in ("observation_spec", "action_spec", "reward_spec", "done_spec", "state_spec"):
                assert getattr(shm, key) == getattr(ref, key), key
            b = rollout_after(shm, actions, lambda e: e.reset(seed=serial_env_seeds(123, N)))
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert a[key].dtype == b[key].dtype, key
            assert torch.equal(a[key], b[key]), key
        assert a["next", "done"].sum() >= 2 * N  # many episode ends, each followed by a partial reset
        assert not a["next", "truncated"].any()  # random CartPole episodes end by termination
    finally:
        ref.close()


def rollout_after(env, actions: torch.Tensor, seed_fn):
    it = iter(actions)

    def policy(td):
        td.set("action", next(it).clone())
        return td

    seed_fn(env)
    return env.rollout(len(actions), policy, break_when_any_done=False)


@pytest.mark.timeout(60)
def test_pickles_by_its_arguments():
    """As TorchRL's ParallelEnv: pickling closes this one's pool; the unpickled ShmEnv
    builds its own pool (new workers) with the same arguments, so the same seeds."""
    import pickle

    env = ShmEnv("CartPole-v1", N, num_workers=2, seed=3, categorical_action_encoding=True)
    first = env.reset()["observation"]
    pids = list(env.pool.worker_pids)
    blob = pickle.dumps(env)
    assert env.is_closed and not wait_gone(pids, timeout=5.0)
    copy = pickle.loads(blob)
    try:
        assert copy.specs == env.specs and type(copy.action_spec).__name__ == "Categorical"
        assert not set(copy.pool.worker_pids) & set(pids)
        assert torch.equal(copy.reset()["observation"], first)
        assert torch.equal(env.reset()["observation"], first)  # the original reopens when used
    finally:
        copy.close(), env.close()
    with shmenv.make_vec("CartPole-v1", N, num_workers=1, autoreset_mode="disabled") as pool:
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(ShmEnv.from_pool(pool))


MULTI_COLLECTOR_SCRIPT = '''
import functools
import os

import torch
from torchrl.collectors import MultiAsyncCollector, MultiSyncCollector

from shmenv.libs.torchrl import ShmEnv

MARK = ("SHMENV_TEST_MARK=" + os.environ["SHMENV_TEST_MARK"]).encode()


def make_env():
    return ShmEnv("CartPole-v1", 4, num_workers=1, seed=0)


def marked_workers():
    """shmenv workers started under this script (they inherit its marker): pid -> parent pid."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if MARK in environ and b"shmenv.worker" in cmdline:
            out[int(pid)] = ppid
    return out


def collect(name, collector):
    procs = sorted(p.pid for p in collector.procs)
    frames, workers = 0, {}
    for batch in collector:
        frames += batch.numel()
        assert torch.isfinite(batch["next", "observation"]).all()
        workers.update(marked_workers())
    collector.shutdown()
    parents = sorted(set(workers.values()))
    print(name, "frames", frames, "workers", len(workers), "in", "collectors" if parents == procs else parents, flush=True)


if __name__ == "__main__":
    # functions that build a ShmEnv in each collector process
    collector = MultiSyncCollector([make_env, make_env], None, frames_per_batch=128, total_frames=1024)
    collector.set_seed(0)
    collect("sync", collector)
    # a ShmEnv instance (pickled by its arguments: the collector process builds the pool) and a partial
    env = ShmEnv("CartPole-v1", 4, num_workers=1, seed=0)
    collector = MultiAsyncCollector(
        [env, functools.partial(ShmEnv, "CartPole-v1", 4, num_workers=1, seed=1)],
        None, frames_per_batch=64, total_frames=512,
    )
    print("instance closed in the trainer", env.is_closed, flush=True)
    collect("async", collector)
    print("left", sorted(marked_workers()), flush=True)
'''


@pytest.mark.timeout(420)
def test_multi_process_collectors_build_a_pool_in_each_collector(tmp_path):
    """MultiSyncCollector and MultiAsyncCollector (TorchRL starts collector processes with
    spawn, hence the main guard) with ShmEnv makers and a ShmEnv instance: every frame
    arrives, each collector process runs its own pool, and no worker outlives the script."""
    import os
    import subprocess
    import sys
    import uuid

    script = tmp_path / "train.py"
    script.write_text(MULTI_COLLECTOR_SCRIPT)
    mark = uuid.uuid4().hex
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(script)], cwd=tmp_path, capture_output=True, text=True,
        timeout=400, env={**os.environ, "SHMENV_TEST_MARK": mark},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "sync frames 1024 workers 2 in collectors" in out, out
    assert "async frames 512 workers 2 in collectors" in out, out
    assert "instance closed in the trainer True" in out, out
    assert "left []" in out, out
    leftover = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"SHMENV_TEST_MARK={mark}".encode() in f.read().split(b"\0") and alive(int(pid)):
                    leftover.append(int(pid))
        except OSError:
            continue
    assert not leftover, f"processes of the script left after it exited: {leftover}"
