"""shmenv.torchrl.ShmEnv run the way TorchRL's tutorials write their loops: an evaluation
rollout between collector batches, rollouts that hold back done envs with '_step' masks,
env instances in multi-process collectors under the fork start method, and Atari ids with
GymEnv's "pixels" key. Compared with SerialEnv(n, GymEnv) and GymEnv where they apply.

Needs torch and torchrl; skipped without."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

pytest.importorskip("torchrl", reason="torchrl (and torch) not installed: pip install torchrl to run the TorchRL tests")
import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import GymEnv, SerialEnv  # noqa: E402

import shmenv  # noqa: E402
from conftest import alive  # noqa: E402
from shmenv.torchrl import ShmEnv  # noqa: E402

N = 4


def serial_env_seeds(seed: int, n: int) -> list[int]:
    """The seeds SerialEnv.set_seed(seed) gives its n envs (TorchRL's seed chain)."""
    from torchrl._utils import seed_generator

    seeds = [seed]
    for _ in range(n - 1):
        seeds.append(seed_generator(seeds[-1]))
    return seeds


def lean_policy(td):
    """A deterministic CartPole policy of the observation (push toward the pole's lean, or
    away from it for envs with odd cart positions): the same observations give the same
    actions in both envs, and episodes of many lengths."""
    obs = td["observation"]
    push = (obs[..., 2] > 0) ^ (obs[..., 0] > 0.02)
    td.set("action", torch.nn.functional.one_hot(push.long(), 2).bool())
    return td


@pytest.mark.timeout(120)
def test_evaluation_rollout_between_collector_batches():
    """coding_ppo.py's loop: `for batch in collector: ...; env.rollout(1000, policy)` on the
    training env. The rollout stops at the first env done and leaves it done; the next batch
    goes on (that env is reset before it is stepped), every batch full."""
    env = ShmEnv("CartPole-v1", N, num_workers=2, seed=0)
    collector = Collector(env, lean_policy, frames_per_batch=N * 16, total_frames=N * 16 * 5)
    frames, evaluations = 0, 0
    for batch in collector:
        frames += batch.numel()
        assert not batch["next", "observation"].isnan().any()
        with torch.no_grad():
            evaluation = env.rollout(1000, lean_policy)
        assert evaluation["next", "done"][:, -1].any()  # it stopped with some env left done
        evaluations += 1
    collector.shutdown()
    assert (frames, evaluations) == (N * 16 * 5, 5)
    env.close()


@pytest.mark.timeout(120)
def test_an_env_left_done_is_reset_when_next_stepped():
    """After a rollout left envs done, a step from TorchRL resets them first: the step's
    results equal an explicit '_reset' of those envs followed by the same step."""
    results = []
    for explicit in (False, True):
        with ShmEnv("CartPole-v1", N, num_workers=2, seed=5) as env:
            left = env.rollout(1000, lean_policy)
            done = left["next", "done"][:, -1].reshape(N)
            assert done.any() and not done.all()
            # the collector's view, and its actions (chosen from the observations it holds)
            td = lean_policy(left[:, -1]["next"].exclude("done", "terminated", "truncated"))
            if explicit:
                reset = env.reset(env.full_done_spec.zero().set("_reset", done.view(N, 1)))
                td["observation"] = torch.where(done.view(N, 1), reset["observation"], td["observation"])
            results.append((done, env.step(td)["next"].clone()))
    (done_a, a), (done_b, b) = results
    assert torch.equal(done_a, done_b)
    for key in ("observation", "reward", "done", "terminated", "truncated"):
        assert torch.equal(a[key], b[key]), key


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env_id", ["CartPole-v1", gym.spec("CartPole-v1")], ids=["native", "gymnasium"])
def test_rollout_until_all_done_equals_serial_env(env_id):
    """env.rollout(500, break_when_any_done=False, break_when_all_done=True): TorchRL steps
    only the envs not done yet ('_step' masks); the others keep their last values. Same
    shape and same values, step for step, as SerialEnv(n, GymEnv) from the same seeds."""
    ref = SerialEnv(N, lambda: GymEnv("CartPole-v1"))
    try:
        ref.set_seed(123)
        a = ref.rollout(500, lean_policy, break_when_any_done=False, break_when_all_done=True)
    finally:
        ref.close()
    with ShmEnv(env_id, N, num_workers=2) as env:
        env.reset(seed=serial_env_seeds(123, N))
        b = env.rollout(500, lean_policy, break_when_any_done=False, break_when_all_done=True)
        after = env.rollout(20, lean_policy, break_when_any_done=False)  # the pool goes on
    assert a.shape == b.shape and a.shape[1] > 10
    assert a["next", "done"][:, -1].all() and not a["next", "done"][:, 0].all()
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a[key], b[key]), key
    assert after.shape == (N, 20)


@pytest.mark.timeout(60)
def test_a_step_mask_holding_back_a_running_env_is_refused():
    """The pool steps every env at once: a '_step' mask may hold back only done envs."""
    with ShmEnv("CartPole-v1", N, num_workers=2, seed=0) as env:
        td = env.rand_action(env.reset())
        td["_step"] = torch.tensor([True, False, True, True])
        with pytest.raises(shmenv.UsageError, match=r"leaves out envs \[1\] that are not done"):
            env.step(td)
        out = env.rand_step(env.reset())  # still usable
        assert out["next", "observation"].shape == (N, 4)


