"""Shared helpers: process and fd accounting for the leak checks."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

# The pitfall fixtures are a package of their own (tests/fixtures/shmenv_fixtures); workers
# find it because they inherit this process's sys.path.
FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
if FIXTURES not in sys.path:
    sys.path.insert(0, FIXTURES)


def children(pid: int | None = None) -> set[int]:
    """Direct children of `pid` (this process by default), zombies included."""
    pid = pid or os.getpid()
    out: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.update(int(c) for c in f.read().split())
        except FileNotFoundError:
            pass
    return out


def alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pids, timeout: float = 5.0) -> list[int]:
    """Waits until no pid in `pids` is alive; returns those still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if alive(p)]
    return left


def step_alike(envs, ref, actions, where: str):
    """Steps a shmenv pool and its reference vector env with the same actions, checks that
    observations, rewards (as float32) and flags are equal, and returns ``(obs, infos,
    ref_infos, terminated | truncated)``."""
    obs, rew, term, trunc, infos = envs.step(actions)
    r_obs, r_rew, r_term, r_trunc, r_infos = ref.step(actions)
    np.testing.assert_array_equal(obs, r_obs, err_msg=where)
    np.testing.assert_array_equal(rew, r_rew.astype(np.float32), err_msg=where)
    np.testing.assert_array_equal(term, r_term, err_msg=where)
    np.testing.assert_array_equal(trunc, r_trunc, err_msg=where)
    return obs, infos, r_infos, term | trunc


def lockstep_with_partial_resets(envs, ref, n: int, same_step: bool, steps: int = 400) -> int:
    """Steps ``envs`` and ``ref`` alike with random actions for ``steps`` steps (checking
    every result, and the final observations under same-step autoreset), resets every
    other env alike every 50 steps, and returns how many episodes ended."""
    rng = np.random.default_rng(1)
    ends = 0
    for t in range(steps):
        actions = rng.integers(0, 2, size=n)
        _, infos, ref_infos, done = step_alike(envs, ref, actions, f"step {t}")
        if same_step and done.any():
            for e in np.flatnonzero(done):
                np.testing.assert_array_equal(infos["final_obs"][e], ref_infos["final_obs"][e])
        ends += int(done.sum())
        if t % 50 == 49:
            # A partial reset of every other env, the trainer's and the workers' alike.
            mask = np.arange(n) % 2 == (t // 50) % 2
            obs, _ = envs.reset(seed=t, options={"reset_mask": mask})
            want, _ = ref.reset(seed=t, options={"reset_mask": mask})
            np.testing.assert_array_equal(obs, want, err_msg=f"partial reset at {t}")
    return ends


def keep_up(obs: np.ndarray) -> np.ndarray:
    """A CartPole controller that keeps the pole up past the 500-step limit."""
    x, x_dot, theta, theta_dot = obs.T
    return (theta * 10 + theta_dot * 2 + x * 0.1 + x_dot * 0.5 > 0).astype(np.int64)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves a child process or an fd behind."""
    before_children, before_fds = children(), open_fds()
    yield
    import gc

    gc.collect()
    extra = children() - before_children
    assert not [p for p in extra if alive(p)], f"child processes left behind: {extra}"
    assert not extra, f"zombie children left behind: {extra}"
    assert open_fds() <= before_fds, f"fds leaked: {before_fds} -> {open_fds()}"


#: What ``examples/cpp/build_ale.sh`` exits with when the ale-py sdist or cmake cannot be had.
BUILD_TOOLS_MISSING = 75


@pytest.fixture(scope="session")
def ale_plugin() -> str:
    """The ALE plugin (``examples/cpp/ale_atari.cpp``), built by ``examples/cpp/build_ale.sh``
    into target/plugins (the C++ ALE from the installed ale-py's sdist, cached under target/;
    the plugin rebuilt when its sources are newer); skipped with the reason when ale-py or
    the build tools are missing."""
    import shutil
    import subprocess

    pytest.importorskip("ale_py", reason="ale-py is not installed (pip install ale-py)")
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("no C++ compiler to build the ALE plugin (set CXX)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = os.path.join(root, "target", "plugins", "libale_atari.so")
    script = os.path.join(root, "examples", "cpp", "build_ale.sh")
    done = subprocess.run(["bash", script, out], env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True)
    if done.returncode == BUILD_TOOLS_MISSING:
        pytest.skip(f"the ALE plugin cannot be built here: {done.stderr.strip()}")
    if done.returncode != 0:
        pytest.fail(f"build_ale.sh failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return out


@pytest.fixture(scope="session")
def ale_roms() -> str:
    """The folder of ale-py's ROMs (the ALE plugin's ``rom_dir``)."""
    pytest.importorskip("ale_py.roms", reason="ale-py is not installed (pip install ale-py)")
    from shmenv.assets import ale_roms as roms

    return roms()


def shmenv_program() -> Path | None:
    """The ``shmenv`` program built in this checkout (``cargo test`` builds target/debug's)."""
    root = Path(__file__).resolve().parents[2]
    for profile in ("debug", "release"):
        candidate = root / "target" / profile / "shmenv"
        if candidate.is_file():
            return candidate
    return None
