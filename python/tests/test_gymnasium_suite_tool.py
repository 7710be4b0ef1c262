"""``python/tools/gymnasium_suite/run.py``, the runner of Gymnasium's own vector tests on
shmenv, on a small stand-in for Gymnasium's ``tests`` tree (Gymnasium's own tests are not
on PyPI): ``AsyncVectorEnv`` (imported by name, partial'ed, or reached through
``gymnasium.make_vec(..., vectorization_mode="async")``) becomes a shmenv pool, tests that
never build one are not counted, and failures are grouped by cause."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

RUNNER = os.path.join(os.path.dirname(__file__), "..", "tools", "gymnasium_suite", "run.py")

VECTOR_TESTS = '''
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import shmenv


@pytest.mark.parametrize("vectoriser", [AsyncVectorEnv, partial(AsyncVectorEnv, shared_memory=False)])
def test_steps(vectoriser):
    envs = vectoriser([lambda: gym.make("CartPole-v1")] * 2)
    assert isinstance(envs, shmenv.ShmVectorEnv) and isinstance(envs, AsyncVectorEnv)
    envs.reset(seed=0)
    envs.step(np.zeros(2, np.int64))
    envs.close()


def test_make_vec_async():
    envs = gym.make_vec("CartPole-v1", 2, vectorization_mode="async")
    assert isinstance(envs.unwrapped, shmenv.ShmVectorEnv)
    envs.close()


def test_fails_the_same_way_twice():
    envs = AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    envs.close()
    raise KeyError("on purpose")


def test_sync_only():
    SyncVectorEnv([lambda: gym.make("CartPole-v1")]).close()
'''


@pytest.mark.timeout(300)
def test_runner_counts_the_tests_that_reach_shmenv_and_groups_failures(tmp_path):
    for part in ("tests/vector", "tests/wrappers/vector"):
        (tmp_path / part).mkdir(parents=True)
        (tmp_path / part / "__init__.py").write_text("")
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "wrappers" / "__init__.py").write_text("")
    (tmp_path / "tests" / "vector" / "test_stand_in.py").write_text(textwrap.dedent(VECTOR_TESTS))
    report = tmp_path / "report.jsonl"
    out = subprocess.run(
        [sys.executable, RUNNER, "--gymnasium-src", str(tmp_path), "--report", str(report), "--timeout", "120"],
        capture_output=True, text=True, timeout=280,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "reached shmenv: 4 tests (+0 skipped): 3 passed (75.0%), 1 failed" in out.stdout, out.stdout[-3000:]
    assert "did not reach shmenv: 1 ({'passed': 1})" in out.stdout, out.stdout[-3000:]
    assert "   1  KeyError: 'on purpose'" in out.stdout, out.stdout[-3000:]
    assert len(report.read_text().splitlines()) == 5
