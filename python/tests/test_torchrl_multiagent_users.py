"""shmenv.multiagent.torchrl.MultiAgentShmEnv the way TorchRL users hand envs around: used
again after a Collector closed it, pickled, and given as an instance to MultiSyncCollector
under the spawn and fork start methods (as PettingZooWrapper and SerialEnv(PettingZooWrapper)
are).

Needs torch, torchrl, pettingzoo and mpe2; skipped without."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest

pytest.importorskip("torchrl", reason="torchrl (and torch) not installed: pip install torchrl to run these tests")
pytest.importorskip("pettingzoo", reason="pettingzoo is not installed: pip install pettingzoo")
spread = pytest.importorskip("mpe2.simple_spread_v3", reason="mpe2 is not installed: pip install mpe2")

import torch  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402

from conftest import wait_gone  # noqa: E402
from shmenv.multiagent.torchrl import MultiAgentShmEnv  # noqa: E402

CONFIG = {"N": 3, "max_cycles": 10}


@pytest.mark.timeout(120)
def test_used_again_after_a_collector_closed_it():
    """A Collector closes its env after total_frames; the next rollout builds new workers
    (same arguments, so the same first observations), as PettingZooWrapper goes on."""
    env = MultiAgentShmEnv("mpe2.simple_spread_v3", 2, num_workers=1, seed=0, config=CONFIG)
    first = env.reset()["agent", "observation"].clone()
    pids = list(env.envs.worker_pids)
    collector = Collector(env, None, frames_per_batch=20, total_frames=40)
    frames = sum(batch.numel() for batch in collector)
    collector.shutdown()
    assert frames == 40 and env.is_closed
    try:
        td = env.rollout(5)
        assert td["next", "agent", "reward"].shape == (2, 5, 3, 1)
        assert torch.equal(td["agent", "observation"][:, 0], first)  # the new pool's first reset: seed 0 again
        assert not wait_gone(pids, timeout=5.0) and not set(env.envs.worker_pids) & set(pids)
    finally:
        env.close()


@pytest.mark.timeout(120)
def test_pickles_by_its_arguments():
    """Pickled (TorchRL pickles env instances into spawned collector processes): the copy
    builds its own workers from the arguments (a PettingZoo parallel_env, a local function,
    travels by value); the original closes its own, as a pickled ParallelEnv does, and
    reopens when used."""
    env = MultiAgentShmEnv(lambda: spread.parallel_env(**CONFIG), 2, num_workers=1, seed=3, categorical_actions=False)
    first = env.reset()["agent", "observation"].clone()
    blob = pickle.dumps(env)
    assert env.is_closed
    copy = pickle.loads(blob)
    try:
        assert copy.specs == env.specs and copy.categorical_actions is False
        assert torch.equal(copy.reset()["agent", "observation"], first)
        assert torch.equal(env.reset()["agent", "observation"], first)
    finally:
        copy.close(), env.close()


@pytest.mark.timeout(120)
def test_evaluation_rollout_between_collector_batches():
    """An evaluation rollout on the training env between collector batches stops at the
    first env done and leaves it done; the collector's next step resets it first and goes on."""
    env = MultiAgentShmEnv(
        "mpe2.simple_spread_v3", 3, num_workers=1, seed=0, config={"N": 3, "max_cycles": 7}, done_on_any=True
    )
    collector = Collector(env, None, frames_per_batch=3 * 5, total_frames=3 * 5 * 4)
    frames = 0
    for batch in collector:
        frames += batch.numel()
        evaluation = env.rollout(100)
        assert evaluation["next", "done"][:, -1].any()
    collector.shutdown()
    assert frames == 3 * 5 * 4
    env.close()


SCRIPT = """
import functools
import multiprocessing as mp
import sys

import mpe2.simple_spread_v3 as spread
from torchrl.collectors import MultiSyncCollector

from shmenv.multiagent.torchrl import MultiAgentShmEnv

if __name__ == "__main__":
    mp.set_start_method(sys.argv[1], force=True)
    envs = [MultiAgentShmEnv(functools.partial(spread.parallel_env, N=3, max_cycles=10), 2, num_workers=1, seed=s)
            for s in (0, 7)]
    for env in envs:
        env.rollout(3)
    collector = MultiSyncCollector(envs, None, frames_per_batch=40, total_frames=160)
    frames = 0
    for batch in collector:
        frames += batch.numel()
        assert batch["next", "agent", "reward"].shape[-2:] == (3, 1)
    collector.shutdown()
    print("frames", frames, flush=True)
    print("trainer", [tuple(env.rollout(3).shape) for env in envs], flush=True)
    for env in envs:
        env.close()
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_instances_in_multi_sync_collector(tmp_path, start_method):
    """MultiSyncCollector([MultiAgentShmEnv(...), ...]) under spawn (instances pickled by
    their arguments) and fork (the forked collector builds its own workers): every frame
    arrives and the trainer's envs still run after."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(script), start_method],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "frames 160" in proc.stdout, proc.stdout
    assert "trainer [(2, 3), (2, 3)]" in proc.stdout, proc.stdout
