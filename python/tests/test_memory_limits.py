"""Env counts the memory cannot hold raise ``NotEnoughMemoryError`` (a ``BuildError`` and a
``MemoryError``) before any worker starts: the largest count in this machine's memory, and
``make_vec("CartPole-v1", 60_000_000)`` in a 2 GiB memory cgroup made for the test (cgroup
v1 or v2; skipped with the reason where none can be made). A worker the OOM killer ends
while the pool steps raises ``WorkerDiedError`` saying so, with ``oom_kill`` True (in a
small memory cgroup made for the test)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import FIXTURES

import shmenv

#: The most envs a pool may have.
MAX_ENVS = 2**30 - 1


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("/proc/meminfo has no MemAvailable")


@pytest.mark.timeout(120)
def test_the_largest_env_count_is_refused_before_any_worker_starts(no_leaks):
    # At least ~155 bytes per env (region and worker state): about 155 GiB.
    if _mem_available() > 150 << 30:
        pytest.skip(f"this machine has {_mem_available()} bytes available, enough for {MAX_ENVS} envs")
    with pytest.raises(shmenv.NotEnoughMemoryError) as e:
        shmenv.make_vec("CartPole-v1", MAX_ENVS, num_workers=2)
    err = e.value
    assert isinstance(err, shmenv.BuildError) and isinstance(err, MemoryError)
    assert err.num_envs == MAX_ENVS
    assert 0 <= err.fits < MAX_ENVS
    assert err.available is not None and err.needed > err.available
    message = str(err)
    for part in (f"for {MAX_ENVS} envs", "the workers' envs", "MemAvailable is", f"At most {err.fits} envs fit"):
        assert part in message, (part, message)


def _own_memory_cgroup() -> tuple[Path, bool]:
    """This process's memory cgroup directory, and whether it is cgroup v1's; raises
    ``LookupError`` with the reason when there is none to use."""
    cgroups = Path("/proc/self/cgroup").read_text().splitlines()
    mounts = [line.split(" - ") for line in Path("/proc/self/mountinfo").read_text().splitlines() if " - " in line]

    def mount(fstype: str, option: str | None) -> tuple[str, Path] | None:
        for head, tail in mounts:
            h, t = head.split(" "), tail.split(" ")
            if t[0] == fstype and (option is None or option in t[2].split(",")):
                return h[3], Path(h[4])
        return None

    def under(found: tuple[str, Path] | None, path: str) -> Path:
        if found is None:
            raise LookupError("the memory cgroup file system is not mounted here")
        root, point = found
        rel = path[len(root.rstrip("/")) :] if path.startswith(root.rstrip("/")) else None
        if rel is None:
            raise LookupError(f"cgroup {path} is outside the mount of {root}")
        return point / rel.lstrip("/")

    for line in cgroups:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return under(mount("cgroup", "memory"), path), True
    v2 = [line[3:] for line in cgroups if line.startswith("0::")]
    if not v2:
        raise LookupError("no memory cgroup")
    return under(mount("cgroup2", None), v2[0]), False


def _make_cgroup(limit: int) -> Path:
    """A memory cgroup of `limit` bytes (no swap) under this process's own; raises
    ``LookupError``/``OSError`` with the reason when it cannot be made."""
    parent, v1 = _own_memory_cgroup()
    if not v1:
        control = parent / "cgroup.subtree_control"
        if "memory" not in control.read_text().split():
            # Under cgroup v2 a cgroup with processes of its own cannot delegate it.
            control.write_text("+memory")
    path = parent / f"shmenv-pytest-{os.getpid()}"
    path.mkdir()
    try:
        if v1:
            (path / "memory.limit_in_bytes").write_text(str(limit))
            swap = path / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(limit))
        else:
            (path / "memory.max").write_text(str(limit))
            swap = path / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
    except OSError:
        path.rmdir()
        raise
    return path


_CHILD = textwrap.dedent(
    """
    import os, sys, time
    with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    import shmenv
    started = time.monotonic()
    try:
        shmenv.make_vec("CartPole-v1", 60_000_000, num_workers=2)
    except shmenv.NotEnoughMemoryError as e:
        print(f"refused in {time.monotonic() - started:.3f}s fits={e.fits} needed={e.needed} "
              f"available={e.available}: {e}")
        sys.exit(0)
    print("NOT REFUSED")
    sys.exit(1)
    """
)


def _run_in_cgroup(limit: int, script: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Runs ``python -c script cgroup *args`` in a memory cgroup of ``limit`` bytes made for
    it (the script moves itself in), then removes the cgroup; skips the test with the
    reason when none can be made here."""
    try:
        cgroup = _make_cgroup(limit)
    except (LookupError, OSError) as e:
        pytest.skip(f"no memory cgroup can be made for this test: {e}")
    try:
        out = subprocess.run(
            [sys.executable, "-c", script, str(cgroup), *args], capture_output=True, text=True, timeout=150
        )
    finally:
        # The child is reaped: its cgroup empties (the kernel may take a moment).
        for _ in range(100):
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.05)
    return out, cgroup


@pytest.mark.timeout(180)
def test_sixty_million_envs_in_a_2gib_cgroup_raise_not_enough_memory():
    out, cgroup = _run_in_cgroup(2 << 30, _CHILD)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "refused in" in out.stdout and "for 60000000 envs" in out.stdout, out.stdout
    assert f"{cgroup} allows 2.00 GiB" in out.stdout, out.stdout
    assert "cgroup v" in out.stdout and "the workers' envs" in out.stdout, out.stdout


_GROWING_CHILD = textwrap.dedent(
    """
    import os, sys
    with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    sys.path.insert(0, sys.argv[2])
    import numpy as np
    import shmenv
    envs = shmenv.make_vec("shmenv_fixtures.growing:GrowingEnv", 1, num_workers=1)
    envs.reset(seed=0)
    envs.step(np.zeros(1, np.int64))
    envs.set_attr("grow_mib", 4096)
    try:
        envs.step(np.zeros(1, np.int64))
    except shmenv.WorkerDiedError as e:
        print(f"died: oom_kill={e.oom_kill} exit={e.exit!r} worker={e.worker} env_ids={e.env_ids}: {e}")
        sys.exit(0)
    print("NOT KILLED")
    sys.exit(1)
    """
)


@pytest.mark.timeout(180)
def test_a_worker_the_oom_killer_ends_while_stepping_raises_worker_died_saying_so():
    out, cgroup = _run_in_cgroup(512 << 20, _GROWING_CHILD, FIXTURES)
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "died: oom_kill=True exit='killed by signal 9" in out.stdout, out.stdout + out.stderr
    assert "worker=0 env_ids=[0]" in out.stdout, out.stdout
    assert "was killed by the OOM killer (memory)" in out.stdout, out.stdout
    assert f"oom_kill in {cgroup}/memory" in out.stdout, out.stdout
