"""A pytest plugin that runs Gymnasium's own vector tests on shmenv: loaded with ``-p``
before the test modules are imported, it replaces ``gymnasium.vector.AsyncVectorEnv``
(and the name in ``gymnasium.vector.async_vector_env``, which ``gymnasium.make_vec``'s
``vectorization_mode="async"`` reaches) with :class:`ShmAsyncVectorEnv`, whose
construction builds ``shmenv.from_fns(env_fns, ...)`` with Gymnasium's keyword arguments
mapped onto shmenv's. Each test's outcome, whether it reached shmenv, and the exception
that failed it are written as JSON lines to the file named by ``SHMENV_SUITE_REPORT``
(``run.py`` reads them and groups the failures by cause)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_REACHED: list[bool] = [False]
"""Set when a test built a ShmAsyncVectorEnv (reset before each test)."""


class _Meta(type):
    """``isinstance(envs, AsyncVectorEnv)`` holds for the pools the adapter builds (and
    for Gymnasium's own, should a test build one directly)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        import shmenv.vector

        return isinstance(obj, (shmenv.vector.ShmVectorEnv, _ORIGINAL[0]))

    def __subclasscheck__(cls, sub: type) -> bool:
        import shmenv.vector

        return issubclass(sub, (shmenv.vector.ShmVectorEnv, _ORIGINAL[0]))


_ORIGINAL: list[type] = []


class ShmAsyncVectorEnv(metaclass=_Meta):
    """``AsyncVectorEnv(env_fns, shared_memory, copy, context, daemon, worker,
    observation_mode, autoreset_mode, max_concurrency)`` as ``shmenv.from_fns``: two
    workers (one when there is one env), Gymnasium's ``copy`` and ``autoreset_mode``, its
    ``observation_mode``, no episode statistics in the infos. ``shared_memory``,
    ``context``, ``daemon`` and ``max_concurrency`` have no shmenv counterpart (shmenv's
    rows are always shared memory, its workers are exec'd processes); a custom ``worker``
    cannot run in shmenv's workers and is refused."""

    def __new__(
        cls,
        env_fns,
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Any = None,
        observation_mode: Any = "same",
        autoreset_mode: Any = "NextStep",
        max_concurrency: int | None = None,
    ):
        import shmenv

        _REACHED[0] = True
        if worker is not None:
            raise NotImplementedError("shmenv runs its own workers: a custom AsyncVectorEnv worker cannot run")
        # observation_mode only when it is not the default: a shmenv without the keyword
        # (an older version, measured as a baseline) still runs the other tests.
        same = isinstance(observation_mode, str) and observation_mode == "same"
        kwargs = {} if same else {"observation_mode": observation_mode}
        return shmenv.from_fns(
            env_fns,
            num_workers=min(2, len(env_fns)),
            copy=copy,
            autoreset_mode=autoreset_mode,
            episode_stats_key="",
            **kwargs,
        )


def pytest_configure(config: pytest.Config) -> None:
    """Patches Gymnasium before any test module imports it."""
    import gymnasium.vector
    import gymnasium.vector.async_vector_env as async_module

    _ORIGINAL.append(gymnasium.vector.AsyncVectorEnv)
    gymnasium.vector.AsyncVectorEnv = ShmAsyncVectorEnv
    async_module.AsyncVectorEnv = ShmAsyncVectorEnv
    gymnasium.AsyncVectorEnv = ShmAsyncVectorEnv  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Notes the test as started (a test that kills the interpreter, such as MuJoCo
    rendering without OpenGL, is then known to the runner) and clears the reached flag."""
    _REACHED[0] = False
    path = os.environ.get("SHMENV_SUITE_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"started": item.nodeid}) + "\n")


def _cause(report: pytest.TestReport) -> str:
    """The exception that failed the test, as ``Type: first line of its message``."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.splitlines()[0][:300] if crash.message else "?"
    return str(report.longrepr).splitlines()[-1][:300] if report.longrepr else "?"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """One JSON line per test: its call outcome (or the setup's when the setup failed or
    skipped), and whether shmenv was reached."""
    path = os.environ.get("SHMENV_SUITE_REPORT")
    if not path:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = "xfail" if hasattr(report, "wasxfail") else report.outcome
        line = {
            "test": report.nodeid,
            "outcome": outcome,
            "reached": _REACHED[0],
            "cause": _cause(report) if report.outcome == "failed" else "",
            "seconds": round(report.duration, 2),
        }
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