FORK_SCRIPT = '''
import multiprocessing as mp
import os
import sys

import torch
from torchrl.collectors import MultiAsyncCollector, MultiSyncCollector

from shmenv.torchrl import ShmEnv

MARK = ("SHMENV_TEST_MARK=" + os.environ["SHMENV_TEST_MARK"]).encode()


def marked_workers():
    """shmenv workers started under this script: pid -> parent pid."""
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


if __name__ == "__main__":
    mp.set_start_method("fork", force=True)        # as coding_ppo.py users do
    envs = [ShmEnv("CartPole-v1", 4, num_workers=1, seed=s) for s in (0, 10)]
    for env in envs:
        env.rollout(5)                               # the trainer's pools are in use before the fork
    mine = set(marked_workers())
    for kind in (MultiSyncCollector, MultiAsyncCollector):
        collector = kind(envs, None, frames_per_batch=128, total_frames=512)
        procs = sorted(p.pid for p in collector.procs)
        frames, workers = 0, {}
        for batch in collector:
            frames += batch.numel()
            assert torch.isfinite(batch["next", "observation"]).all()
            workers.update({p: q for p, q in marked_workers().items() if p not in mine})
        collector.shutdown()
        parents = sorted(set(workers.values()))
        print(kind.__name__, "frames", frames, "workers", len(workers),
              "in", "collectors" if parents == procs else parents, flush=True)
    print("trainer", [tuple(env.rollout(5).shape) for env in envs], flush=True)
    for env in envs:
        env.close()
    print("left", sorted(marked_workers()), flush=True)
'''


@pytest.mark.timeout(300)
def test_instances_in_multi_process_collectors_under_fork(tmp_path):
    """A ShmEnv instance given to MultiSyncCollector/MultiAsyncCollector under the fork start
    method: each forked collector builds its own pool from the construction arguments (the
    trainer's pool stays the trainer's, usable after), every frame arrives, no process is
    left once the script exits."""
    script = tmp_path / "train.py"
    script.write_text(FORK_SCRIPT)
    mark = uuid.uuid4().hex
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "SHMENV_TEST_MARK": mark},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "MultiSyncCollector frames 512 workers 2 in collectors" in out, out
    assert "MultiAsyncCollector frames 512 workers 2 in collectors" in out, out
    assert "trainer [(4, 5), (4, 5)]" in out, out
    assert "left []" in out, out
    assert not _marked(mark), "processes of the script left after it exited"


def _marked(mark: str) -> list[int]:
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"SHMENV_TEST_MARK={mark}".encode() in f.read().split(b"\0") and alive(int(pid)):
                    left.append(int(pid))
        except OSError:
            continue
    return left


@pytest.mark.timeout(60)
def test_a_wrapped_pool_in_a_forked_process_is_refused_with_the_fix():
    """A ShmEnv over the caller's pool cannot rebuild it in a fork: the error says so."""
    with shmenv.make_vec("CartPole-v1", N, num_workers=1, autoreset_mode="disabled") as pool:
        env = ShmEnv.from_pool(pool)
        env.reset()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                env.reset()
            except shmenv.UsageError as e:
                code = 0 if "a fork of it" in str(e) and "ShmEnv(env, num_envs" in str(e) else 4
            except BaseException:
                code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert env.rand_step(env.reset())["next", "observation"].shape == (N, 4)  # the parent's still works


ALE_SCRIPT = """
import sys
import shmenv
from shmenv.torchrl import ShmEnv
assert "ale_py" not in sys.modules
env = ShmEnv("ALE/Pong-v5", 2, num_workers=1, seed=0)
assert "ale_py" in sys.modules
print("keys", sorted(env.observation_spec.keys()))
from torchrl.envs import GymEnv, TransformedEnv, Compose, ToTensorImage, GrayScale, CatFrames
ref = GymEnv("ALE/Pong-v5")
print("same spec", env.observation_spec["pixels"] == ref.observation_spec["pixels"].expand(2, *ref.observation_spec["pixels"].shape))
print("same actions", env.action_spec == ref.action_spec.expand(2, *ref.action_spec.shape))
t = TransformedEnv(env, Compose(ToTensorImage(), GrayScale(), CatFrames(4, dim=-3)))  # TorchRL's pixel transforms read "pixels"
print("pixels", tuple(t.rollout(3)["pixels"].shape))
env.close(); ref.close()
vec = shmenv.make_vec("ALE/Breakout-v5", 2, num_workers=1)
print("make_vec", vec.single_observation_space.shape)
vec.close()
"""


@pytest.mark.timeout(180)
def test_atari_ids_as_gym_env_gives_them(tmp_path):
    """ShmEnv("ALE/Pong-v5", n) in a fresh interpreter imports ale_py as GymEnv does (so does
    make_vec), keys the frames "pixels" with GymEnv's spec, and TorchRL's pixel transforms
    run over it."""
    pytest.importorskip("ale_py", reason="ale-py is not installed: pip install ale-py")
    script = tmp_path / "pong.py"
    script.write_text(ALE_SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=170
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "keys ['pixels']" in out, out
    assert "same spec True" in out and "same actions True" in out, out
    assert "pixels (2, 3, 4, 210, 160)" in out, out
    assert "make_vec (210, 160, 3)" in out, out
