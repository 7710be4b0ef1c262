"""No other local user can reach the call channel of a pool of Python-hosted envs.

The call channel (``call``/``get_attr``/``set_attr``, reset options, infos) is a
``socketpair`` per worker process made by the engine before it spawns the worker: there
is no name or listener to connect to. The test runs ``call_channel_stranger.py`` as root
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

SCRIPT = Path(__file__).with_name("call_channel_stranger.py")


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
