"""No other local user can reach the call channel of a pool of Python-hosted envs.

The call channel (``call``/``get_attr``/``set_attr``, reset options, infos) is a
``socketpair`` per worker process made by the engine before it spawns the worker: there
is no name or listener to connect to. The test runs ``channel_stranger.py`` as root
in a private network namespace, beside a process of another uid that sends a pickle
payload to every abstract Unix socket it sees, through start-up, steady state and a
worker restart: the payload never runs, and the namespace never shows a socket of the
pool's, while the stranger does reach the script's own control listener."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

#: A uid no account uses here: the stranger needs no home, shell or passwd entry.
STRANGER_UID = 61234

SCRIPT = Path(__file__).with_name("channel_stranger.py")


def _namespace_runner() -> list[str]:
    """``unshare -n`` when this process may make a network namespace, else skips."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the stranger is a process of another uid, made with setuid")
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare(1) (util-linux) for a private network namespace")
    probe = subprocess.run([unshare, "-n", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.strip()}")
    return [unshare, "-n"]


def test_a_stranger_cannot_run_code_in_the_trainer_through_the_call_channel():
    runner = _namespace_runner()
    with tempfile.TemporaryDirectory() as workdir:
        os.chmod(workdir, 0o700)  # the stranger cannot create the marker itself
        done = subprocess.run(
            [*runner, sys.executable, str(SCRIPT), str(STRANGER_UID), workdir],
            capture_output=True, text=True, timeout=150,
        )
    assert done.returncode == 0, f"the scenario failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["error"] is None, f"the pool failed beside the stranger: {result['error']}"
    assert result["phases"] == ["started", "steady", "restarted"]
    stranger, control = result["stranger"], result["control"]
    assert stranger["uid"] == STRANGER_UID, f"the stranger ran as uid {stranger['uid']}"
    # The probe works: it found the control listener and sent it the payload.
    assert control["name"] in stranger["seen"] and control["messages"] > 0, result
    # Nothing of the pool's was there to find, and nothing it sent ran.
    assert stranger["seen"] == [control["name"]], f"abstract sockets a stranger could reach: {stranger['seen']}"
    assert result["abstract_sockets_after"] == [control["name"]], result
    assert not result["marker"], "the stranger's pickle ran code in the trainer or a worker"


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of process ``pid``'s sockets (``socket:[N]`` links in ``/proc/<pid>/fd``)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _named_unix_sockets() -> dict[str, str]:
    """Inode -> path of every Unix socket with a name (a file or ``@abstract``) here."""
    named = {}
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) >= 8:
                named[fields[6]] = fields[7]
    return named


def test_no_socket_of_the_pool_has_a_name_anyone_could_connect_to(no_leaks):
    """Without root: every Unix socket the trainer and its workers hold is unnamed (a
    socketpair end), so nothing of the pool's is listed with a path or an abstract name."""
    import gymnasium as gym
    import numpy as np

    import shmenv

    before = _socket_inodes(os.getpid())  # this process's own (another test's Ray, say)
    with shmenv.make_vec(gym.spec("CartPole-v1"), 4, num_workers=2, seed=0) as envs:
        envs.reset()
        envs.step(np.zeros(4, np.int64))
        assert envs.get_attr("spec")[0].id == "CartPole-v1"  # the channel is in use
        named = _named_unix_sockets()
        sockets = {os.getpid(): _socket_inodes(os.getpid()) - before}
        sockets.update({p: _socket_inodes(p) for p in envs.worker_pids})
        assert len(sockets[os.getpid()]) >= 2, "the trainer holds a socket per worker"
        reachable = {p: [named[i] for i in inodes if i in named] for p, inodes in sockets.items()}
    assert not any(reachable.values()), f"sockets of the pool with a name: {reachable}"
