"""``python -m shmenv.bench.torchrl``: a round times ``--frames`` frames per env (the
contenders' real Collectors over real envs), and the report names every contender with its
ratios and its per-batch split. Needs torch and torchrl; skipped without."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("torchrl", reason="torchrl (and torch) not installed: pip install torchrl to run the TorchRL tests")


@pytest.mark.timeout(240)
def test_a_round_times_frames_per_env_and_the_report_splits_every_batch():
    envs, frames, batch, rounds = 4, 64, 32, 2
    out = subprocess.run(
        [sys.executable, "-m", "shmenv.bench.torchrl", "--workload", "cartpole", "--core"]
        + ["--envs", str(envs), "--frames", str(frames), "--batch", str(batch), "--rounds", str(rounds)]
        + ["--torch-threads", "1"],
        capture_output=True,
        text=True,
        timeout=200,
        check=True,
    ).stdout
    assert f"{envs} envs: median of {rounds} rounds, {frames} frames per env" in out
    rounds_seen = re.findall(r"^round (\d+): +[\d,]+ frames/s  (.+?)  \(setup", out, re.M)
    contenders = {name for _, name in rounds_seen}
    assert any(name.startswith("ShmEnv('CartPole-v1'") for name in contenders), out
    assert any(name.startswith("SerialEnv(") for name in contenders), out
    assert len(rounds_seen) == rounds * len(contenders)
    # Every timed batch of every round is split: frames * envs / batch of them per round.
    per_round = frames * envs // batch
    splits = re.findall(r"per batch \(median of (\d+)\): engine calls [\d.]+ ms", out)
    assert splits and all(int(n) == rounds * per_round for n in splits), out
    assert re.search(r"\d\.\d\dx \(per-round median \d\.\d\dx\)  ShmEnv\('CartPole-v1'.* / SerialEnv\(", out), out
