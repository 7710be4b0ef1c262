"""A pool of Python-hosted envs beside a hostile process of another user, run by
``test_channel_security.py`` as root inside a private network namespace
(``unshare -n``: abstract Unix sockets are per namespace, so nothing outside is touched).

The stranger (a forked copy of this script that drops to ``STRANGER_UID``) watches
``/proc/net/unix`` and, through the pool's start-up, steady state and a worker restart,
connects to every abstract socket it sees and sends a length-framed pickle whose
``__reduce__`` would create a marker file as whoever unpickles it (the framing the call
channel used to read). The script prints one JSON object: whether the marker exists,
how many abstract sockets the namespace ever showed, how many connections the stranger
made, and what the pool did meanwhile.

Usage: ``python channel_stranger.py <uid> <workdir>``."""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import sys
import time


class Payload:
    """Creates ``path`` as whoever unpickles it."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def abstract_sockets() -> set[str]:
    """The abstract Unix socket names in this network namespace (``@name``)."""
    names = set()
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            fields = line.split()
            if len(fields) >= 8 and fields[7].startswith("@"):
                names.add(fields[7])
    return names


def stranger(uid: int, marker: str, report_fd: int, stop_fd: int) -> None:
    """Runs as ``uid``: connects to every abstract socket it sees with the payload until
    ``stop_fd`` is readable, then writes what it saw to ``report_fd``."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    message = pickle.dumps(Payload(marker))
    framed = len(message).to_bytes(8, "little") + message
    seen: set[str] = set()
    connections = 0
    os.set_blocking(stop_fd, False)
    while True:
        try:
            if os.read(stop_fd, 1) == b"":  # the script closed its end: done
                break
        except BlockingIOError:
            pass
        for name in abstract_sockets():
            seen.add(name)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.settimeout(0.2)
                s.connect("\0" + name[1:])
                s.sendall(framed)
                connections += 1
            except OSError:
                pass
            finally:
                s.close()
        time.sleep(0.002)
    os.write(report_fd, json.dumps({"seen": sorted(seen), "connections": connections, "uid": os.getuid()}).encode())


class Control:
    """A positive control: an abstract listener of the script's own, which the stranger
    must find and send its payload to (never unpickled here), so a run where it reached
    nothing of the pool's shows that there was nothing to reach."""

    def __init__(self):
        import threading

        self.name = f"shmenv-test-control-{os.getpid()}"
        self.received = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind("\0" + self.name)
        self._listener.listen(64)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(1.0)
                try:
                    while conn.recv(65536):
                        self.received += 1
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


def run_pool(log: list[str]) -> None:
    """Start-up, steady state (steps and calls) and a worker restart, with calls after it."""
    import gymnasium as gym
    import numpy as np

    import shmenv

    act = np.zeros(4, dtype=np.int64)
    with shmenv.make_vec(gym.spec("CartPole-v1"), 4, num_workers=2, max_restarts=2, seed=0) as envs:
        envs.reset()
        log.append("started")
        for _ in range(200):
            envs.step(act)
        assert [s.id for s in envs.get_attr("spec")] == ["CartPole-v1"] * 4
        envs.set_attr("marker", 1)
        log.append("steady")
        os.kill(envs.worker_pids[1], signal.SIGKILL)
        for _ in range(5000):
            *_, infos = envs.step(act)
            if infos.get("restarted_envs"):
                break
        else:
            raise AssertionError("the killed worker was never restarted")
        assert envs.call("get_wrapper_attr", "spec")[3].id == "CartPole-v1"
        for _ in range(200):
            envs.step(act)
        log.append("restarted")


def main() -> int:
    uid, workdir = int(sys.argv[1]), sys.argv[2]
    marker = os.path.join(workdir, "stranger-ran-code-here")
    report_r, report_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()  # before any thread exists
    if pid == 0:
        os.close(report_r)
        os.close(stop_w)
        try:
            stranger(uid, marker, report_w, stop_r)
        finally:
            os._exit(0)
    os.close(report_w)
    os.close(stop_r)
    log: list[str] = []
    names_during: set[str] = set()
    error = None
    control = Control()
    try:
        time.sleep(0.2)  # the stranger is watching before the pool starts
        run_pool(log)
        names_during |= abstract_sockets()
    except Exception as e:  # noqa: BLE001 - reported in the JSON
        error = f"{type(e).__name__}: {e}"
    time.sleep(0.1)
    os.close(stop_w)
    os.waitpid(pid, 0)
    control.close()
    report = json.loads(os.read(report_r, 1 << 20).decode() or "{}")
    time.sleep(0.2)  # a payload run by a worker's os.system would have finished
    print(json.dumps({
        "marker": os.path.exists(marker),
        "phases": log,
        "error": error,
        "stranger": report,
        "control": {"name": "@" + control.name, "messages": control.received},
        "abstract_sockets_after": sorted(names_during),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
