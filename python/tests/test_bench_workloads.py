"""``python -m shmenv.bench --workload`` in miniature, one smoke per workload with real
packages (Atari: ``ale-py`` and OpenCV for Gymnasium's AtariPreprocessing; MuJoCo:
``gymnasium[mujoco]``, and the native plugin built against the ``mujoco`` wheel); each is
skipped with a message when its packages are not installed. The hosted Atari env also steps
as SyncVectorEnv does, frames and `lives` infos included."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shmenv.bench.__main__ import main as bench_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--passes", "1", "--rounds", "1", "--round-seconds", "0.05", "--json"]

pytestmark = pytest.mark.timeout(240)


def run_lines(capsys, *args: str) -> list[dict]:
    assert bench_main(["--workload", *args, *TINY]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def by_system(rows: list[dict]) -> dict[tuple[str, int], dict]:
    for r in rows:
        for key in ("workload", "system", "num_envs", "batch_size", "steps_per_sec"):
            assert key in r, f"{key} missing from {r}"
    return {(r["system"], r["batch_size"]): r for r in rows}


def test_classic_rows_ideal_and_trainer_time(capsys):
    rows = by_system(run_lines(capsys, "classic", "--num-envs", "4", "--workers", "1", "--only", "single,shmenv,ale"))
    single, shm = rows["single", 1], rows["shmenv", 4]
    assert single["steps_per_sec"] > 0 and single["fraction_of_ideal"] == 1.0
    assert shm["steps_per_sec"] > 0 and shm["ideal_steps_per_sec"] == single["steps_per_sec"]
    assert shm["trainer_rss_kib"] > 0 and shm["worker_rss_kib"] > 0
    assert "Atari only" in rows["ale", 4]["not_applicable"]
    # 2 ms of trainer work per batch of 4 envs caps the rate at 2,000 steps/s.
    slow = by_system(run_lines(capsys, "classic", "--num-envs", "4", "--workers", "1", "--only", "shmenv",
                               "--trainer-us", "2000"))
    assert 0 < slow["shmenv", 4]["steps_per_sec"] <= 2000


def test_unknown_system_and_negative_trainer_time_are_refused(capsys):
    for args in (["--only", "shmenv,bogus"], ["--trainer-us", "-1"]):
        with pytest.raises(SystemExit) as e:
            bench_main(["--workload", "classic", *args])
        assert e.value.code == 2
    assert "bogus" in capsys.readouterr().err


def test_atari_smoke(capsys):
    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install ale-py)")
    pytest.importorskip("cv2", reason="OpenCV is not installed (pip install opencv-python-headless)")
    only = "single,shmenv,shmenv-async,ale,ale-async,gym-sync"
    rows = by_system(run_lines(capsys, "atari", "--num-envs", "4", "--batch-size", "2", "--only", only))
    for key in (("single", 1), ("shmenv-async", 2), ("ale-async", 2)):
        r = rows[key]
        assert r["steps_per_sec"] > 0, r
        assert r["frames_per_sec"] == pytest.approx(4 * r["steps_per_sec"], abs=4)
    rows = by_system(run_lines(capsys, "atari", "--num-envs", "2", "--workers", "1", "--only", "shmenv,ale,gym-sync"))
    assert all(rows[k, 2]["steps_per_sec"] > 0 for k in ("shmenv", "ale", "gym-sync"))


def test_atari_smoke_with_the_native_plugin(capsys, ale_plugin):
    only = "shmenv-native,shmenv-native-async"
    rows = by_system(run_lines(capsys, "atari", "--num-envs", "4", "--batch-size", "2", "--plugin", ale_plugin,
                               "--only", only))
    r = rows["shmenv-native-async", 2]
    assert r["name"].endswith("native plugin)") and r["steps_per_sec"] > 0
    assert r["frames_per_sec"] == pytest.approx(4 * r["steps_per_sec"], abs=4)
    rows = by_system(run_lines(capsys, "atari", "--num-envs", "2", "--workers", "1", "--plugin", ale_plugin,
                               "--only", "shmenv-native"))
    assert rows["shmenv-native", 2]["steps_per_sec"] > 0


def test_mujoco_smoke_with_the_native_plugin(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo appends its warnings to MUJOCO_LOG.TXT in the working directory
    pytest.importorskip("mujoco", reason="mujoco is not installed (pip install 'gymnasium[mujoco]')")
    pytest.importorskip("gymnasium.envs.mujoco", reason="Gymnasium's MuJoCo envs cannot be imported")
    lib = str(tmp_path / "libmujoco_locomotion.so")
    script = os.path.join(ROOT, "examples", "c", "build_mujoco.sh")
    subprocess.run(["bash", script, lib], check=True, env={**os.environ, "PYTHON": sys.executable})
    only = "single,shmenv,shmenv-native,shmenv-native-async,gym-sync"
    rows = by_system(run_lines(capsys, "mujoco", "--num-envs", "4", "--plugin", lib, "--only", only))
    assert rows["shmenv-native", 4]["name"].endswith("native plugin)")
    assert all(rows[k, 4]["steps_per_sec"] > 0 for k in ("shmenv", "shmenv-native", "gym-sync"))
    rows = by_system(run_lines(capsys, "mujoco", "--num-envs", "4", "--batch-size", "2", "--plugin", lib,
                               "--only", "shmenv-native-async", "--mujoco-env", "Hopper"))
    assert rows["shmenv-native-async", 2]["steps_per_sec"] > 0


def test_hosted_atari_matches_sync_vector_env_with_its_infos(no_leaks):
    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install ale-py)")
    pytest.importorskip("cv2", reason="OpenCV is not installed (pip install opencv-python-headless)")
    import gymnasium as gym
    import numpy as np

    import shmenv
    from shmenv.bench.envs import make_atari

    n = 2
    ref = gym.vector.SyncVectorEnv([make_atari] * n)
    with shmenv.make_vec(make_atari, n, num_workers=2, seed=5, config={"game": "Pong"}) as envs:
        obs, info = envs.reset()
        want, want_info = ref.reset(seed=[5 + i for i in range(n)])
        assert obs.shape == (n, 4, 84, 84) and obs.dtype == np.uint8
        np.testing.assert_array_equal(obs, want)
        rng = np.random.default_rng(0)
        for t in range(40):
            actions = rng.integers(0, 6, n)
            got, exp = envs.step(actions), ref.step(actions)
            for a, b in zip(got[:4], exp[:4]):
                np.testing.assert_array_equal(a, b, err_msg=f"step {t}")
            for key in ("lives", "episode_frame_number", "frame_number"):
                np.testing.assert_array_equal(got[4][key], exp[4][key], err_msg=f"info {key!r}, step {t}")
    ref.close()
